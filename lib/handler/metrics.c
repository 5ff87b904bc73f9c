/* The Prometheus text exposition (format 0.0.4) of tern_server_stats.
 *
 * A scrape is rare next to requests: the handler sums the workers'
 * counters through tern_server_stats and formats them into a buffer from
 * the server's allocator, copied into the response.
 */
#include <stdio.h>
#include <string.h>

#include "core/worker.h"

typedef struct {
  tern_server *srv;
  char *p;
  size_t len, cap;
  int failed;
} text_t;

static void grow(text_t *t, size_t need) {
  size_t cap = t->cap ? t->cap : 16384;
  char *np;
  while (cap < t->len + need)
    cap *= 2;
  np = tern__realloc(t->srv, t->p, cap);
  if (np == NULL) {
    t->failed = 1;
    return;
  }
  t->p = np;
  t->cap = cap;
}

static void add(text_t *t, const char *s, size_t n) {
  if (t->failed)
    return;
  if (t->len + n > t->cap)
    grow(t, n);
  if (t->failed)
    return;
  memcpy(t->p + t->len, s, n);
  t->len += n;
}

static void adds(text_t *t, const char *s) {
  add(t, s, strlen(s));
}

static void addu(text_t *t, uint64_t v) {
  char b[24];
  add(t, b, tern__fmt_u64(b, v));
}

/* The HELP and TYPE lines of a family. */
static void family(text_t *t, const char *name, const char *type,
                   const char *help) {
  adds(t, "# HELP ");
  adds(t, name);
  adds(t, " ");
  adds(t, help);
  adds(t, "\n# TYPE ");
  adds(t, name);
  adds(t, " ");
  adds(t, type);
  adds(t, "\n");
}

/* One sample: name{labels} value. `labels` is the inside of the braces,
 * or NULL. */
static void sample(text_t *t, const char *name, const char *labels,
                   uint64_t v) {
  adds(t, name);
  if (labels != NULL) {
    adds(t, "{");
    adds(t, labels);
    adds(t, "}");
  }
  adds(t, " ");
  addu(t, v);
  adds(t, "\n");
}

static const char *const proto_label[TERN_STATS_PROTOCOLS] = {
    "protocol=\"http1\"", "protocol=\"http2\"", "protocol=\"http3\""};

static void per_proto(text_t *t, const char *name, const char *type,
                      const char *help, const uint64_t *v) {
  int p;
  family(t, name, type, help);
  for (p = 0; p < TERN_STATS_PROTOCOLS; p++)
    sample(t, name, proto_label[p], v[p]);
}

/* Seconds from nanoseconds, exactly (no floating point rounding). */
static void add_seconds(text_t *t, uint64_t ns) {
  char b[32];
  int n = snprintf(b, sizeof(b), "%llu.%09llu",
                   (unsigned long long)(ns / 1000000000u),
                   (unsigned long long)(ns % 1000000000u));
  if (n > 0)
    add(t, b, (size_t)n);
}

static void histogram(text_t *t, const tern_stats *st) {
  static const char name[] = "tern_request_duration_seconds";
  int p, i;
  family(t, name, "histogram",
         "Time from a request's head received to its last byte written "
         "(or its abort).");
  for (p = 0; p < TERN_STATS_PROTOCOLS; p++) {
    uint64_t cum = 0;
    for (i = 0; i < TERN_STATS_BUCKETS; i++) {
      uint64_t le = tern_stats_bucket_le((unsigned)i);
      cum += st->duration_buckets[p][i];
      adds(t, name);
      adds(t, "_bucket{");
      adds(t, proto_label[p]);
      adds(t, ",le=\"");
      if (le == UINT64_MAX)
        adds(t, "+Inf");
      else
        add_seconds(t, le);
      adds(t, "\"} ");
      addu(t, cum);
      adds(t, "\n");
    }
    adds(t, name);
    adds(t, "_sum{");
    adds(t, proto_label[p]);
    adds(t, "} ");
    add_seconds(t, st->duration_sum_ns[p]);
    adds(t, "\n");
    adds(t, name);
    adds(t, "_count{");
    adds(t, proto_label[p]);
    adds(t, "} ");
    addu(t, cum);
    adds(t, "\n");
  }
}

static void format_all(text_t *t, const tern_stats *st) {
  static const char *const cls[TERN_STATS_CLASSES] = {"none", "1xx", "2xx",
                                                      "3xx",  "4xx", "5xx"};
  char lab[64];
  int p, k;

  family(t, "tern_requests_total", "counter",
         "Requests finished, by protocol and status class (none: no status "
         "was sent).");
  for (p = 0; p < TERN_STATS_PROTOCOLS; p++)
    for (k = 0; k < TERN_STATS_CLASSES; k++) {
      snprintf(lab, sizeof(lab), "%s,code=\"%s\"", proto_label[p], cls[k]);
      sample(t, "tern_requests_total", lab, st->requests_by_class[p][k]);
    }
  per_proto(t, "tern_requests_aborted_total", "counter",
            "Requests whose response was not completely written.",
            st->requests_aborted);
  histogram(t, st);
  per_proto(t, "tern_request_body_received_bytes_total", "counter",
            "Request body bytes received (WebSocket: the client's bytes).",
            st->request_bytes_in);
  per_proto(t, "tern_response_body_sent_bytes_total", "counter",
            "Response body bytes sent (WebSocket: frames sent).",
            st->request_bytes_out);
  per_proto(t, "tern_open_connections", "gauge",
            "Connections open now, by the protocol they speak.",
            st->open_connections);
  per_proto(t, "tern_open_streams", "gauge",
            "Requests in flight now (HTTP/2 and HTTP/3 streams).",
            st->open_streams);
  family(t, "tern_connections_total", "counter", "Connections accepted.");
  sample(t, "tern_connections_total", NULL, st->connections);
  family(t, "tern_received_bytes_total", "counter",
         "Bytes read from sockets (TCP and UDP).");
  sample(t, "tern_received_bytes_total", NULL, st->bytes_in);
  family(t, "tern_sent_bytes_total", "counter",
         "Bytes written to sockets (TCP and UDP).");
  sample(t, "tern_sent_bytes_total", NULL, st->bytes_out);
  family(t, "tern_tls_handshakes_total", "counter",
         "TLS handshakes, by result (full, resumed, failed).");
  sample(t, "tern_tls_handshakes_total", "result=\"full\"",
         st->tls_handshakes_full);
  sample(t, "tern_tls_handshakes_total", "result=\"resumed\"",
         st->tls_handshakes_resumed);
  sample(t, "tern_tls_handshakes_total", "result=\"failed\"",
         st->tls_handshakes_failed);
  family(t, "tern_websocket_open", "gauge", "WebSocket sessions open now.");
  sample(t, "tern_websocket_open", NULL, st->ws_open);
  family(t, "tern_websocket_messages_total", "counter",
         "WebSocket messages, received (in) and sent (out).");
  sample(t, "tern_websocket_messages_total", "direction=\"in\"",
         st->ws_messages_in);
  sample(t, "tern_websocket_messages_total", "direction=\"out\"",
         st->ws_messages_out);
  family(t, "tern_rejected_total", "counter",
         "Requests or connections tern refused: limit (413, 414, 431), "
         "timeout (408 or a timed-out connection), protocol (400), "
         "ip_connections (past max_connections_per_ip), ip_rate (429).");
  sample(t, "tern_rejected_total", "reason=\"limit\"", st->rejected_limit);
  sample(t, "tern_rejected_total", "reason=\"timeout\"", st->rejected_timeout);
  sample(t, "tern_rejected_total", "reason=\"protocol\"",
         st->rejected_protocol);
  sample(t, "tern_rejected_total", "reason=\"ip_connections\"",
         st->rejected_ip_connections);
  sample(t, "tern_rejected_total", "reason=\"ip_rate\"", st->rejected_ip_rate);
  family(t, "tern_allocations_total", "counter",
         "New blocks from the allocator (not resizes).");
  sample(t, "tern_allocations_total", NULL, st->allocations);
  family(t, "tern_reallocations_total", "counter",
         "Blocks the allocator resized.");
  sample(t, "tern_reallocations_total", NULL, st->reallocations);
  family(t, "tern_allocated_bytes_total", "counter",
         "Bytes asked of the allocator.");
  sample(t, "tern_allocated_bytes_total", NULL, st->bytes_allocated);
  family(t, "tern_frees_total", "counter", "Calls to the allocator's free.");
  sample(t, "tern_frees_total", NULL, st->frees);
  family(t, "tern_access_log_lines_total", "counter",
         "Lines the built-in access log writer queued.");
  sample(t, "tern_access_log_lines_total", NULL, st->access_log_lines);
  family(t, "tern_access_log_dropped_total", "counter",
         "Access log lines dropped because the writer's queue was full.");
  sample(t, "tern_access_log_dropped_total", NULL, st->access_log_dropped);
}

/* Each worker's share: connections taken in (accepted, or handed over by
 * another worker) and open, requests answered and in flight, and its
 * loop's lag (the families' samples labelled worker="N"). */
enum { PER_WORKER = 6 };

static void per_worker(text_t *t) {
  static const struct {
    const char *name, *type, *help;
  } fam[PER_WORKER] = {
      {"tern_worker_connections_total", "counter",
       "Connections a worker took in (accepted, or handed to it)."},
      {"tern_worker_connections_handed_in_total", "counter",
       "Connections another worker accepted and handed to this one "
       "(balance: least connections)."},
      {"tern_worker_open_connections", "gauge",
       "Connections a worker holds open now."},
      {"tern_worker_requests_total", "counter", "Requests a worker answered."},
      {"tern_worker_requests_in_flight", "gauge",
       "Requests a worker has started and not finished."},
      {"tern_worker_loop_lag_seconds", "gauge",
       "The longest a worker's loop was busy between two polls over the "
       "last one to two seconds (milliseconds resolution)."},
  };
  unsigned n = tern_server_workers(t->srv), i, f;
  uint64_t *v = tern__malloc(t->srv, (size_t)n * PER_WORKER * sizeof(*v));
  char label[48];
  if (v == NULL) {
    t->failed = 1;
    return;
  }
  /* Each worker read once: its figures from one snapshot. */
  for (i = 0; i < n; i++) {
    tern_stats st;
    uint64_t *w = v + (size_t)i * PER_WORKER;
    tern_stats_init_size(&st, sizeof(st));
    if (tern_server_worker_stats(t->srv, i, &st) != 0)
      memset(&st, 0, sizeof(st));
    w[0] = st.connections;
    w[1] = st.connections_handed_in;
    w[2] = st.active_connections;
    w[3] = st.requests;
    w[4] = st.open_streams[TERN_STATS_H1] + st.open_streams[TERN_STATS_H2] +
           st.open_streams[TERN_STATS_H3];
    w[5] = st.loop_lag_ns;
  }
  for (f = 0; f < PER_WORKER; f++) {
    family(t, fam[f].name, fam[f].type, fam[f].help);
    for (i = 0; i < n; i++) {
      uint64_t x = v[(size_t)i * PER_WORKER + f];
      /* In process mode each process answers for its own workers. */
      if (t->srv->nprocs > 1)
        snprintf(label, sizeof(label), "process=\"%u\",worker=\"%u\"",
                 t->srv->proc, i);
      else
        snprintf(label, sizeof(label), "worker=\"%u\"", i);
      if (f == PER_WORKER - 1) { /* seconds */
        adds(t, fam[f].name);
        adds(t, "{");
        adds(t, label);
        adds(t, "} ");
        add_seconds(t, x);
        adds(t, "\n");
      } else {
        sample(t, fam[f].name, label, x);
      }
    }
  }
  tern__free(t->srv, v);
}

/* Process mode (tern_server_fork): every worker of every process, from
 * the loads they share, whichever process answers the scrape. */
static void all_processes(text_t *t) {
  static const struct {
    const char *name, *type, *help;
  } fam[2] = {
      {"tern_process_worker_open_connections", "gauge",
       "Connections each worker of each process holds open now."},
      {"tern_process_worker_connections_total", "counter",
       "Connections each worker of each process took in."},
  };
  const tern_server *srv = t->srv;
  char label[48];
  unsigned f, i;
  if (srv->nprocs < 2)
    return;
  for (f = 0; f < 2; f++) {
    family(t, fam[f].name, fam[f].type, fam[f].help);
    for (i = 0; i < srv->nslots; i++) {
      const tern__slot *sl = &srv->slots[i];
      snprintf(label, sizeof(label), "process=\"%u\",worker=\"%u\"",
               i / srv->nworkers, i % srv->nworkers);
      sample(t, fam[f].name, label,
             atomic_load_explicit(f == 0 ? &sl->active : &sl->taken,
                                  memory_order_relaxed));
    }
  }
}

void tern_metrics_handler(tern_request *r, void *user) {
  static const tern_header ct[] = {
      {"content-type", 12, "text/plain; version=0.0.4; charset=utf-8", 40}};
  tern_stats st;
  text_t t;
  (void)user;

  if (r == NULL)
    return;
  memset(&t, 0, sizeof(t));
  t.srv = r->w->srv;
  tern_stats_init_size(&st, sizeof(st));
  if (tern_server_stats(t.srv, &st) != 0) {
    tern_respond(r, 500, NULL, 0, NULL, 0);
    return;
  }
  format_all(&t, &st);
  per_worker(&t);
  all_processes(&t);
  if (t.failed)
    tern_respond(r, 503, NULL, 0, NULL, 0);
  else
    tern_respond(r, 200, ct, 1, t.p, t.len);
  tern__free(t.srv, t.p);
}
