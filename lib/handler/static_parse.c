/* The sans-I/O parts of the static-file handler: see static.h. */
#include "static.h"

#include <string.h>
#include <time.h>

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Close the segment out[start..*n): drop "." and empty ones, refuse ".."
 * and hidden ones. */
static int end_segment(char *out, size_t start, size_t *n, int hidden) {
  size_t sl = *n - start;
  if (sl == 0 || (sl == 1 && out[start] == '.')) {
    *n = start;
    return 0;
  }
  if (sl == 2 && out[start] == '.' && out[start + 1] == '.')
    return TERN__SP_ESCAPE;
  if (out[start] == '.' && !hidden)
    return TERN__SP_HIDDEN;
  return 1;
}

int tern__static_path(const char *in, size_t len, int hidden, char *out,
                      size_t cap, int *dir) {
  size_t n = 0, start = 0, i = 0;
  int rc;
  *dir = 0;
  if (cap == 0)
    return TERN__SP_LONG;
  while (i <= len) {
    int c;
    if (i == len) {
      c = '/';
      i++;
    } else if (in[i] == '%') {
      int h, l;
      if (len - i < 3 || (h = hexval((unsigned char)in[i + 1])) < 0 ||
          (l = hexval((unsigned char)in[i + 2])) < 0)
        return TERN__SP_BAD;
      c = h * 16 + l;
      i += 3;
    } else {
      c = (unsigned char)in[i++];
    }
    if (c == 0 || c == '\\' || c < 0x20 || c == 0x7f)
      return TERN__SP_BAD;
    if (c == '/') {
      if ((rc = end_segment(out, start, &n, hidden)) < 0)
        return rc;
      if (rc == 1) {
        if (n + 1 >= cap)
          return TERN__SP_LONG;
        out[n++] = '/';
      }
      start = n;
      continue;
    }
    if (n + 1 >= cap)
      return TERN__SP_LONG;
    out[n++] = (char)c;
  }
  /* A trailing '/' of the input (or none at all). */
  *dir = len == 0 || in[len - 1] == '/';
  if (n > 0 && out[n - 1] == '/')
    n--;
  out[n] = '\0';
  return (int)n;
}

/* ---- Range ---- */

static const char *skip_ows(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\t'))
    p++;
  return p;
}

/* Digits into *v; 0 when none or overflow. */
static int parse_u64(const char **pp, const char *e, uint64_t *v) {
  const char *p = *pp;
  uint64_t x = 0;
  if (p >= e || *p < '0' || *p > '9')
    return 0;
  while (p < e && *p >= '0' && *p <= '9') {
    if (x > (UINT64_MAX - 9) / 10)
      return 0;
    x = x * 10 + (uint64_t)(*p++ - '0');
  }
  *pp = p;
  *v = x;
  return 1;
}

int tern__static_ranges(const char *v, size_t len, uint64_t size,
                        tern__range *out, int max) {
  const char *p = v, *e = v + len;
  int n = 0, seen = 0;
  if (len < 6 || memcmp(v, "bytes=", 6) != 0)
    return 0;
  p += 6;
  for (;;) {
    uint64_t a, b;
    int has_a, has_b;
    p = skip_ows(p, e);
    if (p < e && *p == ',') { /* empty list elements are allowed */
      p++;
      continue;
    }
    if (p >= e)
      break;
    has_a = parse_u64(&p, e, &a);
    if (p >= e || *p != '-')
      return 0;
    p++;
    has_b = parse_u64(&p, e, &b);
    if (!has_a && !has_b)
      return 0;
    if (has_a && has_b && b < a)
      return 0;
    if (++seen > max)
      return 0;
    p = skip_ows(p, e);
    if (p < e && *p != ',')
      return 0;
    /* Satisfiable? */
    if (!has_a) { /* suffix: the last b bytes */
      if (b == 0 || size == 0)
        continue;
      a = b >= size ? 0 : size - b;
      b = size - 1;
    } else {
      if (a >= size)
        continue;
      if (!has_b || b >= size)
        b = size - 1;
    }
    out[n].first = a;
    out[n].last = b;
    n++;
  }
  if (seen == 0)
    return 0;
  if (n == 0)
    return -1;
  /* Sort (insertion: at most `max`) and merge overlapping or adjacent. */
  for (int i = 1; i < n; i++) {
    tern__range t = out[i];
    int j = i - 1;
    while (j >= 0 && out[j].first > t.first) {
      out[j + 1] = out[j];
      j--;
    }
    out[j + 1] = t;
  }
  int m = 0;
  for (int i = 1; i < n; i++) {
    if (out[i].first <= out[m].last + 1) {
      if (out[i].last > out[m].last)
        out[m].last = out[i].last;
    } else {
      out[++m] = out[i];
    }
  }
  return m + 1;
}

/* ---- Entity tags ---- */

int tern__static_etag_match(const char *v, size_t len, const char *etag,
                            size_t etag_len, int weak) {
  const char *p = v, *e = v + len;
  for (;;) {
    int is_weak = 0;
    const char *t;
    while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
      p++;
    if (p >= e)
      return 0;
    if (*p == '*')
      return 1;
    if (e - p >= 2 && p[0] == 'W' && p[1] == '/') {
      is_weak = 1;
      p += 2;
    }
    if (p >= e || *p != '"')
      return 0; /* malformed: no match */
    t = p++;
    while (p < e && *p != '"')
      p++;
    if (p >= e)
      return 0;
    p++;
    if ((weak || !is_weak) && (size_t)(p - t) == etag_len &&
        memcmp(t, etag, etag_len) == 0)
      return 1;
  }
}

/* ---- HTTP dates ---- */

static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
static const char wdays[] = "SunMonTueWedThuFriSat";

static int month_of(const char *p) {
  for (int i = 0; i < 12; i++)
    if (memcmp(months + 3 * i, p, 3) == 0)
      return i;
  return -1;
}

static int digits(const char *p, int n) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      return -1;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

/* Days since the epoch of a civil date (proleptic Gregorian). */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int hms(const char *p, int *h, int *mi, int *s) {
  if (p[2] != ':' || p[5] != ':')
    return -1;
  *h = digits(p, 2);
  *mi = digits(p + 3, 2);
  *s = digits(p + 6, 2);
  if (*h < 0 || *h > 23 || *mi < 0 || *mi > 59 || *s < 0 || *s > 60)
    return -1;
  return 0;
}

int tern__http_date_parse(const char *v, size_t len, int64_t *t) {
  int d, m, y, h, mi, s;
  char buf[64];
  if (len >= sizeof buf)
    return -1;
  memcpy(buf, v, len);
  buf[len] = '\0';
  if (len == 29 && buf[3] == ',' && buf[4] == ' ' && buf[7] == ' ' &&
      buf[11] == ' ' && buf[16] == ' ' && buf[25] == ' ' &&
      memcmp(buf + 26, "GMT", 3) == 0) {
    /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
    d = digits(buf + 5, 2);
    m = month_of(buf + 8);
    y = digits(buf + 12, 4);
    if (hms(buf + 17, &h, &mi, &s) < 0)
      return -1;
  } else if (len == 24 && buf[3] == ' ' && buf[7] == ' ' && buf[10] == ' ' &&
             buf[19] == ' ') {
    /* asctime: "Sun Nov  6 08:49:37 1994" */
    m = month_of(buf + 4);
    d = buf[8] == ' ' ? digits(buf + 9, 1) : digits(buf + 8, 2);
    y = digits(buf + 20, 4);
    if (hms(buf + 11, &h, &mi, &s) < 0)
      return -1;
  } else {
    /* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" */
    const char *c = memchr(buf, ',', len);
    if (c == NULL || (size_t)(buf + len - c) != 24 || c[1] != ' ' ||
        c[4] != '-' || c[8] != '-' || c[11] != ' ' ||
        memcmp(c + 20, " GMT", 4) != 0)
      return -1;
    d = digits(c + 2, 2);
    m = month_of(c + 5);
    y = digits(c + 9, 2);
    if (y >= 0)
      y += y < 70 ? 2000 : 1900; /* RFC 9110 5.6.7: within 50 years */
    if (hms(c + 12, &h, &mi, &s) < 0)
      return -1;
  }
  if (d < 1 || d > 31 || m < 0 || y < 0)
    return -1;
  *t = days_from_civil(y, m + 1, d) * 86400 + h * 3600 + mi * 60 + s;
  return 0;
}

void tern__http_date_format(int64_t t, char out[30]) {
  int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  int64_t secs = t - days * 86400;
  /* civil_from_days */
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t y = yoe + era * 400;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  int d = (int)(doy - (153 * mp + 2) / 5 + 1);
  int m = (int)(mp < 10 ? mp + 3 : mp - 9);
  int wd = (int)(((days % 7) + 11) % 7); /* 1970-01-01 was a Thursday */
  int h = (int)(secs / 3600), mi = (int)(secs / 60 % 60), s = (int)(secs % 60);
  y += m <= 2;
  if (y < 0 || y > 9999)
    y = y < 0 ? 0 : 9999;
  memcpy(out, wdays + 3 * wd, 3);
  out[3] = ',';
  out[4] = ' ';
  out[5] = (char)('0' + d / 10);
  out[6] = (char)('0' + d % 10);
  out[7] = ' ';
  memcpy(out + 8, months + 3 * (m - 1), 3);
  out[11] = ' ';
  out[12] = (char)('0' + y / 1000);
  out[13] = (char)('0' + y / 100 % 10);
  out[14] = (char)('0' + y / 10 % 10);
  out[15] = (char)('0' + y % 10);
  out[16] = ' ';
  out[17] = (char)('0' + h / 10);
  out[18] = (char)('0' + h % 10);
  out[19] = ':';
  out[20] = (char)('0' + mi / 10);
  out[21] = (char)('0' + mi % 10);
  out[22] = ':';
  out[23] = (char)('0' + s / 10);
  out[24] = (char)('0' + s % 10);
  memcpy(out + 25, " GMT", 5);
}

/* ---- Conditionals (RFC 9110 13.2.2) ---- */

int tern__static_conds(const tern__conds *c, const char *etag, size_t etag_len,
                       int64_t mtime) {
  int64_t t;
  if (c->if_match != NULL) {
    if (!tern__static_etag_match(c->if_match, c->if_match_len, etag, etag_len,
                                 0))
      return 412;
  } else if (c->if_unmodified_since != NULL &&
             tern__http_date_parse(c->if_unmodified_since,
                                   c->if_unmodified_since_len, &t) == 0) {
    if (mtime > t)
      return 412;
  }
  if (c->if_none_match != NULL) {
    if (tern__static_etag_match(c->if_none_match, c->if_none_match_len, etag,
                                etag_len, 1))
      return 304;
  } else if (c->if_modified_since != NULL &&
             tern__http_date_parse(c->if_modified_since,
                                   c->if_modified_since_len, &t) == 0) {
    if (mtime <= t)
      return 304;
  }
  return 0;
}

int tern__static_if_range(const tern__conds *c, const char *etag,
                          size_t etag_len, int64_t mtime) {
  int64_t t;
  const char *v = c->if_range;
  size_t n = c->if_range_len;
  if (v == NULL)
    return 1;
  while (n > 0 && (*v == ' ' || *v == '\t')) {
    v++;
    n--;
  }
  while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
    n--;
  if (n > 0 && (v[0] == '"' || v[0] == 'W'))
    return n == etag_len && memcmp(v, etag, n) == 0; /* strong only */
  if (tern__http_date_parse(v, n, &t) == 0)
    return t == mtime;
  return 0;
}

/* ---- Accept-Encoding ---- */

static int ieq(const char *a, size_t n, const char *lit) {
  size_t l = strlen(lit);
  if (n != l)
    return 0;
  for (size_t i = 0; i < n; i++) {
    int ch = (unsigned char)a[i];
    if (ch >= 'A' && ch <= 'Z')
      ch += 32;
    if (ch != lit[i])
      return 0;
  }
  return 1;
}

/* A qvalue ("1", "1.000", "0.5") in thousandths; -1 when malformed. */
static int qvalue(const char *p, size_t n) {
  int v;
  if (n == 0 || n > 5 || (p[0] != '0' && p[0] != '1'))
    return -1;
  v = (p[0] - '0') * 1000;
  if (n == 1)
    return v;
  if (p[1] != '.')
    return -1;
  for (size_t i = 2, scale = 100; i < n; i++, scale /= 10) {
    if (p[i] < '0' || p[i] > '9')
      return -1;
    v += (p[i] - '0') * (int)scale;
  }
  return v > 1000 ? -1 : v;
}

void tern__static_accept(const char *v, size_t len, int q[TERN__ENC_N]) {
  int set[TERN__ENC_N] = {0, 0, 0};
  int star = -1;
  const char *p = v, *e;
  for (int i = 0; i < TERN__ENC_N; i++)
    q[i] = 0;
  /* No field: `len` is whatever the caller's variable held (the lookup
   * leaves it untouched), so it is not read. */
  if (v == NULL)
    return;
  e = v + len;
  while (p < e) {
    const char *tok, *te;
    int qv = 1000, idx = -1;
    while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
      p++;
    tok = p;
    while (p < e && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
      p++;
    te = p;
    /* Parameters: only q matters. */
    for (;;) {
      p = skip_ows(p, e);
      if (p >= e || *p != ';')
        break;
      p = skip_ows(p + 1, e);
      const char *pn = p;
      while (p < e && *p != '=' && *p != ',' && *p != ';')
        p++;
      if (p < e && *p == '=') {
        const char *pv = ++p;
        while (p < e && *p != ',' && *p != ';' && *p != ' ' && *p != '\t')
          p++;
        if (p - pn >= 2 && (pn[0] == 'q' || pn[0] == 'Q') && pn[1] == '=')
          qv = qvalue(pv, (size_t)(p - pv));
      }
    }
    while (p < e && *p != ',')
      p++; /* junk up to the next element */
    if (qv < 0 || te == tok)
      continue;
    if (ieq(tok, (size_t)(te - tok), "br"))
      idx = TERN__ENC_BR;
    else if (ieq(tok, (size_t)(te - tok), "zstd"))
      idx = TERN__ENC_ZSTD;
    else if (ieq(tok, (size_t)(te - tok), "gzip") ||
             ieq(tok, (size_t)(te - tok), "x-gzip"))
      idx = TERN__ENC_GZIP;
    else if (te - tok == 1 && *tok == '*')
      star = qv;
    if (idx >= 0) {
      q[idx] = qv;
      set[idx] = 1;
    }
  }
  if (star >= 0)
    for (int i = 0; i < TERN__ENC_N; i++)
      if (!set[i])
        q[i] = star;
}
