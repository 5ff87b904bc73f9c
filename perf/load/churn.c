/* churn: connection churn, one request per connection.
 *
 *   churn --host H --port P --concurrency C --duration S [--warmup S]
 *         [--path /] [--no-spread] [--tls [--resume] [--tls-max 1.2|1.3]]
 *         [--json FILE]
 *
 * C slots, each in a loop: open a connection (non-blocking), send
 * "GET <path> HTTP/1.1" with "Connection: close", read the whole response,
 * close, start over. This is a closed model (a slot starts its next
 * connection when the last one is done), so it measures how many
 * connections per second the server sets up and tears down; latency is
 * from the start of the connect to the end of the response.
 *
 * Counted over the measured window (after --warmup): connections that
 * completed in it, their latency, non2xx among them; errors counts every
 * failed connection of the run (refused, reset, timed out, malformed).
 * After an error the slot waits 10 ms, so that a dead server does not turn
 * the client into a busy loop.
 *
 * Ports: on 127.0.0.1 every closed connection leaves a TIME_WAIT entry for
 * a minute, and one source address has only ~28000 ephemeral ports, which
 * a few hundred connections per second would exhaust. Closing with a RST
 * (SO_LINGER 0) would avoid that but changes what the server sees, so
 * instead the source address rotates over 127.0.0.2..127.0.0.254 (bind
 * before connect; --no-spread turns it off). If the ports run out anyway,
 * connect fails with EADDRNOTAVAIL: that is counted and reported, since
 * the rate is then the client's limit, not the server's.
 *
 * TLS (--tls, where built with GnuTLS): every connection is a new TLS
 * session, driven non-blocking over the same epoll loop: connect, the
 * handshake (SNI "localhost", ALPN "http/1.1", no certificate
 * verification: the benchmarks measure the server, and the certificate is
 * the run's self-signed one), the GET, the whole response, then a
 * close_notify (gnutls_bye with GNUTLS_SHUT_WR, best effort: the server
 * has usually closed already) and close. Without --resume every handshake
 * is a full one: no session data is ever offered, although the server may
 * still send tickets, as it would to any new client. With --resume each
 * slot keeps the session data of its last connection and offers it on the
 * next; the data is taken after the response has been read, because in
 * TLS 1.3 the tickets come after the handshake. Each completed connection
 * counts as a full or a resumed handshake (gnutls_session_is_resumed), so
 * the caller can tell a server that does not resume. --tls-max caps the
 * protocol version (default 1.3; 1.2 is also allowed either way).
 *
 * Exit status: 0 when the run happened (even with errors), 1 when it could
 * not start or report, 2 on bad arguments.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#ifdef CHURN_GNUTLS
#include <gnutls/gnutls.h>
#endif

#include "common.h"

#define PROG "churn"
#define MAX_EVENTS 256
#define READ_SIZE (64 * 1024)
#define RETRY_NS 10000000ull /* pause after an error */

enum { S_RETRY, S_CONNECTING, S_HANDSHAKE, S_SENDING, S_READING };

typedef struct {
  int fd;
  int state;
#ifdef CHURN_GNUTLS
  gnutls_session_t tls; /* NULL without --tls, or between connections */
  gnutls_datum_t saved; /* --resume: the last connection's session data */
  int resumed;          /* this connection's handshake was a resumption */
#endif
  uint64_t start;    /* connect began */
  uint64_t retry_at; /* S_RETRY: when to try again */
  size_t wpos;
  lg_resp rp;
  size_t npend;
  char pend[LG_HEAD_MAX];
} slot;

static struct {
  lg_target target;
  int ep;
  slot *slots;
  long nslots;
  char req[512];
  size_t req_len;
  uint64_t win_start, win_end;
  lg_hist hist;
  uint64_t conns, non2xx, errors, addrnotavail, retrying;
  int tls, resume;
#ifdef CHURN_GNUTLS
  gnutls_certificate_credentials_t cred;
  gnutls_priority_t prio;
  uint64_t hs_full, hs_resumed, tls_errors;
  uint64_t no_ticket; /* --resume, TLS 1.3: connections that got no ticket */
  char tls_version[32], tls_cipher[48], tls_group[48];
  int tls_mixed; /* completed connections negotiated different versions */
  int tls_error_shown;
#endif
} g;

static char scratch[LG_HEAD_MAX + READ_SIZE];

static void usage(void) {
  fprintf(stderr, "usage: " PROG " --host H --port P --concurrency C "
                  "--duration S [--warmup S] [--path /]\n"
                  "       [--no-spread] [--tls [--resume] "
                  "[--tls-max 1.2|1.3]] [--json FILE]\n");
  exit(2);
}

static void slot_close(slot *s) {
#ifdef CHURN_GNUTLS
  if (s->tls != NULL) {
    gnutls_deinit(s->tls);
    s->tls = NULL;
  }
#endif
  if (s->fd >= 0)
    close(s->fd);
  s->fd = -1;
  s->npend = 0;
}

static void slot_fail(slot *s, int err, uint64_t now) {
  g.errors++;
  if (err == EADDRNOTAVAIL)
    g.addrnotavail++;
  slot_close(s);
  s->state = S_RETRY;
  s->retry_at = now + RETRY_NS;
  g.retrying++;
}

#ifdef CHURN_GNUTLS
/* A TLS failure: counted with the other errors, and the first one
 * described, since a whole run of them usually has one cause (no common
 * version or cipher, a server without TLS on that port). */
static void tls_fail(slot *s, int rc, uint64_t now) {
  g.tls_errors++;
  if (!g.tls_error_shown) {
    g.tls_error_shown = 1;
    fprintf(stderr, PROG ": TLS error: %s\n", gnutls_strerror(rc));
  }
  slot_fail(s, EPROTO, now);
}

/* Whether a GNUTLS_E_AGAIN means the socket has nothing more to read. It
 * need not: GnuTLS also returns it after a record that held no data for
 * the caller, such as a TLS 1.3 session ticket, without trying the socket
 * again, and with edge triggering the bytes behind that record would then
 * wait for an edge that never comes. So look: buffered in GnuTLS, or
 * readable (bytes or the end of the stream) on the socket. */
static int tls_read_blocked(slot *s) {
  struct pollfd p;
  if (gnutls_record_check_pending(s->tls) > 0)
    return 0;
  p.fd = s->fd;
  p.events = POLLIN;
  p.revents = 0;
  return poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR));
}

/* A client session on s->fd, offering the slot's saved session data when
 * resuming. Returns 0, or -1 after tls_fail. */
static int tls_begin(slot *s, uint64_t now) {
  static const gnutls_datum_t alpn = {(unsigned char *)"http/1.1", 8};
  int rc = gnutls_init(&s->tls, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
  if (rc < 0) {
    s->tls = NULL;
    tls_fail(s, rc, now);
    return -1;
  }
  if ((rc = gnutls_priority_set(s->tls, g.prio)) < 0 ||
      (rc = gnutls_credentials_set(s->tls, GNUTLS_CRD_CERTIFICATE, g.cred)) <
          0 ||
      (rc = gnutls_server_name_set(s->tls, GNUTLS_NAME_DNS, "localhost", 9)) <
          0 ||
      (rc = gnutls_alpn_set_protocols(s->tls, &alpn, 1, 0)) < 0) {
    tls_fail(s, rc, now);
    return -1;
  }
  /* Data the server will not take back just makes a full handshake, which
   * the counts show; it is no error here. */
  if (g.resume && s->saved.size > 0)
    (void)gnutls_session_set_data(s->tls, s->saved.data, s->saved.size);
  gnutls_transport_set_int(s->tls, s->fd);
  s->resumed = 0;
  return 0;
}

/* Advance the handshake. Returns 1 when it is done, 0 when it waits for
 * the socket (the next edge resumes it), -1 after tls_fail. */
static int tls_handshake(slot *s, uint64_t now) {
  for (;;) {
    int rc = gnutls_handshake(s->tls);
    if (rc == 0)
      break;
    /* (Only when it waits to read: a blocked write waits for EPOLLOUT.) */
    if (rc == GNUTLS_E_AGAIN &&
        (gnutls_record_get_direction(s->tls) != 0 || tls_read_blocked(s)))
      return 0;
    if (rc == GNUTLS_E_AGAIN)
      continue;
    if (rc == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(rc))
      continue; /* EINTR, or a warning alert: carry on */
    tls_fail(s, rc, now);
    return -1;
  }
  s->resumed = gnutls_session_is_resumed(s->tls) != 0;
  return 1;
}

static void copy_name(char *dst, size_t size, const char *name) {
  snprintf(dst, size, "%s", name != NULL ? name : "");
}

/* The end of a TLS connection whose response was read whole: count its
 * handshake, keep its session data for the next connection (--resume), and
 * say goodbye. */
static void tls_finish(slot *s, int counted) {
  if (counted) {
    const char *v =
        gnutls_protocol_get_name(gnutls_protocol_get_version(s->tls));
    if (s->resumed)
      g.hs_resumed++;
    else
      g.hs_full++;
    /* (A TLS 1.2 resumption has no key exchange group: "".) */
    if (g.tls_cipher[0] == 0) {
      copy_name(g.tls_cipher, sizeof(g.tls_cipher),
                gnutls_cipher_get_name(gnutls_cipher_get(s->tls)));
      copy_name(g.tls_group, sizeof(g.tls_group),
                gnutls_group_get_name(gnutls_group_get(s->tls)));
    }
    if (g.tls_version[0] == 0)
      copy_name(g.tls_version, sizeof(g.tls_version), v);
    else if (v == NULL || strcmp(v, g.tls_version) != 0)
      g.tls_mixed = 1;
  }
  if (g.resume) {
    /* In TLS 1.3 the data is only worth taking once a ticket has come
     * (before the response, from every server measured); without one,
     * gnutls_session_get_data2 would wait for it. A server may send no new
     * ticket on a resumed connection: then the slot offers the ticket it
     * has once more (RFC 8446 advises clients against that, but allows it,
     * and the server may refuse: the counts would show it), and the reuse
     * is counted. TLS 1.2 can also resume by session ID, so there the data
     * is always taken. */
    int tls13 = gnutls_protocol_get_version(s->tls) == GNUTLS_TLS1_3;
    if (tls13 &&
        !(gnutls_session_get_flags(s->tls) & GNUTLS_SFLAGS_SESSION_TICKET)) {
      if (counted)
        g.no_ticket++;
    } else {
      gnutls_free(s->saved.data);
      s->saved.data = NULL;
      s->saved.size = 0;
      if (gnutls_session_get_data2(s->tls, &s->saved) < 0) {
        s->saved.data = NULL;
        s->saved.size = 0;
      }
    }
  }
  /* Best effort: the server has usually closed after its response. */
  (void)gnutls_bye(s->tls, GNUTLS_SHUT_WR);
}

/* The credentials (none: nothing is verified) and the priorities, once. */
static int tls_setup(const char *max) {
  const char *prio = strcmp(max, "1.2") == 0
                         ? "NORMAL:-VERS-ALL:+VERS-TLS1.2"
                         : "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2";
  int rc;
  if ((rc = gnutls_global_init()) < 0 ||
      (rc = gnutls_certificate_allocate_credentials(&g.cred)) < 0 ||
      (rc = gnutls_priority_init2(&g.prio, prio, NULL, 0)) < 0) {
    fprintf(stderr, PROG ": GnuTLS: %s\n", gnutls_strerror(rc));
    return -1;
  }
  return 0;
}
#endif

static void slot_start(slot *s, uint64_t now) {
  struct epoll_event ev;
  s->start = now;
  s->wpos = 0;
  s->npend = 0;
  lg_resp_init(&s->rp);
  s->fd = lg_connect(&g.target);
  if (s->fd < 0) {
    slot_fail(s, errno, now);
    return;
  }
#ifdef CHURN_GNUTLS
  if (g.tls && tls_begin(s, now) != 0)
    return;
#endif
  /* Edge-triggered: one registration serves the connect, the send and
   * the reads, with no epoll_ctl between them. */
  memset(&ev, 0, sizeof(ev));
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = (uint64_t)(s - g.slots);
  if (epoll_ctl(g.ep, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
    slot_fail(s, errno, now);
    return;
  }
  s->state = S_CONNECTING;
}

static void slot_done(slot *s, uint64_t now) {
  int counted = now >= g.win_start && now < g.win_end;
  if (counted) {
    lg_hist_record(&g.hist, (now - s->start + 500) / 1000);
    g.conns++;
    if (s->rp.status < 200 || s->rp.status > 299)
      g.non2xx++;
  }
#ifdef CHURN_GNUTLS
  if (s->tls != NULL)
    tls_finish(s, counted);
#endif
  slot_close(s);
  if (now < g.win_end)
    slot_start(s, now);
}

/* One read from the connection, through TLS when it has it: bytes read,
 * 0 at the end of the stream, or -1 with errno (EAGAIN: nothing now). A
 * TLS failure has been counted already and reads as EPROTO. */
static ssize_t conn_recv(slot *s, char *buf, size_t len) {
#ifdef CHURN_GNUTLS
  if (s->tls != NULL) {
    for (;;) {
      ssize_t r = gnutls_record_recv(s->tls, buf, len);
      if (r >= 0)
        return r; /* 0: the server's close_notify */
      if (r == GNUTLS_E_AGAIN) {
        if (!tls_read_blocked(s))
          continue;
        errno = EAGAIN;
        return -1;
      }
      /* The server may close after its response without a close_notify;
       * whether the response was whole is the parser's to say. */
      if (r == GNUTLS_E_PREMATURE_TERMINATION)
        return 0;
      if (r == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal((int)r))
        continue;
      g.tls_errors++;
      if (!g.tls_error_shown) {
        g.tls_error_shown = 1;
        fprintf(stderr, PROG ": TLS error: %s\n", gnutls_strerror((int)r));
      }
      errno = EPROTO;
      return -1;
    }
  }
#endif
  return recv(s->fd, buf, len, 0);
}

/* One write of the request's rest: bytes written or -1 with errno. */
static ssize_t conn_send(slot *s) {
#ifdef CHURN_GNUTLS
  if (s->tls != NULL) {
    for (;;) {
      /* After GNUTLS_E_AGAIN the call is repeated with the same
       * arguments, as GnuTLS requires: wpos has not moved. */
      ssize_t w =
          gnutls_record_send(s->tls, g.req + s->wpos, g.req_len - s->wpos);
      if (w >= 0)
        return w;
      if (w == GNUTLS_E_AGAIN) {
        errno = EAGAIN;
        return -1;
      }
      if (w == GNUTLS_E_INTERRUPTED)
        continue;
      g.tls_errors++;
      errno = EPROTO;
      return -1;
    }
  }
#endif
  return send(s->fd, g.req + s->wpos, g.req_len - s->wpos, MSG_NOSIGNAL);
}

/* Read until EAGAIN (edge-triggered), parsing as the bytes come. */
static void slot_read(slot *s, uint64_t now) {
  for (;;) {
    size_t len, used = 0;
    ssize_t r;
    int rc;
    memcpy(scratch, s->pend, s->npend);
    r = conn_recv(s, scratch + s->npend, READ_SIZE);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        slot_fail(s, errno, now);
      return;
    }
    if (r == 0) {
      if (s->npend == 0 && lg_resp_eof(&s->rp) == LG_RP_COMPLETE)
        slot_done(s, now);
      else
        slot_fail(s, ECONNRESET, now);
      return;
    }
    len = s->npend + (size_t)r;
    rc = lg_resp_feed(&s->rp, scratch, len, &used);
    if (rc == LG_RP_ERROR || (rc == LG_RP_COMPLETE && used < len)) {
      slot_fail(s, EPROTO, now); /* malformed, or bytes after the end */
      return;
    }
    if (rc == LG_RP_COMPLETE) {
      slot_done(s, now);
      return;
    }
    s->npend = len - used;
    memmove(s->pend, scratch + used, s->npend);
  }
}

static void slot_event(slot *s, uint32_t events, uint64_t now) {
  if (s->state == S_CONNECTING) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
      return;
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = errno;
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)))
      err = ECONNRESET;
    if (err != 0) {
      slot_fail(s, err, now);
      return;
    }
    s->state = g.tls ? S_HANDSHAKE : S_SENDING;
  }
#ifdef CHURN_GNUTLS
  if (s->state == S_HANDSHAKE) {
    int rc = tls_handshake(s, now);
    if (rc <= 0)
      return; /* waiting for the socket, or failed */
    s->state = S_SENDING;
  }
#endif
  if (s->state == S_SENDING) {
    while (s->wpos < g.req_len) {
      ssize_t w = conn_send(s);
      if (w < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return; /* the next EPOLLOUT edge resumes */
        slot_fail(s, errno, now);
        return;
      }
      s->wpos += (size_t)w;
    }
    s->state = S_READING;
  }
  /* Read even without EPOLLIN in this event: with edge triggering, data
   * that came with the connect's event would otherwise never be seen. */
  if (s->state == S_READING)
    slot_read(s, now);
}

int main(int argc, char **argv) {
  const char *host = NULL, *path = "/", *json = NULL, *tls_max = "1.3";
  long port = -1, i;
  double duration = -1, warmup = 0;
  int spread = 1, n, k;
  uint64_t now, t_start;
  struct epoll_event ev[MAX_EVENTS];

  for (k = 1; k < argc; k++) {
    const char *a = argv[k];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
      usage();
    else if (strcmp(a, "--host") == 0)
      host = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--port") == 0)
      port = lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 65535);
    else if (strcmp(a, "--concurrency") == 0)
      g.nslots =
          lg_arg_long(PROG, a, lg_arg_value(PROG, argc, argv, &k), 1, 100000);
    else if (strcmp(a, "--duration") == 0)
      duration = lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k),
                               0.001, 86400);
    else if (strcmp(a, "--warmup") == 0)
      warmup =
          lg_arg_double(PROG, a, lg_arg_value(PROG, argc, argv, &k), 0, 86400);
    else if (strcmp(a, "--path") == 0)
      path = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--no-spread") == 0)
      spread = 0;
    else if (strcmp(a, "--json") == 0)
      json = lg_arg_value(PROG, argc, argv, &k);
    else if (strcmp(a, "--tls") == 0)
      g.tls = 1;
    else if (strcmp(a, "--resume") == 0)
      g.resume = 1;
    else if (strcmp(a, "--tls-max") == 0) {
      tls_max = lg_arg_value(PROG, argc, argv, &k);
      if (strcmp(tls_max, "1.2") != 0 && strcmp(tls_max, "1.3") != 0) {
        fprintf(stderr, PROG ": --tls-max must be 1.2 or 1.3\n");
        return 2;
      }
    } else {
      fprintf(stderr, PROG ": unknown argument '%s'\n", a);
      usage();
    }
  }
  if (host == NULL || port < 0 || g.nslots <= 0 || duration < 0)
    usage();
  if (g.resume && !g.tls) {
    fprintf(stderr, PROG ": --resume needs --tls\n");
    return 2;
  }
#ifdef CHURN_GNUTLS
  if (g.tls && tls_setup(tls_max) != 0)
    return 1;
#else
  if (g.tls) {
    fprintf(stderr, PROG ": built without GnuTLS: no --tls\n");
    return 2;
  }
  (void)tls_max;
#endif
  if (lg_check_path(PROG, path) != 0)
    return 2;
  if (lg_target_init(&g.target, PROG, host, port) != 0)
    return 2;
  g.target.spread &= spread;
  if (lg_raise_nofile() < g.nslots + 16) {
    fprintf(stderr, PROG ": RLIMIT_NOFILE is below %ld connections\n",
            g.nslots);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  g.req_len = (size_t)snprintf(g.req, sizeof(g.req),
                               strchr(host, ':')
                                   ? "GET %s HTTP/1.1\r\nHost: [%s]:%ld\r\n"
                                     "Connection: close\r\n\r\n"
                                   : "GET %s HTTP/1.1\r\nHost: %s:%ld\r\n"
                                     "Connection: close\r\n\r\n",
                               path, host, port);
  if (g.req_len >= sizeof(g.req)) {
    fprintf(stderr, PROG ": host or path too long\n");
    return 2;
  }
  g.slots = calloc((size_t)g.nslots, sizeof(slot));
  g.ep = epoll_create1(EPOLL_CLOEXEC);
  if (g.slots == NULL || g.ep < 0) {
    perror(PROG);
    return 1;
  }

  t_start = lg_now_ns();
  g.win_start = t_start + (uint64_t)(warmup * 1e9);
  g.win_end = g.win_start + (uint64_t)(duration * 1e9);
  for (i = 0; i < g.nslots; i++) {
    g.slots[i].fd = -1;
    slot_start(&g.slots[i], t_start);
  }
  for (;;) {
    uint64_t wake;
    now = lg_now_ns();
    if (now >= g.win_end)
      break;
    wake = g.win_end;
    if (g.retrying > 0) {
      for (i = 0; i < g.nslots; i++) {
        slot *s = &g.slots[i];
        if (s->state != S_RETRY)
          continue;
        if (s->retry_at <= now) {
          g.retrying--;
          slot_start(s, now);
        } else if (s->retry_at < wake) {
          wake = s->retry_at;
        }
      }
    }
    n = epoll_wait(g.ep, ev, MAX_EVENTS,
                   (int)((wake - now + 999999u) / 1000000u));
    now = lg_now_ns();
    for (k = 0; k < n; k++) {
      slot *s = &g.slots[ev[k].data.u64];
      if (s->fd >= 0 && s->state != S_RETRY)
        slot_event(s, ev[k].events, now);
    }
  }
  /* Connections still open are abandoned: they did not finish in the
   * window and are not counted either way. */
  for (i = 0; i < g.nslots; i++) {
    slot_close(&g.slots[i]);
#ifdef CHURN_GNUTLS
    gnutls_free(g.slots[i].saved.data);
#endif
  }

  printf(PROG ": %s:%ld, concurrency %ld, %.3f s (+%.3f s warm-up)\n", host,
         port, g.nslots, duration, warmup);
  printf(PROG ": connections %llu (%.1f/s), errors %llu, non2xx %llu; ",
         (unsigned long long)g.conns, (double)g.conns / duration,
         (unsigned long long)g.errors, (unsigned long long)g.non2xx);
  lg_text_latency(stdout, &g.hist);
  printf("\n");
#ifdef CHURN_GNUTLS
  if (g.tls)
    printf(PROG ": TLS %s%s %s %s, handshakes full %llu, resumed %llu, "
                "TLS errors %llu, TLS 1.3 without a new ticket %llu\n",
           g.tls_version[0] ? g.tls_version : "-",
           g.tls_mixed ? " (mixed)" : "", g.tls_cipher[0] ? g.tls_cipher : "-",
           g.tls_group[0] ? g.tls_group : "-", (unsigned long long)g.hs_full,
           (unsigned long long)g.hs_resumed, (unsigned long long)g.tls_errors,
           (unsigned long long)g.no_ticket);
#endif
  if (g.addrnotavail > 0)
    printf(PROG ": warning: %llu connects failed with EADDRNOTAVAIL "
                "(ephemeral ports exhausted: the client is the limit)\n",
           (unsigned long long)g.addrnotavail);
  fflush(stdout);
  if (json != NULL) {
    FILE *f = lg_json_open(json);
    if (f == NULL)
      return 1;
    fprintf(f,
            "{\"connections\":%llu,\"requests\":%llu,\"errors\":%llu,"
            "\"non2xx\":%llu,\"rate_achieved\":%.3f,\"duration_s\":%.6f,"
            "\"latency_us\":",
            (unsigned long long)g.conns, (unsigned long long)g.conns,
            (unsigned long long)g.errors, (unsigned long long)g.non2xx,
            (double)g.conns / duration, duration);
    lg_json_latency(f, &g.hist);
    fprintf(f,
            ",\"addrnotavail\":%llu,\"concurrency\":%ld,\"warmup_s\":%.3f,"
            "\"source_spread\":%s,\"tls\":%s,\"resume\":%s",
            (unsigned long long)g.addrnotavail, g.nslots, warmup,
            g.target.spread ? "true" : "false", g.tls ? "true" : "false",
            g.resume ? "true" : "false");
#ifdef CHURN_GNUTLS
    if (g.tls) {
      /* The names come from GnuTLS's own tables: no quoting needed. */
      fprintf(f,
              ",\"tls_max\":\"%s\",\"handshakes_full\":%llu,"
              "\"handshakes_resumed\":%llu,\"tls_errors\":%llu,"
              "\"tls13_no_ticket\":%llu,\"tls_version\":",
              tls_max, (unsigned long long)g.hs_full,
              (unsigned long long)g.hs_resumed,
              (unsigned long long)g.tls_errors,
              (unsigned long long)g.no_ticket);
      if (g.tls_version[0] == 0)
        fprintf(f, "null");
      else
        fprintf(f, "\"%s\"", g.tls_mixed ? "mixed" : g.tls_version);
      fprintf(f, ",\"tls_cipher\":\"%s\",\"tls_group\":\"%s\"", g.tls_cipher,
              g.tls_group);
    }
#endif
    if (!g.tls)
      fprintf(f, ",\"handshakes_full\":0,\"handshakes_resumed\":0,"
                 "\"tls_version\":null");
    fprintf(f, "}\n");
    if (fclose(f) != 0) {
      perror(json);
      return 1;
    }
  }
  return 0;
}
