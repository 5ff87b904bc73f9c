/* chat: chat rooms in the browser over WebSocket.
 *
 *   GET /             the page (HTML and JavaScript, served from this
 *                     file); /?room=NAME joins room NAME
 *   GET /chat         the lobby's WebSocket: every text message a member
 *                     sends goes to every member of its room, prefixed
 *                     with its sender's name
 *   GET /chat/:room   room `room`'s (1 to 32 letters, digits, '-', '_')
 *
 * Over HTTP/1.1 the page's WebSocket is an Upgrade; when the page came
 * over HTTP/2 (TLS), Chromium opens it as an RFC 8441 extended CONNECT on
 * the same connection, and over HTTP/3 as an RFC 9220 one (Chromium does
 * so only with --enable-features=EnableWebsocketsOverHttp3). The welcome
 * line says which carrier the server sees ("via h3"), and each join is
 * logged on stderr with it ("chat: user1 joined via h3").
 *
 * Options: --port N (0: any; prints "listening on PORT"), --host H,
 * --tls-port N --cert FILE --key FILE (prints "tls listening on PORT"),
 * --quic (HTTP/3 on the UDP port of the same number as the TLS port, with
 * the same certificate; prints "quic listening on PORT"; TLS responses
 * then advertise it with Alt-Svc), --workers N. SIGINT/SIGTERM stop
 * gracefully: members get close 1001.
 *
 * The members are a list under a mutex, since they may live on different
 * workers; each knows its room. A message is sent with tern_ws_broadcast:
 * one frame, shared by every member of the room. Members are referenced
 * while a broadcast uses them, so one that closes meanwhile stays a valid
 * handle.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tern.h"

#define MAX_MEMBERS 1024
#define MAX_TEXT 4096
#define MAX_ROOM 32

/* A member: its name's number and its room (the socket's data). */
typedef struct {
  unsigned long id;
  char room[MAX_ROOM + 1];
} member;

static tern_server *server;
static pthread_mutex_t room_lock = PTHREAD_MUTEX_INITIALIZER;
static tern_ws *members[MAX_MEMBERS];
static size_t nmembers;
static unsigned long next_id = 1;

static const char page[] =
    "<!doctype html>\n"
    "<html><head><meta charset=\"utf-8\"><title>tern chat</title>\n"
    "<style>body{font:15px sans-serif;max-width:40em;margin:2em auto}"
    "#log{border:1px solid #ccc;height:20em;overflow:auto;padding:.5em}"
    "#log div{margin:.2em 0}</style></head>\n"
    "<body><h1>tern chat</h1>\n"
    "<p id=\"status\">connecting...</p>\n"
    "<div id=\"log\"></div>\n"
    "<form id=\"f\"><input id=\"text\" size=\"50\" autocomplete=\"off\">"
    "<button id=\"send\">Send</button></form>\n"
    "<script>\n"
    "const log = document.getElementById('log');\n"
    "const status = document.getElementById('status');\n"
    "const room = new URLSearchParams(location.search).get('room');\n"
    "const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') +\n"
    "  location.host + '/chat' + (room ? '/' + encodeURIComponent(room) : "
    "'');\n"
    "const ws = new WebSocket(url);\n"
    "function add(text) {\n"
    "  const d = document.createElement('div');\n"
    "  d.textContent = text;\n"
    "  log.appendChild(d);\n"
    "  log.scrollTop = log.scrollHeight;\n"
    "}\n"
    "ws.onopen = () => { status.textContent = 'connected'; };\n"
    "ws.onmessage = (e) => {\n"
    "  if (e.data.startsWith('welcome ')) status.textContent = e.data;\n"
    "  else add(e.data);\n"
    "};\n"
    "ws.onclose = (e) => { status.textContent = 'closed ' + e.code; };\n"
    "document.getElementById('f').onsubmit = (e) => {\n"
    "  e.preventDefault();\n"
    "  const t = document.getElementById('text');\n"
    "  if (t.value) ws.send(t.value);\n"
    "  t.value = '';\n"
    "};\n"
    "</script></body></html>\n";

/* The carrier as the welcome line and the log name it. */
static const char *carrier(const tern_ws *ws) {
  switch (tern_ws_protocol(ws)) {
  case TERN_PROTO_HTTP3:
    return "h3";
  case TERN_PROTO_HTTP2:
    return "h2";
  default:
    return "http/1.1";
  }
}

static void on_signal(int sig) {
  (void)sig;
  tern_stop(server, 5000);
}

static void serve_page(tern_request *r, void *user) {
  static const tern_header html[] = {
      {"content-type", 12, "text/html; charset=utf-8", 24}};
  (void)user;
  tern_respond_ref(r, 200, html, 1, page, sizeof(page) - 1, NULL, NULL);
}

static const char *room_of(const tern_ws *ws) {
  return ((const member *)tern_ws_data(ws))->room;
}

static unsigned long id_of(const tern_ws *ws) {
  return ((const member *)tern_ws_data(ws))->id;
}

/* Send `text` to every member of `room`. */
static void broadcast(const char *room, const char *text, size_t len) {
  tern_ws *list[MAX_MEMBERS];
  size_t i, n = 0;

  pthread_mutex_lock(&room_lock);
  for (i = 0; i < nmembers; i++)
    if (strcmp(room_of(members[i]), room) == 0) {
      list[n] = members[i];
      tern_ws_ref(list[n++]);
    }
  pthread_mutex_unlock(&room_lock);
  tern_ws_broadcast(list, n, TERN_WS_TEXT, text, len);
  for (i = 0; i < n; i++)
    tern_ws_unref(list[i]);
}

static void on_open(tern_ws *ws, void *user) {
  member *m = user;
  char line[64];
  int n, full;

  tern_ws_set_data(ws, m);

  pthread_mutex_lock(&room_lock);
  full = nmembers == MAX_MEMBERS;
  m->id = next_id++;
  if (!full)
    members[nmembers++] = ws;
  pthread_mutex_unlock(&room_lock);
  if (full) {
    tern_ws_close(ws, 1008, "rooms full", 10);
    return;
  }
  n = snprintf(line, sizeof(line), "welcome user%lu (via %s)", m->id,
               carrier(ws));
  tern_ws_send(ws, TERN_WS_TEXT, line, (size_t)n);
  fprintf(stderr, "chat: user%lu joined via %s (room %s)\n", m->id, carrier(ws),
          m->room);
  n = snprintf(line, sizeof(line), "user%lu joined", m->id);
  broadcast(m->room, line, (size_t)n);
}

static void on_message(tern_ws *ws, int type, const char *data, size_t len,
                       int fin, void *user) {
  char line[MAX_TEXT + 32];
  int n;
  (void)fin;
  (void)user;
  if (type != TERN_WS_TEXT)
    return;
  n = snprintf(line, sizeof(line), "user%lu: %.*s", id_of(ws), (int)len, data);
  broadcast(room_of(ws), line, (size_t)n);
}

static void on_close(tern_ws *ws, int code, const char *reason, size_t len,
                     void *user) {
  char line[64];
  size_t i;
  int n, was_member = 0;
  (void)code;
  (void)reason;
  (void)len;
  (void)user;

  pthread_mutex_lock(&room_lock);
  for (i = 0; i < nmembers; i++) {
    if (members[i] == ws) {
      members[i] = members[--nmembers];
      was_member = 1;
      break;
    }
  }
  pthread_mutex_unlock(&room_lock);
  if (was_member && code != 1001) {
    n = snprintf(line, sizeof(line), "user%lu left", id_of(ws));
    broadcast(room_of(ws), line, (size_t)n);
  }
  free(tern_ws_data(ws));
}

static void chat_route(tern_request *r, void *user) {
  tern_ws_options o;
  tern_ws *ws;
  member *m;
  size_t n = 5, i;
  const char *room = tern_request_param(r, "room", 4, &n);
  static const tern_header text[] = {TERN_HEADER("content-type", "text/plain")};
  (void)user;
  if (room == NULL)
    room = "lobby", n = 5;
  for (i = 0; i < n; i++)
    if (!((room[i] >= 'a' && room[i] <= 'z') ||
          (room[i] >= 'A' && room[i] <= 'Z') ||
          (room[i] >= '0' && room[i] <= '9') || room[i] == '-' ||
          room[i] == '_'))
      break;
  if (n == 0 || n > MAX_ROOM || i < n) {
    tern_respond(r, 400, text, 1, "bad room name\n", 14);
    return;
  }
  if ((m = calloc(1, sizeof(*m))) == NULL) {
    tern_respond(r, 503, text, 1, "no memory\n", 10);
    return;
  }
  memcpy(m->room, room, n);
  tern_ws_options_init(&o);
  o.on_open = on_open;
  o.on_message = on_message;
  o.on_close = on_close;
  o.max_message_size = MAX_TEXT;
  /* A member that does not read gets no more than this queued; past it
   * broadcasts skip the member rather than grow its queue. */
  o.high_water = 256 * 1024;
  o.on_full = TERN_WS_FAIL_SEND;
  /* The member goes to the callbacks; on_open makes it the socket's
   * data, on_close frees it. */
  if (tern_ws_accept(r, &o, m, &ws) != 0 && m->id == 0)
    free(m); /* refused (and answered) before on_open */
}

static int arg(int argc, char **argv, int *i, const char *name,
               const char **out) {
  if (strcmp(argv[*i], name) != 0 || *i + 1 >= argc)
    return 0;
  *out = argv[++*i];
  return 1;
}

int main(int argc, char **argv) {
  tern_settings s;
  const char *host = "127.0.0.1", *port = "8081", *tls_port = NULL;
  const char *cert = NULL, *key = NULL, *workers = "1";
  int i, bound, rc, quic = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quic") == 0) {
      quic = 1;
      continue;
    }
    if (!arg(argc, argv, &i, "--port", &port) &&
        !arg(argc, argv, &i, "--host", &host) &&
        !arg(argc, argv, &i, "--tls-port", &tls_port) &&
        !arg(argc, argv, &i, "--cert", &cert) &&
        !arg(argc, argv, &i, "--key", &key) &&
        !arg(argc, argv, &i, "--workers", &workers)) {
      fprintf(stderr,
              "usage: chat [--port N] [--host H] [--tls-port N --cert F "
              "--key F [--quic]] [--workers N]\n");
      return 2;
    }
  }
  tern_settings_init(&s);
  s.workers = (unsigned)atoi(workers);
  if ((rc = tern_server_new(&s, &server)) != 0 ||
      (rc = tern_route(server, "GET", "/", serve_page, NULL)) != 0 ||
      (rc = tern_route(server, "GET", "/chat", chat_route, NULL)) != 0 ||
      (rc = tern_route(server, "GET", "/chat/:room", chat_route, NULL)) != 0 ||
      (rc = tern_listen(server, host, atoi(port), &bound)) != 0) {
    fprintf(stderr, "chat: %s\n", tern_strerror(rc));
    return 1;
  }
  printf("listening on %d\n", bound);
  if (tls_port != NULL) {
    tern_tls *tls;
    tern_listen_options lo;
    tern_listen_options_init(&lo);
    lo.host = host;
    lo.port = atoi(tls_port);
    if (cert == NULL || key == NULL || (rc = tern_tls_new(server, &tls)) != 0 ||
        (rc = tern_tls_add_cert_file(tls, cert, key)) != 0 ||
        (rc = tern_tls_commit(tls)) != 0 ||
        (lo.tls = tls, rc = tern_listen_with(server, &lo, &bound)) != 0) {
      fprintf(stderr, "chat: TLS: %s\n",
              tern_strerror(cert == NULL ? TERN_EINVAL : rc));
      return 1;
    }
    printf("tls listening on %d\n", bound);
    /* The same port number on UDP, as browsers expect of Alt-Svc's
     * h3=":PORT" and as --origin-to-force-quic-on dials. */
    lo.port = bound;
    lo.quic = 1;
    if (quic && (rc = tern_listen_with(server, &lo, &bound)) != 0) {
      fprintf(stderr, "chat: QUIC: %s\n", tern_strerror(rc));
      return 1;
    }
    if (quic)
      printf("quic listening on %d\n", bound);
  } else if (quic) {
    fprintf(stderr, "chat: --quic needs --tls-port (its certificates)\n");
    return 2;
  }
  fflush(stdout);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  rc = tern_run(server);
  tern_server_free(server);
  return rc == 0 ? 0 : 1;
}
