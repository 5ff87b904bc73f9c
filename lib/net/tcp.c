/* Byte-stream listeners, TCP and Unix sockets: one listening socket per
 * address, a handle on it per worker, and accept, which hands each new
 * socket to the byte-stream transport with the listener's filter (TLS)
 * and its configuration. tern_listen and tern_listen_with's byte-stream
 * listeners (TCP, Unix, a socket handed over) live here.
 */
#include <errno.h>
#include <linux/filter.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/net.h"
#include "net/proxy.h"
#include "net/stream.h"
#include "tls/tls.h"

typedef struct {
  tern__listener base; /* first: the core's part */
  tern_server *srv;
  int *fds;              /* one per worker until its handle owns it */
  uv_tcp_t *handles;     /* one per worker (TCP) */
  uv_pipe_t *pipes;      /* or these (a Unix socket) */
  char *path;            /* the socket file to remove at the end */
  unsigned char *open;   /* handles[i] was initialised */
  tern__proxy_cfg proxy; /* with proxy.nets: a PROXY header first */
  tern__accept_cfg acc;  /* how its connections are taken in */
} tcp_listener;

static void on_connection(uv_stream_t *h, int status) {
  tcp_listener *l = h->data;
  tern__worker *w =
      &l->srv->workers[l->pipes != NULL ? (uv_pipe_t *)h - l->pipes
                                        : (uv_tcp_t *)h - l->handles];

  if (status < 0) {
    /* Out of descriptors the listener stays readable and this runs again
     * at once: say so at most once a second, not once per attempt. */
    if (uv_now(w->loop) - w->accept_warned >= 1000 || w->accept_warned == 0) {
      w->accept_warned = uv_now(w->loop);
      tern__log(w->srv, TERN_LOG_WARN, "accept: %s", uv_strerror(status));
    }
    return;
  }
  tern__stream_accept(w, h, &l->acc);
}

static int tcp_start(tern__listener *base, tern__worker *w) {
  tcp_listener *l = (tcp_listener *)base;
  uv_stream_t *h;
  int rc;

  if (l->pipes != NULL) {
    h = (uv_stream_t *)&l->pipes[w->id];
    uv_pipe_init(w->loop, &l->pipes[w->id], 0);
  } else {
    h = (uv_stream_t *)&l->handles[w->id];
    uv_tcp_init(w->loop, &l->handles[w->id]);
  }
  h->data = l;
  l->open[w->id] = 1;
  w->handles_open++;
  rc = l->pipes != NULL ? uv_pipe_open(&l->pipes[w->id], l->fds[w->id])
                        : uv_tcp_open(&l->handles[w->id], l->fds[w->id]);
  if (rc != 0)
    return TERN_EIO;
  l->fds[w->id] = -1; /* the handle owns it now */
  rc = uv_listen(h, 1024, on_connection);
  if (rc != 0) {
    tern__log(w->srv, TERN_LOG_ERROR, "listen: %s", uv_strerror(rc));
    return TERN_EIO;
  }
  return 0;
}

static void tcp_stop(tern__listener *base, tern__worker *w) {
  tcp_listener *l = (tcp_listener *)base;
  if (l->open[w->id])
    tern__worker_close_handle(w, l->pipes != NULL
                                     ? (uv_handle_t *)&l->pipes[w->id]
                                     : (uv_handle_t *)&l->handles[w->id]);
}

static void tcp_free(tern__listener *base, tern_server *srv) {
  tcp_listener *l = (tcp_listener *)base;
  unsigned i;
  for (i = 0; i < srv->nworkers; i++)
    if (l->fds[i] >= 0)
      close(l->fds[i]);
  tern__free(srv, l->fds);
  tern__free(srv, l->handles);
  tern__free(srv, l->pipes);
  tern__free(srv, l->open);
  tern__free(srv, l->proxy.nets);
  if (l->path != NULL) {
    unlink(l->path);
    tern__free(srv, l->path);
  }
  tern__free(srv, l);
}

static const tern__listener_ops tcp_ops = {
    .name = "tcp",
    .start = tcp_start,
    .stop = tcp_stop,
    .free = tcp_free,
};

int tern__net_addr(const char *host, int port, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  if (host == NULL)
    return uv_ip6_addr("::", port, (struct sockaddr_in6 *)ss) ? TERN_EADDR : 0;
  if (strcmp(host, "localhost") == 0)
    host = "127.0.0.1";
  if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
    return 0;
  if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
    return 0;
  return TERN_EADDR;
}

int tern__net_port(const struct sockaddr_storage *ss) {
  return ntohs(ss->ss_family == AF_INET
                   ? ((const struct sockaddr_in *)ss)->sin_port
                   : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* A wildcard address (0.0.0.0 or ::): a connection's own address is
 * then whichever one the client reached. */
static int wildcard(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == INADDR_ANY;
  return ss->ss_family != AF_INET6 ||
         IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

/* One listening socket per address, shared by every worker (each gets a
 * dup of it), and without SO_REUSEPORT. A group of SO_REUSEPORT sockets
 * would spread connections over the workers in the kernel, but it cannot
 * be closed to others: any later socket of the same user that sets the
 * option joins the group and silently takes part of the traffic, and a
 * second server started on our port would bind without an error. A
 * socket without the option makes every other bind of the address fail
 * with EADDRINUSE. The workers then take turns accepting from one queue,
 * whichever loop wakes first (or hand what they accept on:
 * TERN_BALANCE_LEAST_CONNECTIONS); SO_REUSEADDR only lets a restarted
 * server bind over connections still in TIME_WAIT. TERN_BALANCE_REUSEPORT
 * makes such a group anyway, closed as far as it can be (open_group). */
static int bind_socket(const struct sockaddr_storage *ss, int dual,
                       int reuseport) {
  int one = 1, zero = 0;
  socklen_t len = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
                                           : sizeof(struct sockaddr_in6);
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return TERN_EIO;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (reuseport)
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
  if (ss->ss_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual ? &zero : &one, sizeof(one));
  if (bind(fd, (const struct sockaddr *)ss, len) != 0) {
    int e = errno;
    close(fd);
    return e == EADDRINUSE ? TERN_EADDRINUSE : TERN_EADDR;
  }
  return fd;
}

static int open_socket(const struct sockaddr_storage *ss, int dual) {
  int fd = bind_socket(ss, dual, 0);
  if (fd >= 0 && listen(fd, 1024) != 0) {
    close(fd);
    return TERN_EIO;
  }
  return fd;
}

/* TERN_BALANCE_REUSEPORT: `n` sockets in one SO_REUSEPORT group, one per
 * worker, so that the kernel spreads connections over them (by a hash of
 * the client's address and port: blind to load). The group is kept to
 * tern's own as far as Linux allows:
 * - a plain socket is bound first and closed: a port anyone holds
 *   (another server, tern or not, a group of any user) is refused with
 *   EADDRINUSE, as for the shared socket, and port 0 learns its port;
 * - a classic BPF program (SO_ATTACH_REUSEPORT_CBPF) picks the socket by
 *   index among the first `n`, ours: a socket of the same user that joins
 *   the group later binds, but is given no connection.
 * The hash is the packet's (skb->hash: the NIC's, or the sending
 * socket's on loopback) mixed with the client's port, so that it spreads
 * even where one of them is constant. */
static int open_group(struct sockaddr_storage *ss, int dual, int *fds,
                      unsigned n) {
  /* A = hash ^ source port; A % n. The source port is the transport
   * header's first half-word, after the IPv4 header (its length from its
   * first byte) or the fixed IPv6 one. */
  struct sock_filter code[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, SKF_AD_OFF + SKF_AD_RXHASH},
      {BPF_ST, 0, 0, 0},                                       /* M[0] */
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, (uint32_t)SKF_NET_OFF}, /* version */
      {BPF_ALU | BPF_RSH | BPF_K, 0, 0, 4},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 6},
      {BPF_LD | BPF_H | BPF_ABS, 0, 0, (uint32_t)SKF_NET_OFF + 40},
      {BPF_JMP | BPF_JA, 0, 0, 5},
      {BPF_LD | BPF_B | BPF_ABS, 0, 0, (uint32_t)SKF_NET_OFF}, /* IHL */
      {BPF_ALU | BPF_AND | BPF_K, 0, 0, 0x0f},
      {BPF_ALU | BPF_LSH | BPF_K, 0, 0, 2},
      {BPF_MISC | BPF_TAX, 0, 0, 0},
      {BPF_LD | BPF_H | BPF_IND, 0, 0, (uint32_t)SKF_NET_OFF},
      {BPF_LDX | BPF_W | BPF_MEM, 0, 0, 0},
      {BPF_ALU | BPF_XOR | BPF_X, 0, 0, 0},
      {BPF_ALU | BPF_MOD | BPF_K, 0, 0, n},
      {BPF_RET | BPF_A, 0, 0, 0},
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(code) / sizeof(code[0])),
                            code};
  socklen_t slen = sizeof(*ss);
  unsigned i;
  int fd = bind_socket(ss, dual, 0);

  if (fd < 0)
    return fd;
  if (getsockname(fd, (struct sockaddr *)ss, &slen) != 0) {
    close(fd);
    return TERN_EIO;
  }
  close(fd);
  for (i = 0; i < n; i++) {
    fds[i] = bind_socket(ss, dual, 1);
    if (fds[i] < 0 || listen(fds[i], 1024) != 0 ||
        (i == 0 && setsockopt(fds[0], SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF,
                              &prog, sizeof(prog)) != 0)) {
      int rc = fds[i] < 0 ? fds[i] : TERN_EIO;
      while (i + 1 > 0) {
        if (fds[i] >= 0)
          close(fds[i]);
        fds[i--] = -1;
      }
      return rc;
    }
  }
  return 0;
}

/* A Unix socket bound to `path` ("@name": Linux's abstract namespace,
 * no file) and listening, like open_socket. An existing file is not
 * removed: a second server on one path fails (TERN_EADDRINUSE) rather
 * than stealing the first one's clients. */
static int open_unix(const char *path) {
  struct sockaddr_un sun;
  size_t n = strlen(path);
  socklen_t len;
  int fd;

  memset(&sun, 0, sizeof(sun));
  sun.sun_family = AF_UNIX;
  if (n == 0 || n >= sizeof(sun.sun_path) || (path[0] == '@' && n < 2))
    return TERN_EADDR;
  memcpy(sun.sun_path, path, n);
  if (path[0] == '@')
    sun.sun_path[0] = '\0'; /* abstract: the name is the bytes after it */
  len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n +
                    (path[0] == '@' ? 0 : 1));
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return TERN_EIO;
  if (bind(fd, (const struct sockaddr *)&sun, len) != 0) {
    int e = errno;
    close(fd);
    return e == EADDRINUSE ? TERN_EADDRINUSE : TERN_EADDR;
  }
  if (listen(fd, 1024) != 0) {
    close(fd);
    if (path[0] != '@')
      unlink(path);
    return TERN_EIO;
  }
  return fd;
}

/* A descriptor handed over by the parent: a listening stream socket, TCP
 * (its family) or Unix (AF_UNIX); made non-blocking. TERN_EINVAL for
 * anything else (a UDP socket: QUIC's, tern_listen_with with quic; a socket
 * that does not listen). */
static int given_domain(int fd) {
  int type = 0, acc = 0, domain = 0;
  socklen_t len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
      type != SOCK_STREAM)
    return TERN_EINVAL;
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) != 0 || !acc)
    return TERN_EINVAL;
  len = sizeof(int);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
      (domain != AF_INET && domain != AF_INET6 && domain != AF_UNIX))
    return TERN_EINVAL;
  if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
    return TERN_EIO;
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return domain;
}

/* Listen on host:port, or on the Unix socket `unix_path` when it is not
 * NULL, each connection through `filter` (NULL: plain) with `cfg`. */
static int listen_on(tern_server *srv, const char *host, int port,
                     const char *unix_path, int given_fd,
                     const tern__filter *filter, void *cfg,
                     const char *proxy_trusted, int http2_only, int http1_only,
                     int *bound_port) {
  struct sockaddr_storage ss;
  socklen_t slen = sizeof(ss);
  tcp_listener *l;
  unsigned i;
  int rc, fd, group;

  if (srv == NULL || port < 0 || port > 65535)
    return TERN_EINVAL;
  if (atomic_load(&srv->state) != TERN__S_IDLE)
    return TERN_ESTATE;
  if (given_fd >= 0) {
    int domain = given_domain(given_fd);
    if (domain < 0) {
      tern__log(srv, TERN_LOG_ERROR,
                "tern_listen_with: fd %d is not a listening TCP or Unix "
                "stream socket (a UDP one serves HTTP/3: with quic = 1)",
                given_fd);
      return domain;
    }
    if (domain == AF_UNIX)
      unix_path = "@"; /* a Unix socket, bound by the parent */
  } else if (unix_path == NULL && (rc = tern__net_addr(host, port, &ss)) != 0) {
    return rc;
  }
  l = tern__malloc(srv, sizeof(*l));
  if (l == NULL)
    return TERN_ENOMEM;
  memset(l, 0, sizeof(*l));
  l->base.ops = &tcp_ops;
  l->srv = srv;
  l->acc.filter = filter;
  l->acc.cfg = cfg;
  l->acc.h2_only = http2_only != 0;
  l->acc.h1_only = http1_only != 0;
  if (proxy_trusted != NULL) {
    tern__proxy_net nets[TERN__PROXY_NETS];
    int n = tern__proxy_nets(proxy_trusted, nets, TERN__PROXY_NETS);
    if (n <= 0) {
      tern__log(srv, TERN_LOG_ERROR,
                "proxy_trusted: not a list of networks: %s", proxy_trusted);
      tern__free(srv, l);
      return TERN_EINVAL;
    }
    l->proxy.nets = tern__malloc(srv, (size_t)n * sizeof(*nets));
    if (l->proxy.nets == NULL) {
      tern__free(srv, l);
      return TERN_ENOMEM;
    }
    memcpy(l->proxy.nets, nets, (size_t)n * sizeof(*nets));
    l->proxy.nnets = (size_t)n;
    l->acc.proxy = &l->proxy;
  }
  l->fds = tern__malloc(srv, srv->nworkers * sizeof(int));
  if (unix_path != NULL)
    l->pipes = tern__malloc(srv, srv->nworkers * sizeof(uv_pipe_t));
  else
    l->handles = tern__malloc(srv, srv->nworkers * sizeof(uv_tcp_t));
  l->open = tern__malloc(srv, srv->nworkers);
  if (l->fds == NULL || (l->handles == NULL && l->pipes == NULL) ||
      l->open == NULL) {
    tern__free(srv, l->fds);
    l->fds = NULL;
    rc = TERN_ENOMEM;
    goto fail;
  }
  memset(l->open, 0, srv->nworkers);
  l->acc.unix_socket = l->pipes != NULL;
  for (i = 0; i < srv->nworkers; i++)
    l->fds[i] = -1;
  group = given_fd < 0 && unix_path == NULL && srv->nworkers > 1 &&
          srv->s.balance == TERN_BALANCE_REUSEPORT;
  if (group)
    fd = (rc = open_group(&ss, host == NULL, l->fds, srv->nworkers)) == 0
             ? l->fds[0]
             : rc;
  else if (given_fd >= 0)
    fd = given_fd;
  else if (unix_path != NULL)
    fd = open_unix(unix_path);
  else
    fd = open_socket(&ss, host == NULL);
  if (fd < 0) {
    rc = fd;
    goto fail;
  }
  l->fds[0] = fd;
  if (given_fd < 0 && unix_path != NULL && unix_path[0] != '@') {
    l->path = tern__malloc(srv, strlen(unix_path) + 1);
    if (l->path == NULL) {
      unlink(unix_path);
      rc = TERN_ENOMEM;
      goto fail;
    }
    memcpy(l->path, unix_path, strlen(unix_path) + 1);
  }
  /* Port 0: the bind picked the port; report it. */
  if (unix_path == NULL &&
      getsockname(fd, (struct sockaddr *)&ss, &slen) != 0) {
    rc = TERN_EIO;
    goto fail;
  }
  if (unix_path == NULL && !wildcard(&ss)) {
    tern__addr_set(&l->acc.local, (struct sockaddr *)&ss);
    l->acc.local_known = 1;
  }
  for (i = 1; i < srv->nworkers && !group; i++) {
    l->fds[i] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (l->fds[i] < 0) {
      rc = TERN_EIO;
      goto fail;
    }
  }
  if ((rc = tern__server_add_listener(srv, &l->base)) != 0)
    goto fail;
  if (bound_port != NULL && unix_path == NULL)
    *bound_port = tern__net_port(&ss);
  return 0;
fail:
  if (given_fd >= 0 && l->fds != NULL && l->fds[0] == given_fd)
    l->fds[0] = -1; /* the caller's again */
  if (l->fds == NULL) {
    tern__free(srv, l->handles);
    tern__free(srv, l->pipes);
    tern__free(srv, l->open);
    tern__free(srv, l->proxy.nets);
    tern__free(srv, l);
  } else {
    tcp_free(&l->base, srv);
  }
  return rc;
}

int tern_listen(tern_server *srv, const char *host, int port, int *bound_port) {
  return listen_on(srv, host, port, NULL, -1, NULL, NULL, NULL, 0, 0,
                   bound_port);
}

static const size_t listen_options_ends[] = {
    TERN__END(tern_listen_options, proxy_trusted),
    TERN__END(tern_listen_options, quic_options),
    TERN__END(tern_listen_options, http2_only),
    TERN__END(tern_listen_options, http1_only),
};
_Static_assert(sizeof(listen_options_ends) / sizeof(listen_options_ends[0]) ==
                   TERN_LISTEN_OPTIONS_VERSION,
               "one end per tern_listen_options version");

void tern_listen_options_init_size(tern_listen_options *out, size_t size) {
  tern_listen_options d, *o = &d;
  if (out == NULL)
    return;
  memset(o, 0, sizeof(*o));
  o->version = TERN_LISTEN_OPTIONS_VERSION;
  o->size = sizeof(*o);
  o->fd = -1;
  tern__abi_init(out, size, &d, listen_options_ends,
                 TERN_LISTEN_OPTIONS_VERSION);
}

/* The options of tern_listen_with, read as the caller's version lays them
 * out and checked: 0, or TERN_EINVAL (logged). */
int tern__listen_read(tern_server *srv, const tern_listen_options *in,
                      tern_listen_options *o) {
  char why[128];
  const char *bad = NULL;
  int where;

  if (srv == NULL || in == NULL)
    return TERN_EINVAL;
  tern_listen_options_init_size(o, sizeof(*o));
  if (tern__abi_read(o, sizeof(*o), in, listen_options_ends,
                     TERN_LISTEN_OPTIONS_VERSION, why, sizeof(why)) != 0) {
    tern__log(srv, TERN_LOG_ERROR, "tern_listen_with: %s", why);
    return TERN_EINVAL;
  }
  where = (o->path != NULL) + (o->fd >= 0) + (o->host != NULL || o->port != 0);
  if (o->proxy_protocol != 0 && o->proxy_protocol != 1)
    bad = "proxy_protocol is 0 or 1";
  else if (o->quic != 0 && o->quic != 1)
    bad = "quic is 0 or 1";
  else if (where > 1)
    bad = "one of host and port, path, or fd";
  else if (o->port < 0 || o->port > 65535)
    bad = "port outside 0 to 65535";
  else if (o->quic && (o->path != NULL || o->proxy_protocol))
    bad = "quic is UDP: no path, no PROXY protocol";
  else if (o->quic && o->tls == NULL)
    bad = "quic needs tls (its certificates)";
  else if (!o->quic && o->quic_options != NULL)
    bad = "quic_options without quic";
  else if (o->http2_only != 0 && o->http2_only != 1)
    bad = "http2_only is 0 or 1";
  else if (o->http2_only && (o->tls != NULL || o->quic))
    bad = "http2_only is for plain listeners (over TLS, ALPN chooses)";
  else if (o->http1_only != 0 && o->http1_only != 1)
    bad = "http1_only is 0 or 1";
  else if (o->http1_only && (o->http2_only || o->quic))
    bad = "http1_only is not with http2_only or quic";
  if (bad != NULL) {
    tern__log(srv, TERN_LOG_ERROR, "tern_listen_with: %s", bad);
    return TERN_EINVAL;
  }
  if (o->tls != NULL && !tern__tls_ready(o->tls))
    return TERN_ESTATE;
  if (o->http2_only && tern__proto_find("h2", 2) == NULL)
    return TERN_ENOTSUP;
  if (o->http1_only && o->tls != NULL &&
      tern__tls_filter_of(o->tls)->alpn_http1 == NULL) {
    tern__log(srv, TERN_LOG_ERROR,
              "tern_listen_with: http1_only over TLS is not supported by the "
              "%s engine",
              tern__tls_engine_label(o->tls));
    return TERN_ENOTSUP;
  }
  return 0;
}

/* A byte-stream listener (TCP, Unix, or a socket handed over) from read
 * options. */
int tern__listen_stream(tern_server *srv, const tern_listen_options *o,
                        int *bound_port) {
  return listen_on(
      srv, o->host, o->port, o->path, o->fd,
      o->tls != NULL ? tern__tls_filter_of(o->tls) : NULL, o->tls,
      o->proxy_protocol
          ? (o->proxy_trusted != NULL ? o->proxy_trusted : "127.0.0.0/8, ::1")
          : NULL,
      o->http2_only, o->http1_only, bound_port);
}

/* LISTEN_FDNAMES into names[0 .. v): exactly v names, colon-separated,
 * each shorter than TERN_LISTEN_FD_NAME_MAX; "unknown" for each when it
 * is absent (as sd_listen_fds_with_names). */
static int fd_names(const char *list, long v,
                    char (*names)[TERN_LISTEN_FD_NAME_MAX]) {
  long i;
  if (list == NULL) {
    for (i = 0; i < v; i++)
      memcpy(names[i], "unknown", sizeof("unknown"));
    return 0;
  }
  for (i = 0; i < v; i++) {
    const char *colon = strchr(list, ':');
    size_t len = colon != NULL ? (size_t)(colon - list) : strlen(list);
    if (len >= TERN_LISTEN_FD_NAME_MAX || (colon == NULL) != (i == v - 1))
      return TERN_EINVAL;
    memcpy(names[i], list, len);
    names[i][len] = '\0';
    list += len + 1;
  }
  return v == 0 && *list != '\0' ? TERN_EINVAL : 0;
}

int tern_listen_fds_from_env(int *fds, size_t max) {
  return tern_listen_fds_from_env_named(fds, NULL, max);
}

int tern_listen_fds_from_env_named(int *fds,
                                   char (*names)[TERN_LISTEN_FD_NAME_MAX],
                                   size_t max) {
  const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
  char *end;
  long v, i;

  if (fds == NULL && max > 0)
    return TERN_EINVAL;
  if (pid == NULL || n == NULL)
    return 0;
  v = strtol(pid, &end, 10);
  if (*pid == '\0' || *end != '\0' || v != (long)getpid())
    return 0; /* meant for another process (the parent's) */
  v = strtol(n, &end, 10);
  if (*n == '\0' || *end != '\0' || v < 0 || v > 4096)
    return TERN_EINVAL;
  if ((size_t)v > max)
    return TERN_ENOMEM;
  if (names != NULL && fd_names(getenv("LISTEN_FDNAMES"), v, names) != 0)
    return TERN_EINVAL;
  for (i = 0; i < v; i++) {
    fds[i] = 3 + (int)i; /* SD_LISTEN_FDS_START */
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  }
  /* Not passed on to the children of this process. */
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  return (int)v;
}
