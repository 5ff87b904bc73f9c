/* A program built against an older tern.h (old_header/tern.h, from before
 * tern_settings version 2, with tern_stats at version 2 of 112 bytes) runs
 * against today's library: every struct it lays out is followed by
 * canary bytes, and no library call may touch them. Its _init calls are
 * the exported functions of that header's time, which once wrote the
 * library's own, larger, layout (tern_stats_init wrote 880 bytes into a
 * program's 112: 768 bytes of its stack). Under AddressSanitizer a write
 * past a struct is reported even where no canary sits.
 *
 * Built with include_directories('unit/old_header') only: this file sees
 * nothing of today's headers. It is linked against today's library, so
 * the one call whose signature changed since (tern_server_new, whose
 * out-parameter moved last in 0.2) is bound to the version a program
 * linked against 0.1 recorded, TERN_0 (lib/tern.map), as that program's
 * dynamic loader would bind it. */
#include <stdio.h>
#include <string.h>

#include "tern.h"

__asm__(".symver tern_server_new,tern_server_new@TERN_0");

#define CANARY 0xC5
#define ROOM 1024

static int failed, run;

#define WITH_CANARY(type)                                                      \
  struct {                                                                     \
    type s;                                                                    \
    unsigned char canary[ROOM];                                                \
  }

static int canary_intact(const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++)
    if (p[i] != CANARY)
      return 0;
  return 1;
}

/* Fill the struct and its canary, run `call`, check the canary. */
#define CHECK_CALL(what, var, call)                                            \
  do {                                                                         \
    int ok_;                                                                   \
    call;                                                                      \
    ok_ = canary_intact((var).canary, ROOM);                                   \
    run++;                                                                     \
    printf("%s %d - %s leaves the bytes after the struct alone\n",             \
           ok_ ? "ok" : "not ok", run, what);                                  \
    if (!ok_)                                                                  \
      failed++;                                                                \
  } while (0)

#define EXPECT(what, cond)                                                     \
  do {                                                                         \
    int ok_ = (cond); /* once: some conditions are calls */                    \
    run++;                                                                     \
    printf("%s %d - %s\n", ok_ ? "ok" : "not ok", run, what);                  \
    if (!ok_)                                                                  \
      failed++;                                                                \
  } while (0)

static void nop(tern_request *r, void *user) {
  (void)user;
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

int main(void) {
  WITH_CANARY(tern_settings) set;
  WITH_CANARY(tern_route_options) ro;
  WITH_CANARY(tern_ws_options) wo;
  WITH_CANARY(tern_quic_options) qo;
  WITH_CANARY(tern_stats) st;
  tern_server *srv = NULL;
  int port = 0;

  memset(&set, CANARY, sizeof set);
  memset(&ro, CANARY, sizeof ro);
  memset(&wo, CANARY, sizeof wo);
  memset(&qo, CANARY, sizeof qo);
  memset(&st, CANARY, sizeof st);

  CHECK_CALL("tern_settings_init", set, tern_settings_init(&set.s));
  EXPECT("settings: version 1 of this header",
         set.s.version == 1 && set.s.size <= sizeof(set.s) &&
             set.s.max_head_size == 16384);
  set.s.workers = 1;
  CHECK_CALL("tern_server_new", set,
             EXPECT("tern_server_new", tern_server_new(&srv, &set.s) == 0));
  if (srv == NULL) {
    printf("Bail out! no server\n");
    return 1;
  }

  CHECK_CALL("tern_route_options_init", ro, tern_route_options_init(&ro.s));
  EXPECT("route options: a version this header has",
         ro.s.version == 1 && ro.s.size <= sizeof(ro.s));
  ro.s.max_body_size = 1024;
  CHECK_CALL("tern_route_with", ro,
             EXPECT("tern_route_with",
                    tern_route_with(srv, "GET", "/", nop, NULL, &ro.s) == 0));

  CHECK_CALL("tern_ws_options_init", wo, tern_ws_options_init(&wo.s));
  EXPECT("ws options: a version this header has",
         wo.s.version >= 1 && wo.s.version <= TERN_WS_OPTIONS_VERSION &&
             wo.s.size <= sizeof(wo.s));

  CHECK_CALL("tern_quic_options_init", qo, tern_quic_options_init(&qo.s));
  EXPECT("quic options: a version this header has",
         qo.s.version == 1 && qo.s.size <= sizeof(qo.s));

  CHECK_CALL("tern_listen", set,
             EXPECT("tern_listen",
                    tern_listen(srv, "127.0.0.1", 0, &port) == 0 && port > 0));

  CHECK_CALL("tern_stats_init", st, tern_stats_init(&st.s));
  EXPECT("stats: a version this header has",
         st.s.version >= 1 && st.s.version <= TERN_STATS_VERSION &&
             st.s.size <= sizeof(st.s));
  CHECK_CALL("tern_server_stats", st,
             EXPECT("tern_server_stats", tern_server_stats(srv, &st.s) == 0 &&
                                             st.s.requests == 0 &&
                                             st.s.allocations > 0));
  /* With the struct's full size and version, as a program that set them
   * by hand (the header allows it) would: still nothing past it. */
  st.s.version = TERN_STATS_VERSION;
  st.s.size = sizeof(st.s);
  CHECK_CALL("tern_server_stats (version 2)", st,
             EXPECT("tern_server_stats (version 2)",
                    tern_server_stats(srv, &st.s) == 0 && st.s.version == 2));

  tern_server_free(srv);
  printf("1..%d\n", run);
  return failed != 0;
}
