/* The unsized _init functions, exported for programs built against a
 * tern.h that declared them as functions (0.1.x): such a program's struct
 * may be as old as version 1, the one layout all of them have, so that is
 * all these write. tern.h makes each _init an inline call of the sized
 * X_init_size for everyone else; this file alone sees the functions. */
#define TERN__LEGACY_INIT 1

#include "core/worker.h"

/* Version 1 of each struct ends with the field named (tern.h). */
void tern_settings_init(tern_settings *o) {
  tern_settings_init_size(o, TERN__END(tern_settings, log_level));
}

void tern_listen_options_init(tern_listen_options *o) {
  tern_listen_options_init_size(o,
                                TERN__END(tern_listen_options, proxy_trusted));
}

void tern_quic_options_init(tern_quic_options *o) {
  tern_quic_options_init_size(o, TERN__END(tern_quic_options, secret_len));
}

void tern_compress_options_init(tern_compress_options *o) {
  tern_compress_options_init_size(o, TERN__END(tern_compress_options, types));
}

void tern_route_options_init(tern_route_options *o) {
  tern_route_options_init_size(o, TERN__END(tern_route_options, max_body_size));
}

void tern_static_options_init(tern_static_options *o) {
  tern_static_options_init_size(o, TERN__END(tern_static_options, block_size));
}

void tern_ws_options_init(tern_ws_options *o) {
  tern_ws_options_init_size(o, TERN__END(tern_ws_options, subprotocol_len));
}

void tern_stats_init(tern_stats *o) {
  tern_stats_init_size(o, TERN__END(tern_stats, frees));
}

void tern_access_log_options_init(tern_access_log_options *o) {
  tern_access_log_options_init_size(
      o, TERN__END(tern_access_log_options, queue_buffers));
}

/* ---- 0.1's calls that 0.2 changed or replaced -------------------------
 *
 * A program linked against 0.1 asks for these by name under the version
 * node TERN_0 (lib/tern.map): they stay, so that it runs on 0.2 unchanged.
 * Programs built against 0.2's header never see them. */

#define LEGACY __attribute__((visibility("default")))

/* 0.1's tern_server_new put the out-parameter first: the same call under
 * TERN_0; tern_server_new@@TERN_0.2 takes it last. */
LEGACY int compat_server_new_0_1(tern_server **out, const tern_settings *s);
__asm__(".symver compat_server_new_0_1, tern_server_new@TERN_0");
int compat_server_new_0_1(tern_server **out, const tern_settings *s) {
  return tern_server_new(s, out);
}

/* The six listener calls tern_listen_with replaced. */
static int listen_0_1(tern_server *srv, const tern_listen_options *base,
                      const char *host, int port, const char *path, int fd,
                      tern_tls *tls, int quic, const tern_quic_options *q,
                      int *bound_port) {
  tern_listen_options o;
  tern_listen_options_init(&o);
  if (base != NULL) {
    /* A 0.1 caller's options are version 1: tls and the PROXY fields. */
    if (base->version < 1 ||
        base->size < TERN__END(tern_listen_options, proxy_trusted))
      return TERN_EINVAL;
    o.tls = base->tls;
    o.proxy_protocol = base->proxy_protocol;
    o.proxy_trusted = base->proxy_trusted;
  }
  o.host = host;
  o.port = port;
  o.path = path;
  o.fd = fd;
  if (tls != NULL)
    o.tls = tls;
  o.quic = quic;
  o.quic_options = q;
  return tern_listen_with(srv, &o, bound_port);
}

LEGACY int tern_listen_tls(tern_server *srv, const char *host, int port,
                           tern_tls *tls, int *bound_port);
int tern_listen_tls(tern_server *srv, const char *host, int port, tern_tls *tls,
                    int *bound_port) {
  if (tls == NULL)
    return TERN_EINVAL;
  return listen_0_1(srv, NULL, host, port, NULL, -1, tls, 0, NULL, bound_port);
}

LEGACY int tern_listen_ex(tern_server *srv, const char *host, int port,
                          const tern_listen_options *opts, int *bound_port);
int tern_listen_ex(tern_server *srv, const char *host, int port,
                   const tern_listen_options *opts, int *bound_port) {
  return listen_0_1(srv, opts, host, port, NULL, -1, NULL, 0, NULL, bound_port);
}

LEGACY int tern_listen_unix(tern_server *srv, const char *path,
                            const tern_listen_options *opts);
int tern_listen_unix(tern_server *srv, const char *path,
                     const tern_listen_options *opts) {
  if (path == NULL)
    return TERN_EINVAL;
  return listen_0_1(srv, opts, NULL, 0, path, -1, NULL, 0, NULL, NULL);
}

LEGACY int tern_listen_fd(tern_server *srv, int fd,
                          const tern_listen_options *opts, int *bound_port);
int tern_listen_fd(tern_server *srv, int fd, const tern_listen_options *opts,
                   int *bound_port) {
  if (fd < 0)
    return TERN_EINVAL;
  return listen_0_1(srv, opts, NULL, 0, NULL, fd, NULL, 0, NULL, bound_port);
}

LEGACY int tern_listen_quic(tern_server *srv, const char *host, int port,
                            tern_tls *tls, const tern_quic_options *opts,
                            int *bound_port);
int tern_listen_quic(tern_server *srv, const char *host, int port,
                     tern_tls *tls, const tern_quic_options *opts,
                     int *bound_port) {
  if (tls == NULL)
    return TERN_EINVAL;
  return listen_0_1(srv, NULL, host, port, NULL, -1, tls, 1, opts, bound_port);
}

LEGACY int tern_listen_quic_fd(tern_server *srv, int fd, tern_tls *tls,
                               const tern_quic_options *opts, int *bound_port);
int tern_listen_quic_fd(tern_server *srv, int fd, tern_tls *tls,
                        const tern_quic_options *opts, int *bound_port) {
  if (fd < 0 || tls == NULL)
    return TERN_EINVAL;
  return listen_0_1(srv, NULL, NULL, 0, NULL, fd, tls, 1, opts, bound_port);
}

/* 0.1's name of tern_server_set_default_handler. */
LEGACY int tern_set_default_handler(tern_server *srv, tern_handler handler,
                                    void *user, const tern_route_options *opts);
int tern_set_default_handler(tern_server *srv, tern_handler handler, void *user,
                             const tern_route_options *opts) {
  return tern_server_set_default_handler(srv, handler, user, opts);
}
