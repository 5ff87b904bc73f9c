/* The unsized _init functions, exported for programs built against a
 * tern.h that declared them as functions (0.1.x): such a program's struct
 * may be as old as version 1, the one layout all of them have, so that is
 * all these write. tern.h makes each _init an inline call of the sized
 * X_init_size for everyone else; this file alone sees the functions. */
#define TERN__LEGACY_INIT 1

#include "internal.h"

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
