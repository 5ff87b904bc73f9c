/* Listeners: an address and the transport that serves it. */
#ifndef TERN_CORE_LISTENER_H
#define TERN_CORE_LISTENER_H

#include "core/base.h"

/* ---- Listeners ----------------------------------------------------- */

/* An address tern accepts on, and the transport that serves it (lib/net:
 * TCP). The transport embeds this first in its own listener. */
typedef struct tern__listener tern__listener;
typedef struct {
  const char *name;
  /* Start accepting on worker `w`. A handle it opens on w's loop counts
   * in w->handles_open and is closed with tern__worker_close_handle. */
  int (*start)(tern__listener *l, tern__worker *w);
  /* Stop accepting on `w` (graceful stop, cleanup); again is harmless. */
  void (*stop)(tern__listener *l, tern__worker *w);
  /* Free the listener once no worker uses it. */
  void (*free)(tern__listener *l, tern_server *srv);
  /* A QUIC listener's UDP port (for Alt-Svc); NULL for the others. */
  int (*quic_port)(const tern__listener *l);
} tern__listener_ops;

struct tern__listener {
  const tern__listener_ops *ops;
};

/* A QUIC listener on `port` exists: the automatic Alt-Svc names it (the
 * first one's; not when the user set the field). */
void tern__server_quic_port(tern_server *srv, int port);

/* Take `l` into the server (idle only); TERN_ENOMEM leaves it the
 * caller's. */
int tern__server_add_listener(tern_server *srv, tern__listener *l);
/* tern_listen_with's parts (lib/protocols.c calls them): the options
 * read and checked (lib/net/tcp.c), then a byte-stream listener
 * (lib/net/tcp.c) or a QUIC one (lib/quic/listen.c). */
int tern__listen_read(tern_server *srv, const tern_listen_options *in,
                      tern_listen_options *o);
int tern__listen_stream(tern_server *srv, const tern_listen_options *o,
                        int *bound_port);
int tern__listen_quic(tern_server *srv, const tern_listen_options *o,
                      int *bound_port);

#endif
