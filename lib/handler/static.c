/* The static-file handler (tern_static_*): files under a root directory,
 * with conditional requests, ranges and precompressed siblings.
 *
 * Threads: the handler runs on the request's worker and never blocks it.
 * Opening (openat2 with RESOLVE_BENEATH, or an equivalent check where the
 * kernel lacks it) and fstat run on libuv's pool (uv_queue_work); the
 * body goes by sendfile (plain HTTP/1.1), or block by block into one
 * buffer per response (a block of the worker's pool), read on the worker
 * where the page cache holds it (preadv2 with RWF_NOWAIT) and with
 * uv_fs_read on the pool where it does not. The next block is read only
 * once the previous one was written (tern_response_write's done
 * callback): each response holds at most one block however slow its
 * client, on every carrier (HTTP/1.1, TLS, HTTP/2, HTTP/3).
 *
 * A file that was served lately answers from the open-file cache below
 * (in memory, or through a descriptor kept open), without the pool.
 *
 * The pure parts (paths, Range, conditionals, dates, Accept-Encoding,
 * MIME) are in static_parse.c and mime.c. */
#include "core/worker.h"
#include "static.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/openat2.h>
#endif

struct tern_static {
  /* Its server's allocator, kept: a tern_static outlives the servers it
   * serves (tern_static_free comes after them). */
  tern_allocator alloc;
  int rootfd;
  char *root_real; /* the root's real path, for the check without openat2 */
  size_t root_real_len;
  char *index;
  char *cache_control;
  tern_header *headers; /* the options' extra fields, in one block */
  size_t nheaders;
  char *fallback; /* normalised, below the root; NULL: none */
  size_t fallback_len;
  unsigned flags;
  size_t block;
  uv_mutex_t lock; /* the cache, shared by the workers */
  struct centry *cache[256];
  /* Jobs of descriptor hits, kept for the next (st->lock): at most
   * JOBS_KEEP, from st's allocator. */
  void *free_jobs;
  unsigned nfree_jobs;
  /* Set once the root's file system refused a read with RWF_NOWAIT:
   * every block then goes through the pool. */
  _Atomic int no_nowait;
};

/* The open-file cache: what the pool found for a path, by normalised
 * path, trailing '/' and Accept-Encoding q-values (which pick the
 * sibling), for CACHE_TTL_NS after it was opened. A small file (up to
 * CACHE_MAX bytes) is kept in memory: a hit is answered on the worker
 * from the handler's stack. A larger one keeps an open descriptor (a dup
 * of the one the pool opened): a hit is answered on the worker with
 * sendfile from it (plain HTTP/1.1; block reads for the rest), its
 * job from a free list: no open, fstat or close on the pool, and no
 * allocation. Reads and sendfile give their offsets, so one descriptor
 * serves every worker at once. Within that time a changed file is still
 * served as it was, under its old ETag (a file cut short under a
 * response ends that response early, as when the pool opened it). */
#define CACHE_SLOTS 256
/* A key's set: CACHE_WAYS slots, so that keys seldom evict each other
 * (20 files in 256 direct slots would collide about every other time). */
#define CACHE_WAYS 4
#define CACHE_MAX 16384
#define CACHE_TTL_NS 1000000000ull
#define JOBS_KEEP 256
/* "\"" ino "-" size "-" mtime_ns ("-" encoding) "\"": three 64-bit
 * numbers in hex, an encoding's name. */
#define ETAG_MAX 80
typedef struct centry {
  int refs; /* st->lock */
  int gone; /* replaced: freed by the last unref */
  uint64_t stamp;
  int q[TERN__ENC_N];
  int dir, enc;
  uint64_t size, ino, mtime_ns;
  int64_t mtime;
  size_t klen, rlen;
  char *key, *rpath, *data; /* data: a small file's bytes, or NULL */
  int fd;                   /* a larger file's descriptor, or -1 */
  /* What a hit answers with, made once when the entry is: the validators
   * and the type. */
  const char *type;
  size_t elen;
  char etag[ETAG_MAX];
  char lm[30];
} centry;

static void *st_alloc(const tern_static *st, size_t n) {
  return st->alloc.malloc(n, st->alloc.user);
}

static void st_free(const tern_static *st, void *p) {
  if (p != NULL)
    st->alloc.free(p, st->alloc.user);
}

/* A copy of C string `v` (NULL: none). */
static char *st_strdup(const tern_static *st, const char *v) {
  size_t n = strlen(v) + 1;
  char *c = st_alloc(st, n);
  if (c != NULL)
    memcpy(c, v, n);
  return c;
}

static void centry_free(const tern_static *st, centry *e) {
  if (e->fd >= 0)
    close(e->fd);
  st_free(st, e->key);
  st_free(st, e->rpath);
  st_free(st, e->data);
  st_free(st, e);
}

#define PATH_CAP 4096

enum { J_OK = 0, J_NOTFOUND, J_REDIRECT, J_FORBIDDEN, J_ERROR };

typedef struct {
  uv_work_t work;
  uv_fs_t fs;
  uv_loop_t *loop;
  tern__worker *w;
  tern_server *srv;
  tern_request *r;
  tern_static *st;
  int head;
  int q[TERN__ENC_N];
  int dir;       /* the request path ended with '/' */
  int fell_back; /* the path is the fallback file's */
  /* Pool thread results. */
  int result;
  int fd;
  int enc; /* TERN__ENC_* served, or -1 for identity */
  uint64_t size;
  int64_t mtime;
  uint64_t ino, mtime_ns;
  /* Body state. */
  tern__range ranges[TERN__MAX_RANGES];
  int nranges, cur; /* cur: the range being sent */
  uint64_t off;     /* next byte of ranges[cur] to read */
  int multipart;
  int sendfile;  /* try sendfile(2) for the next bytes (plain HTTP/1.1) */
  int mem;       /* the whole file is in buf (read on the pool) */
  int stack;     /* the job lives on the handler's stack (a cache hit) */
  centry *entry; /* a cache hit's entry: buf is its data, or fd its fd */
  int kept;      /* a descriptor hit's job: back to st's free list */
  void *next;    /* on st's free list */
  const char *type;
  char boundary[24];
  char *buf;
  size_t bufcap; /* buf is a large block of this size (tern__big_get) */
  /* Bytes read on the worker (preadv2 RWF_NOWAIT) since the last read
   * on the pool. */
  uint64_t nowait_read;
  size_t plen;
  size_t klen; /* the request's normalised path: path[0..klen) */
  char path[PATH_CAP];
} job;

static const size_t static_ends[] = {TERN__END(tern_static_options, block_size),
                                     TERN__END(tern_static_options, fallback)};

#define STATIC_FIELDS 16 /* extra fields at most */

void tern_static_options_init_size(tern_static_options *out, size_t size) {
  tern_static_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof *o);
  o->version = TERN_STATIC_OPTIONS_VERSION;
  o->size = sizeof *o;
  o->index = "index.html";
  o->block_size = 256 * 1024;
  tern__abi_init(out, size, &d, static_ends, TERN_STATIC_OPTIONS_VERSION);
}

/* The options' extra fields, names and values in one block after the
 * array. */
static int copy_fields(tern_static *st, const tern_header *h, size_t n) {
  size_t i, bytes = 0;
  char *o;
  if (n == 0)
    return 0;
  for (i = 0; i < n; i++)
    bytes += h[i].name_len + h[i].value_len;
  if ((st->headers = st_alloc(st, n * sizeof(*h) + bytes)) == NULL)
    return TERN_ENOMEM;
  o = (char *)(st->headers + n);
  for (i = 0; i < n; i++) {
    st->headers[i].name = o;
    memcpy(o, h[i].name, h[i].name_len);
    o += h[i].name_len;
    st->headers[i].name_len = h[i].name_len;
    st->headers[i].value = o;
    if (h[i].value_len > 0)
      memcpy(o, h[i].value, h[i].value_len);
    o += h[i].value_len;
    st->headers[i].value_len = h[i].value_len;
  }
  st->nheaders = n;
  return 0;
}

/* A file server with allocator `a`; bad options are logged through
 * `srv` (NULL: stderr). *out is set on success only. */
static int static_new(tern_server *srv, const tern_allocator *a,
                      const tern_static_options *in, tern_static **out) {
  tern_static_options o;
  tern_static *st;
  char real[PATH_MAX], why[160];
  const char *bad = NULL;

  if (in == NULL || out == NULL)
    return TERN_EINVAL;
  tern_static_options_init_size(&o, sizeof(o));
  if (tern__abi_read(&o, sizeof(o), in, static_ends,
                     TERN_STATIC_OPTIONS_VERSION, why, sizeof(why)) != 0)
    bad = why;
  else if (o.root == NULL)
    bad = "no root";
  else if (o.flags &
           ~(unsigned)(TERN_STATIC_HIDDEN | TERN_STATIC_PRECOMPRESSED |
                       TERN_STATIC_NO_SENDFILE))
    bad = "an unknown flag";
  else if (o.cache_control != NULL && strpbrk(o.cache_control, "\r\n"))
    bad = "cache_control with CR or LF";
  else if (o.index != NULL &&
           (strchr(o.index, '/') != NULL || strcmp(o.index, "..") == 0))
    bad = "an index name with '/' (or \"..\")";
  else if (o.block_size != 0 &&
           (o.block_size < 4096 || o.block_size > (16u << 20)))
    bad = "block_size outside 4 KiB to 16 MiB (or 0)";
  else if (o.nheaders > STATIC_FIELDS || (o.nheaders > 0 && !o.headers))
    bad = "more than 16 headers (or none given for nheaders)";
  else if (o.nheaders > 0 && !tern__fields_valid(o.headers, o.nheaders))
    bad = "a header name that is not a token, or a value with CR, LF or NUL";
  if (bad != NULL) {
    if (srv != NULL)
      tern__log(srv, TERN_LOG_ERROR, "tern_static_new: %s", bad);
    return TERN_EINVAL;
  }
  if ((st = a->malloc(sizeof *st, a->user)) == NULL)
    return TERN_ENOMEM;
  memset(st, 0, sizeof *st);
  st->alloc = *a;
  st->rootfd = open(o.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (st->rootfd < 0 || realpath(o.root, real) == NULL) {
    if (srv != NULL)
      tern__log(srv, TERN_LOG_ERROR, "tern_static_new: %s: %s", o.root,
                strerror(errno));
    if (st->rootfd >= 0)
      close(st->rootfd);
    st_free(st, st);
    return TERN_EIO;
  }
  if (uv_mutex_init(&st->lock) != 0) {
    close(st->rootfd);
    st_free(st, st);
    return TERN_ENOMEM;
  }
  st->root_real = st_strdup(st, real);
  st->root_real_len = strlen(real);
  st->index = o.index != NULL && o.index[0] ? st_strdup(st, o.index) : NULL;
  st->cache_control =
      o.cache_control != NULL ? st_strdup(st, o.cache_control) : NULL;
  st->flags = o.flags;
  st->block = o.block_size ? o.block_size : 256 * 1024;
  if (st->root_real == NULL || (o.index && o.index[0] && !st->index) ||
      (o.cache_control && !st->cache_control) ||
      copy_fields(st, o.headers, o.nheaders) != 0) {
    tern_static_free(st);
    return TERN_ENOMEM;
  }
  if (o.fallback != NULL) {
    char norm[PATH_CAP];
    int dir, n = tern__static_path(o.fallback, strlen(o.fallback),
                                   (o.flags & TERN_STATIC_HIDDEN) != 0, norm,
                                   PATH_CAP - 32, &dir);
    if (n <= 0 || dir) {
      if (srv != NULL)
        tern__log(srv, TERN_LOG_ERROR,
                  "tern_static_new: fallback \"%s\" is not a file name below "
                  "the root",
                  o.fallback);
      tern_static_free(st);
      return TERN_EINVAL;
    }
    if ((st->fallback = st_strdup(st, norm)) == NULL) {
      tern_static_free(st);
      return TERN_ENOMEM;
    }
    st->fallback_len = (size_t)n;
  }
  *out = st;
  return 0;
}

int tern_static_new(tern_server *srv, const tern_static_options *o,
                    tern_static **out) {
  if (srv == NULL)
    return TERN_EINVAL;
  return static_new(srv, &srv->s.allocator, o, out);
}

/* 0.1's tern_static_new, for programs built against it (TERN_0): no
 * server, so the default allocator and no log line; its old contract
 * also set *out to NULL on failure. */
__attribute__((visibility("default"))) int
compat_static_new_0_1(const tern_static_options *o, tern_static **out);
__asm__(".symver compat_static_new_0_1, tern_static_new@TERN_0");
int compat_static_new_0_1(const tern_static_options *o, tern_static **out) {
  static const tern_allocator std = {tern__std_malloc, tern__std_realloc,
                                     tern__std_free, NULL};
  if (out != NULL)
    *out = NULL;
  return static_new(NULL, &std, o, out);
}

void tern_static_free(tern_static *st) {
  if (st == NULL)
    return;
  if (st->rootfd >= 0)
    close(st->rootfd);
  for (int i = 0; i < CACHE_SLOTS; i++)
    if (st->cache[i] != NULL)
      centry_free(st, st->cache[i]);
  while (st->free_jobs != NULL) {
    job *j = st->free_jobs;
    st->free_jobs = j->next;
    st_free(st, j);
  }
  uv_mutex_destroy(&st->lock);
  st_free(st, st->root_real);
  st_free(st, st->index);
  st_free(st, st->cache_control);
  st_free(st, st->headers);
  st_free(st, st->fallback);
  st_free(st, st);
}

/* ---- On the pool ---- */

/* Open `path` (relative) below the root: never a file outside it, by a
 * ".." or a symbolic link. -1 with errno on failure. */
static int open_beneath(tern_static *st, const char *path) {
#if defined(__linux__) && defined(SYS_openat2)
  struct open_how how;
  static _Atomic int no_openat2;
  if (!no_openat2) {
    int fd;
    memset(&how, 0, sizeof how);
    how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    fd = (int)syscall(SYS_openat2, st->rootfd, path[0] ? path : ".", &how,
                      sizeof how);
    if (fd >= 0 || (errno != ENOSYS && errno != EPERM))
      return fd;
    no_openat2 = 1;
  }
#endif
  /* Without openat2: open, then check where the descriptor really is. */
  {
    char link[64], real[PATH_MAX];
    ssize_t n;
    int fd = openat(st->rootfd, path[0] ? path : ".",
                    O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
      return -1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, real, sizeof real - 1);
    if (n < 0 || (size_t)n < st->root_real_len ||
        memcmp(real, st->root_real, st->root_real_len) != 0 ||
        ((size_t)n > st->root_real_len && real[st->root_real_len] != '/' &&
         st->root_real_len > 1)) {
      close(fd);
      errno = EXDEV;
      return -1;
    }
    return fd;
  }
}

static const char *const enc_ext[TERN__ENC_N] = {".br", ".zst", ".gz"};
static const char *const enc_name[TERN__ENC_N] = {"br", "zstd", "gzip"};

/* The file's strong ETag, "ino-size-mtime_ns[-encoding]" in hex, quotes
 * included, into out (ETAG_MAX bytes); returns its length. */
static size_t make_etag(char *out, const job *j) {
  size_t n = 0;
  out[n++] = '"';
  n += tern__fmt_hex(out + n, j->ino);
  out[n++] = '-';
  n += tern__fmt_hex(out + n, j->size);
  out[n++] = '-';
  n += tern__fmt_hex(out + n, j->mtime_ns);
  if (j->enc >= 0) {
    size_t k = strlen(enc_name[j->enc]);
    out[n++] = '-';
    memcpy(out + n, enc_name[j->enc], k);
    n += k;
  }
  out[n++] = '"';
  return n;
}

static int open_regular(tern_static *st, const char *path, struct stat *sb) {
  int fd = open_beneath(st, path);
  if (fd < 0)
    return -1;
  if (fstat(fd, sb) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void work_cb(uv_work_t *req) {
  job *j = req->data;
  tern_static *st = j->st;
  struct stat sb;
  int fd;
  j->fd = -1;
  j->enc = -1;
  fd = open_regular(st, j->path, &sb);
  if (fd < 0) {
    j->result = errno == EXDEV || errno == ELOOP || errno == EACCES
                    ? J_FORBIDDEN
                    : J_NOTFOUND;
    return;
  }
  if (j->dir && !S_ISDIR(sb.st_mode)) {
    /* "a.txt/" names a directory that is not there (nginx answers the
     * same): the file is served under its own name only. */
    close(fd);
    j->result = J_NOTFOUND;
    return;
  }
  if (S_ISDIR(sb.st_mode)) {
    close(fd);
    if (st->index == NULL) {
      j->result = J_NOTFOUND;
      return;
    }
    if (!j->dir) {
      j->result = J_REDIRECT;
      return;
    }
    if (j->plen + 1 + strlen(st->index) + 5 >= PATH_CAP) {
      j->result = J_NOTFOUND;
      return;
    }
    if (j->plen > 0)
      j->path[j->plen++] = '/';
    strcpy(j->path + j->plen, st->index);
    j->plen += strlen(st->index);
    fd = open_regular(st, j->path, &sb);
    if (fd < 0) {
      j->result = J_NOTFOUND;
      return;
    }
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    j->result = J_NOTFOUND;
    return;
  }
  /* Precompressed siblings, best q first (ties: br, zstd, gzip). */
  if (st->flags & TERN_STATIC_PRECOMPRESSED) {
    int tried[TERN__ENC_N] = {0, 0, 0};
    for (;;) {
      int best = -1;
      for (int e = 0; e < TERN__ENC_N; e++)
        if (!tried[e] && j->q[e] > 0 && (best < 0 || j->q[e] > j->q[best]))
          best = e;
      if (best < 0)
        break;
      tried[best] = 1;
      size_t el = strlen(enc_ext[best]);
      if (j->plen + el >= PATH_CAP)
        break;
      memcpy(j->path + j->plen, enc_ext[best], el + 1);
      struct stat cb;
      int cfd = open_regular(st, j->path, &cb);
      j->path[j->plen] = '\0';
      if (cfd < 0)
        continue;
      if (!S_ISREG(cb.st_mode)) {
        close(cfd);
        continue;
      }
      close(fd);
      fd = cfd;
      sb = cb;
      j->enc = best;
      break;
    }
  }
  j->fd = fd;
  j->size = (uint64_t)sb.st_size;
  /* A small file (what the cache keeps in memory) is read here, on the
   * same trip to the pool, and closed: the worker then answers from
   * memory. A larger one stays open: the cache keeps a descriptor of it,
   * and its body goes out by sendfile or block by block. */
  if (!j->head && j->size <= CACHE_MAX && j->size <= st->block) {
    size_t got = 0;
    if ((j->buf = tern__malloc(j->srv, j->size ? j->size : 1)) != NULL) {
      while (got < j->size) {
        ssize_t n = pread(fd, j->buf + got, j->size - got, (off_t)got);
        if (n <= 0)
          break;
        got += (size_t)n;
      }
      if (got == j->size) {
        close(fd);
        j->fd = -1;
        j->mem = 1;
      } else {
        tern__free(j->srv,
                   j->buf); /* changed under us: the block path ends it short */
        j->buf = NULL;
      }
    }
  }
  j->mtime = (int64_t)sb.st_mtim.tv_sec;
  j->mtime_ns =
      (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec;
  j->ino = (uint64_t)sb.st_ino;
  j->result = J_OK;
}

/* ---- On the worker ---- */

/* A job's buffer back where it came from: a block to its worker's pool,
 * a whole small file (read on the pool) to the allocator. */
static void buf_release(job *j) {
  if (j->bufcap > 0)
    tern__big_put(j->w, j->buf, j->bufcap);
  else
    tern__free(j->srv, j->buf);
  j->buf = NULL;
  j->bufcap = 0;
}

static void close_cb(uv_fs_t *req) {
  job *j = req->data;
  uv_fs_req_cleanup(req);
  buf_release(j);
  tern__free(j->srv, j);
}

static void cache_unref(tern_static *st, centry *e) {
  int last;
  uv_mutex_lock(&st->lock);
  last = --e->refs == 0 && e->gone;
  uv_mutex_unlock(&st->lock);
  if (last)
    centry_free(st, e);
}

/* The first slot of the key's set of CACHE_WAYS. */
static unsigned cache_slot(const job *j) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < j->plen; i++)
    h = (h ^ (unsigned char)j->path[i]) * 16777619u;
  h = (h ^ (unsigned)j->dir) * 16777619u;
  for (int i = 0; i < TERN__ENC_N; i++)
    h = (h ^ (unsigned)j->q[i]) * 16777619u;
  return h % (CACHE_SLOTS / CACHE_WAYS) * CACHE_WAYS;
}

/* The entry of `j`'s key in its set, fresh at `now`, or NULL (st->lock
 * held). */
static centry *cache_find(tern_static *st, unsigned slot, const job *j,
                          uint64_t now) {
  for (unsigned i = slot; i < slot + CACHE_WAYS; i++) {
    centry *e = st->cache[i];
    if (e != NULL && e->klen == j->klen && e->dir == j->dir &&
        memcmp(e->key, j->path, j->klen) == 0 &&
        memcmp(e->q, j->q, sizeof e->q) == 0 && now - e->stamp < CACHE_TTL_NS)
      return e;
  }
  return NULL;
}

/* After a small file was read whole (j->mem), or a larger one opened:
 * keep its bytes, or a descriptor of it. `key` is the request's
 * normalised path (before an index name was appended). */
static void cache_put(job *j, const char *key, size_t klen, const char *etag,
                      size_t elen, const char *lm) {
  tern_static *st = j->st;
  centry *e = st_alloc(st, sizeof *e), *old;
  unsigned slot;
  if (e == NULL)
    return;
  memset(e, 0, sizeof *e);
  e->fd = -1;
  e->key = st_alloc(st, klen + 1);
  e->rpath = st_alloc(st, j->plen + 1);
  if (j->mem)
    e->data = st_alloc(st, j->size ? j->size : 1);
  else
    e->fd = fcntl(j->fd, F_DUPFD_CLOEXEC, 3);
  if (e->key == NULL || e->rpath == NULL ||
      (j->mem ? e->data == NULL : e->fd < 0)) {
    centry_free(st, e);
    return;
  }
  memcpy(e->key, key, klen);
  e->klen = klen;
  memcpy(e->rpath, j->path, j->plen);
  e->rlen = j->plen;
  if (j->mem)
    memcpy(e->data, j->buf, j->size);
  memcpy(e->q, j->q, sizeof e->q);
  e->dir = j->dir;
  e->enc = j->enc;
  e->size = j->size;
  e->ino = j->ino;
  e->mtime_ns = j->mtime_ns;
  e->mtime = j->mtime;
  e->type = j->type;
  memcpy(e->etag, etag, elen);
  e->elen = elen;
  memcpy(e->lm, lm, sizeof e->lm);
  e->stamp = uv_hrtime();
  {
    /* The slot is the key's (the request path's), not the resolved
     * path's. */
    job k;
    memcpy(k.path, key, klen);
    k.plen = klen;
    k.dir = j->dir;
    memcpy(k.q, j->q, sizeof k.q);
    slot = cache_slot(&k);
  }
  uv_mutex_lock(&st->lock);
  {
    /* Its own key's old entry, else an empty slot, else the oldest. */
    unsigned i, pick = slot;
    for (i = slot; i < slot + CACHE_WAYS; i++) {
      centry *o = st->cache[i];
      if (o == NULL || (o->klen == klen && o->dir == e->dir &&
                        memcmp(o->key, key, klen) == 0 &&
                        memcmp(o->q, e->q, sizeof e->q) == 0)) {
        pick = i;
        break;
      }
      if (o->stamp < st->cache[pick]->stamp)
        pick = i;
    }
    slot = pick;
  }
  old = st->cache[slot];
  st->cache[slot] = e;
  if (old != NULL) {
    old->gone = 1;
    if (old->refs != 0)
      old = NULL; /* its last user frees it */
  }
  /* Descriptors past their second go now, not when their slot is taken:
   * a file deleted or replaced is not held open (nor its disk space)
   * longer than until the next miss. */
  for (unsigned i = 0; i < CACHE_SLOTS; i++) {
    centry *o = st->cache[i];
    if (o != NULL && o->fd >= 0 && o->stamp + CACHE_TTL_NS <= e->stamp) {
      st->cache[i] = NULL;
      o->gone = 1;
      if (o->refs == 0)
        centry_free(st, o);
    }
  }
  uv_mutex_unlock(&st->lock);
  if (old != NULL)
    centry_free(st, old);
}

/* A descriptor hit's job back to st's free list (or freed). */
static void job_keep(job *j) {
  tern_static *st = j->st;
  uv_mutex_lock(&st->lock);
  if (st->nfree_jobs < JOBS_KEEP) {
    j->next = st->free_jobs;
    st->free_jobs = j;
    st->nfree_jobs++;
    j = NULL;
  }
  uv_mutex_unlock(&st->lock);
  st_free(st, j);
}

/* Close the file (on the pool) and free the job. */
static void release(job *j) {
  if (j->entry != NULL) {
    if (j->mem)
      j->buf = NULL; /* the entry's */
    else
      j->fd = -1; /* the entry's */
    cache_unref(j->st, j->entry);
  }
  if (j->stack)
    return;
  if (j->kept) {
    buf_release(j); /* a block read for TLS, HTTP/2, HTTP/3 */
    job_keep(j);
    return;
  }
  if (j->fd >= 0) {
    j->fs.data = j;
    if (uv_fs_close(j->loop, &j->fs, j->fd, close_cb) == 0)
      return;
  }
  buf_release(j);
  tern__free(j->srv, j);
}

/* End a started response and release. */
static void finish(job *j) {
  tern_response_end(j->r, NULL, 0);
  release(j);
}

static void read_next(job *j);

static int part_head(job *j) {
  char h[256];
  const tern__range *g = &j->ranges[j->cur];
  int n = snprintf(h, sizeof h,
                   "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes "
                   "%" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
                   j->cur == 0 ? "" : "\r\n", j->boundary, j->type, g->first,
                   g->last, j->size);
  return tern_response_write(j->r, h, (size_t)n, NULL, NULL);
}

static void write_done(tern_request *r, int status, void *user) {
  job *j = user;
  (void)r;
  if (status != 0) {
    finish(j);
    return;
  }
  read_next(j);
}

/* A block read (n bytes at j->off, or an error): written, and the next
 * is read once it went out. */
static void got_block(job *j, ssize_t n) {
  if (n <= 0) {
    /* An error, or the file ended early (truncated while served): end
     * the response short, which closes the connection (HTTP/1.1) or
     * resets the stream, so no client takes it for complete. */
    tern__log(j->srv, TERN_LOG_WARN,
              "static: file changed or unreadable while served");
    finish(j);
    return;
  }
  j->off += (uint64_t)n;
  if (tern_response_write(j->r, j->buf, (size_t)n, write_done, j) != 0)
    finish(j);
}

static void read_cb(uv_fs_t *req) {
  job *j = req->data;
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  j->nowait_read = 0;
  got_block(j, n);
}

/* At most this much goes out by sendfile in one go before the next piece
 * takes the pool and the loop turns: one client on a fast link does not
 * hold the worker for longer than about a millisecond. */
#define SENDFILE_TURN ((uint64_t)2 << 20)

static void read_next(job *j) {
  uint64_t budget = SENDFILE_TURN, want;
  tern__range *g;
  int64_t n;

  for (;;) {
    while (j->cur < j->nranges && j->off > j->ranges[j->cur].last) {
      j->cur++;
      if (j->cur < j->nranges) {
        j->off = j->ranges[j->cur].first;
        if (j->multipart && part_head(j) != 0) {
          finish(j);
          return;
        }
      }
    }
    if (j->cur >= j->nranges) {
      if (j->multipart) {
        char t[64];
        int k = snprintf(t, sizeof t, "\r\n--%s--\r\n", j->boundary);
        tern_response_write(j->r, t, (size_t)k, NULL, NULL);
      }
      finish(j);
      return;
    }
    g = &j->ranges[j->cur];
    if (!j->sendfile || budget == 0)
      break;
    /* Plain HTTP/1.1: straight from the page cache to the socket, while
     * the socket takes it. When it is full (or output is still queued),
     * the next block goes the usual way below: its write completes once
     * the socket drained, and then sendfile goes on. */
    want = g->last - j->off + 1;
    if (want > budget)
      want = budget;
    n = tern__response_sendfile(j->r, j->fd, &j->off, (size_t)want);
    if (n > 0) {
      budget -= (uint64_t)n;
      continue;
    }
    if (n == 0) {
      tern__log(j->srv, TERN_LOG_WARN,
                "static: file changed or unreadable while served");
      finish(j); /* ends short: the connection closes */
      return;
    }
    if (n == TERN_ENOTSUP)
      j->sendfile = 0;
    else if (n != TERN_ESTATE) {
      finish(j);
      return;
    }
    break;
  }
  /* A block, or the whole file where that is less (a 20 KiB file over
   * TLS takes a 32 KiB block, not 256), from the worker's pool of
   * blocks: a steady load of responses allocates nothing. */
  size_t cap = j->size < j->st->block ? (size_t)j->size : j->st->block;
  if (j->buf == NULL &&
      (j->buf = tern__big_get(j->w, cap, &j->bufcap)) == NULL) {
    j->bufcap = 0;
    finish(j);
    return;
  }
  want = g->last - j->off + 1;
  if (want > cap)
    want = cap;
#ifdef RWF_NOWAIT
  /* What the page cache holds is read here, on the worker, without a
   * trip to the pool and back: RWF_NOWAIT reads only what needs no disk
   * access, and answers EAGAIN otherwise (then the pool reads it, as a
   * kernel without the flag has it do for every block). Every
   * SENDFILE_TURN bytes one block still goes through the pool, so one
   * client of a large file lets the loop turn between them. */
  if (j->nowait_read < SENDFILE_TURN &&
      !atomic_load_explicit(&j->st->no_nowait, memory_order_relaxed)) {
    struct iovec v = {j->buf, (size_t)want};
    ssize_t got = preadv2(j->fd, &v, 1, (off_t)j->off, RWF_NOWAIT);
    if (got >= 0) {
      j->nowait_read += (uint64_t)got;
      got_block(j, got);
      return;
    }
    if (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS)
      atomic_store_explicit(&j->st->no_nowait, 1, memory_order_relaxed);
    else if (errno != EAGAIN && errno != EINTR) {
      got_block(j, -1);
      return;
    }
  }
#endif
  uv_buf_t b = uv_buf_init(j->buf, (unsigned)want);
  j->fs.data = j;
  if (uv_fs_read(j->loop, &j->fs, j->fd, &b, 1, (int64_t)j->off, read_cb) != 0)
    finish(j);
}

#define MAXH (10 + STATIC_FIELDS)

/* A refusal is made as tern's own answer: through the error hook when
 * there is one (and the response hook), with tern's text otherwise. The
 * handler's call is recorded as made, as a finishing call would. */
static void refuse(tern_request *r, int status) {
  atomic_fetch_or(&r->ustate, TERN__U_STARTED | TERN__U_DONE);
  tern__respond_status(r, status, NULL, 0);
}

static void after_cb(uv_work_t *req, int status) {
  job *j = req->data;
  tern_request *r = j->r;
  tern_static *st = j->st;
  tern_header h[MAXH];
  size_t nh = 0;
  char etag_buf[ETAG_MAX], lm_buf[30], cr[80], loc[PATH_CAP + 2];
  const char *etag = etag_buf, *lm = lm_buf;
  tern__conds c;
  int rc, vary = (st->flags & TERN_STATIC_PRECOMPRESSED) != 0;
  size_t elen;

#define ADD(n, v, vl)                                                          \
  do {                                                                         \
    h[nh].name = n;                                                            \
    h[nh].name_len = sizeof(n) - 1;                                            \
    h[nh].value = v;                                                           \
    h[nh].value_len = vl;                                                      \
    nh++;                                                                      \
  } while (0)

  if (status != 0 || j->result != J_OK) {
    if (status == 0 && j->result == J_REDIRECT) {
      size_t pl;
      const char *p = tern_request_path(r, &pl);
      if (pl + 2 <= sizeof loc) {
        memcpy(loc, p, pl);
        loc[pl] = '/';
        ADD("location", loc, pl + 1);
        if (tern_respond(r, 301, h, nh, NULL, 0) != TERN_EINVAL) {
          release(j);
          return;
        }
      }
    }
    if (status == 0 && j->result == J_NOTFOUND && st->fallback != NULL &&
        !j->fell_back && !j->stack) {
      /* try-files: the fallback file answers for the missing path. */
      memcpy(j->path, st->fallback, st->fallback_len + 1);
      j->plen = j->klen = st->fallback_len;
      j->dir = 0;
      j->fell_back = 1;
      j->result = J_ERROR;
      if (uv_queue_work(j->loop, &j->work, work_cb, after_cb) == 0)
        return;
      status = UV_ECANCELED;
    }
    if (status != 0) /* cancelled: the loop is closing */
      refuse(r, 503);
    else
      refuse(r, j->result == J_FORBIDDEN ? 403 : 404);
    release(j);
    return;
  }
  if (j->entry != NULL) { /* a hit: made when the entry was */
    etag = j->entry->etag;
    elen = j->entry->elen;
    lm = j->entry->lm;
    j->type = j->entry->type;
  } else {
    j->type = tern__mime_type(j->path, j->plen); /* the sibling's name is
                                                    not in path */
    elen = make_etag(etag_buf, j);
    tern__http_date_format(j->mtime, lm_buf);
    if (j->mem ? j->size <= CACHE_MAX : j->fd >= 0)
      cache_put(j, j->path, j->klen, etag, elen, lm);
  }
  ADD("etag", etag, elen);
  ADD("last-modified", lm, 29);
  if (st->cache_control)
    ADD("cache-control", st->cache_control, strlen(st->cache_control));
  for (size_t i = 0; i < st->nheaders; i++)
    h[nh++] = st->headers[i];
  if (vary)
    ADD("vary", "Accept-Encoding", 15);

#define HDR(field, name)                                                       \
  c.field = tern_request_header(r, name, sizeof(name) - 1, &c.field##_len)
  HDR(if_match, "if-match");
  HDR(if_none_match, "if-none-match");
  HDR(if_modified_since, "if-modified-since");
  HDR(if_unmodified_since, "if-unmodified-since");
  HDR(if_range, "if-range");
  HDR(range, "range");
  rc = tern__static_conds(&c, etag, elen, j->mtime);
  if (rc != 0) {
    tern_respond(r, rc, h, nh, NULL, 0);
    release(j);
    return;
  }
  ADD("accept-ranges", "bytes", 5);
  if (j->enc >= 0)
    ADD("content-encoding", enc_name[j->enc], strlen(enc_name[j->enc]));
  j->nranges = 0;
  if (c.range != NULL && tern__static_if_range(&c, etag, elen, j->mtime))
    j->nranges = tern__static_ranges(c.range, c.range_len, j->size, j->ranges,
                                     TERN__MAX_RANGES);
  if (j->nranges < 0) {
    int n = snprintf(cr, sizeof cr, "bytes */%" PRIu64, j->size);
    ADD("content-range", cr, (size_t)n);
    tern_respond(r, 416, h, nh, "416 Range Not Satisfiable\n", 26);
    release(j);
    return;
  }
  int code = 200;
  uint64_t length;
  if (j->nranges == 0) {
    j->ranges[0].first = 0;
    j->ranges[0].last = j->size - 1;
    j->nranges = j->size > 0 ? 1 : 0;
    length = j->size;
    ADD("content-type", j->type, strlen(j->type));
  } else if (j->nranges == 1) {
    code = 206;
    int n = snprintf(cr, sizeof cr, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64,
                     j->ranges[0].first, j->ranges[0].last, j->size);
    ADD("content-range", cr, (size_t)n);
    ADD("content-type", j->type, strlen(j->type));
    length = j->ranges[0].last - j->ranges[0].first + 1;
  } else {
    static _Atomic unsigned long seq;
    char ct[64];
    code = 206;
    j->multipart = 1;
    snprintf(j->boundary, sizeof j->boundary, "tern%016lx",
             (unsigned long)(j->ino * 2654435761u) ^ ++seq);
    int n = snprintf(ct, sizeof ct, "multipart/byteranges; boundary=%s",
                     j->boundary);
    ADD("content-type", ct, (size_t)n);
    length = 0;
    for (int i = 0; i < j->nranges; i++) {
      char tmp[256];
      length += (uint64_t)snprintf(
          tmp, sizeof tmp,
          "%s--%s\r\nContent-Type: %s\r\nContent-Range: bytes "
          "%" PRIu64 "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
          i == 0 ? "" : "\r\n", j->boundary, j->type, j->ranges[i].first,
          j->ranges[i].last, j->size);
      length += j->ranges[i].last - j->ranges[i].first + 1;
    }
    length += 2 + 2 + strlen(j->boundary) + 4;
    if (tern__response_start_own(r, code, h, nh, (int64_t)length) != 0 ||
        j->head) {
      finish(j);
      return;
    }
    goto body;
  }
  if (j->mem && !j->head) {
    /* A file in memory, whole or one range: the answer in one call. */
    tern__respond_own(r, code, h, nh, j->buf + j->ranges[0].first,
                      (size_t)length);
    release(j);
    return;
  }
  if (tern__response_start_own(r, code, h, nh, (int64_t)length) != 0 ||
      j->head || length == 0) {
    finish(j);
    return;
  }
body:
  if (j->mem) {
    /* Copied writes (at most one block): the buffer goes at once. */
    for (int i = 0; i < j->nranges; i++) {
      const tern__range *g = &j->ranges[i];
      if (j->multipart) {
        j->cur = i;
        if (part_head(j) != 0)
          break;
      }
      if (tern_response_write(r, j->buf + g->first,
                              (size_t)(g->last - g->first + 1), NULL,
                              NULL) != 0)
        break;
    }
    j->cur = j->nranges;
    j->off = 0;
    read_next(j); /* the closing boundary, the end */
    return;
  }
  /* The block buffer is taken when a block is first read: a response
   * that sendfile carries whole never needs one. */
  j->sendfile = !(st->flags & TERN_STATIC_NO_SENDFILE);
  j->cur = 0;
  j->off = j->ranges[0].first;
  if (j->multipart && part_head(j) != 0) {
    finish(j);
    return;
  }
  read_next(j);
#undef ADD
#undef HDR
}

void tern_static_handler(tern_request *r, void *user) {
  tern_static *st = user;
  const char *p, *m;
  size_t pl, ml;
  int n, dir;
  job sj, *j = &sj;
  centry *e;

  m = tern_request_method(r, &ml);
  p = tern_request_param(r, "*", 1, &pl);
  if (p == NULL)
    p = tern_request_path(r, &pl);
  n = tern__static_path(p, pl, (st->flags & TERN_STATIC_HIDDEN) != 0, j->path,
                        PATH_CAP - 32, &dir);
  if (n < 0) {
    refuse(r, n == TERN__SP_HIDDEN ? 404 : n == TERN__SP_LONG ? 414 : 400);
    return;
  }
  j->srv = r->w->srv;
  j->w = r->w;
  j->plen = j->klen = (size_t)n;
  j->dir = dir;
  j->fell_back = 0;
  j->r = r;
  j->st = st;
  j->buf = NULL;
  j->bufcap = 0;
  j->nowait_read = 0;
  j->fd = -1;
  j->result = J_ERROR; /* until the pool has run (it may be cancelled) */
  j->enc = -1;
  j->multipart = 0;
  j->mem = 0;
  j->stack = 0;
  j->entry = NULL;
  j->kept = 0;
  j->head = ml == 4 && memcmp(m, "HEAD", 4) == 0;
  {
    size_t al = 0;
    const char *ae = tern_request_header(r, "accept-encoding", 15, &al);
    tern__static_accept(ae, al, j->q);
  }
  j->loop = r->w->loop;
  /* The cache: a hit is answered here, from the stack (a small file) or
   * with a kept job (a descriptor). */
  if (!j->head) {
    unsigned slot = cache_slot(j);
    uint64_t now = uv_hrtime();
    job *k = NULL;
    uv_mutex_lock(&st->lock);
    if ((e = cache_find(st, slot, j, now)) != NULL) {
      e->refs++;
      /* A larger file: its body goes out after this call returns, so the
       * job is one of st's kept ones (taken under the same lock). */
      if (e->fd >= 0 && (k = st->free_jobs) != NULL) {
        st->free_jobs = k->next;
        st->nfree_jobs--;
      }
    }
    uv_mutex_unlock(&st->lock);
    if (e != NULL && e->fd >= 0) {
      if (k == NULL && (k = st_alloc(st, sizeof *k)) == NULL) {
        cache_unref(st, e);
        refuse(r, 503);
        return;
      }
      memcpy(k, j, offsetof(job, path));
      j = k;
      j->kept = 1;
      j->fd = e->fd;
      j->mem = 0;
    } else if (e != NULL) {
      j->stack = 1;
      j->mem = 1;
      j->buf = e->data;
    }
    if (e != NULL) {
      j->entry = e;
      j->result = J_OK;
      j->enc = e->enc;
      j->size = e->size;
      j->ino = e->ino;
      j->mtime_ns = e->mtime_ns;
      j->mtime = e->mtime;
      memcpy(j->path, e->rpath, e->rlen);
      j->path[e->rlen] = '\0';
      j->plen = e->rlen;
      j->work.data = j;
      after_cb(&j->work, 0);
      return;
    }
  }
  if ((j = tern__malloc(sj.srv, sizeof *j)) == NULL) {
    refuse(r, 503);
    return;
  }
  memcpy(j, &sj, offsetof(job, path) + sj.plen + 1);
  j->work.data = j;
  if (uv_queue_work(j->loop, &j->work, work_cb, after_cb) != 0) {
    tern__free(j->srv, j);
    refuse(r, 503);
  }
}

int tern_static_mount(tern_server *srv, const char *prefix, tern_static *st) {
  char pat[512];
  size_t n;
  if (srv == NULL || prefix == NULL || st == NULL ||
      (n = strlen(prefix)) == 0 || prefix[0] != '/' || n > sizeof pat - 3)
    return TERN_EINVAL;
  memcpy(pat, prefix, n);
  if (pat[n - 1] != '/')
    pat[n++] = '/';
  pat[n++] = '*';
  pat[n] = '\0';
  return tern_route(srv, "GET", pat, tern_static_handler, st);
}
