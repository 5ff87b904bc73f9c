/* A transport with no socket under a connection head, for the tests that
 * drive an adapter directly (test_http2.c, test_http3.c): input and
 * output go straight to the adapter, the rest does nothing. Each test
 * brings its own close and free (what its connection owns). */
#ifndef TERN_TEST_FAKE_TRANSPORT_H
#define TERN_TEST_FAKE_TRANSPORT_H

#include "core/conn.h"

static void fake_tp_process(tern__conn *c) {
  c->proto->input(c);
}
static void fake_tp_output(tern__conn *c) {
  c->proto->output(c);
}
static void fake_tp_flush(tern__conn *c) {
  (void)c;
}
static void fake_tp_input(tern__conn *c, int on) {
  (void)c;
  (void)on;
}
static size_t fake_tp_buffered(const tern__conn *c) {
  (void)c;
  return 0;
}
static void fake_tp_timeout(tern__conn *c, int kind) {
  (void)c;
  (void)kind;
}

/* The table, for a connection of `size` bytes. */
#define FAKE_TRANSPORT(size, close_fn, free_fn)                                \
  {                                                                            \
    .name = "fake", .conn_size = (size), .process = fake_tp_process,           \
    .output = fake_tp_output, .flush = fake_tp_flush, .input = fake_tp_input,  \
    .buffered = fake_tp_buffered, .timeout = fake_tp_timeout,                  \
    .close = (close_fn), .free = (free_fn)                                     \
  }

#endif
