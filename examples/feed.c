/* feed: a live feed over Server-Sent Events, with a slow backend's
 * updates published from another thread.
 *
 *   GET  /         a page that shows the feed (EventSource)
 *   GET  /events   the event stream: "tick" events once a second from a
 *                  thread of this program, "say" events as they are
 *                  posted; a client that reconnects is told which event
 *                  it saw last (its Last-Event-ID)
 *   POST /say      publish the body as a "say" event to every client
 *
 *   build/examples/feed [PORT] [TICK_MS]   (8080, 1000)
 *
 * The streams live on tern's workers; the ticker thread and /say publish
 * through one hub, which hands each event to every worker's subscribers.
 * Heartbeats keep quiet streams open through proxies; a client that
 * stops reading is closed (its browser reconnects); Ctrl-C ends every
 * stream cleanly. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tern.h"

static tern_server *srv;
static tern_sse_hub *hub;
static atomic_int stopping;
static atomic_ulong next_id = 1;
static long tick_ms = 1000;

static const char page[] =
    "<!doctype html><meta charset=\"utf-8\"><title>tern feed</title>\n"
    "<ul id=\"feed\"></ul>\n<script>\n"
    "const feed = document.getElementById('feed');\n"
    "const es = new EventSource('/events');\n"
    "function show(kind, e) {\n"
    "  const li = document.createElement('li');\n"
    "  li.textContent = kind + ' ' + e.lastEventId + ': ' + e.data;\n"
    "  feed.prepend(li);\n"
    "}\n"
    "es.addEventListener('tick', e => show('tick', e));\n"
    "es.addEventListener('say', e => show('say', e));\n"
    "es.addEventListener('welcome', e => show('welcome', e));\n"
    "</script>\n";

static void on_signal(int sig) {
  (void)sig;
  atomic_store(&stopping, 1);
  tern_stop(srv, 5000);
}

static void publish(const char *event, const char *data, size_t len) {
  char id[24];
  snprintf(id, sizeof(id), "%lu", atomic_fetch_add(&next_id, 1));
  tern_sse_publish(hub, id, event, data, len);
}

/* The slow backend: an update every tick_ms, from a thread of its own. */
static void *ticker(void *arg) {
  struct timespec ts = {tick_ms / 1000, (tick_ms % 1000) * 1000000L};
  unsigned long n = 0;
  char data[32];
  (void)arg;
  while (!atomic_load(&stopping)) {
    nanosleep(&ts, NULL);
    publish("tick", data, (size_t)snprintf(data, sizeof(data), "%lu", ++n));
  }
  return NULL;
}

static void home(tern_request *r, void *user) {
  static const tern_header html[] = {
      TERN_HEADER("content-type", "text/html; charset=utf-8")};
  (void)user;
  tern_respond(r, 200, html, 1, page, sizeof(page) - 1);
}

static void events(tern_request *r, void *user) {
  tern_sse_options o;
  tern_sse *s;
  size_t n = 0;
  const char *last;
  char hello[96];
  int len;
  (void)user;
  tern_sse_options_init(&o);
  o.retry_ms = 2000;
  o.hub = hub;
  if (tern_sse_start(r, &o, &s) != 0)
    return;
  last = tern_sse_last_event_id(s, &n);
  len = snprintf(hello, sizeof(hello), "last seen: %.*s", (int)n,
                 last != NULL ? last : "");
  tern_sse_send(s, NULL, "welcome", hello, (size_t)len);
}

static void say(tern_request *r, void *user) {
  size_t n = 0;
  const char *body = tern_request_body(r, &n);
  (void)user;
  publish("say", body, n);
  tern_respond(r, 204, NULL, 0, NULL, 0);
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8080, rc;
  pthread_t t;
  if (argc > 2)
    tick_ms = atol(argv[2]) > 0 ? atol(argv[2]) : 1000;
  if ((rc = tern_server_new(NULL, &srv)) != 0 ||
      (rc = tern_sse_hub_new(srv, &hub)) != 0) {
    fprintf(stderr, "feed: %s\n", tern_strerror(rc));
    tern_server_free(srv);
    return 1;
  }
  if ((rc = tern_route(srv, "GET", "/", home, NULL)) != 0 ||
      (rc = tern_route(srv, "GET", "/events", events, NULL)) != 0 ||
      (rc = tern_route(srv, "POST", "/say", say, NULL)) != 0 ||
      (rc = tern_listen(srv, "127.0.0.1", port, &port)) != 0) {
    fprintf(stderr, "feed: %s\n", tern_strerror(rc));
    tern_sse_hub_free(hub);
    tern_server_free(srv);
    return 1;
  }
  printf("listening on %d\n", port);
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  pthread_create(&t, NULL, ticker, NULL);
  rc = tern_run(srv);
  atomic_store(&stopping, 1);
  pthread_join(t, NULL);
  tern_sse_hub_free(hub); /* stopped: no stream is left */
  tern_server_free(srv);
  return rc == 0 ? 0 : 1;
}
