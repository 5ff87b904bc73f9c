/* The arena's GET /async-db: one PostgreSQL query per request through
 * libpq's asynchronous API, driven by the worker's own libuv loop.
 *
 * Each worker has a small pool of connections of its own, touched only on
 * that worker's thread (no lock): opened lazily, when a request finds
 * every open connection busy (PQconnectStart, then PQconnectPoll each time
 * a uv_poll on PQsocket says the socket is ready), each with the query
 * prepared once (PQsendPrepare), then one PQsendQueryPrepared per request
 * on an idle connection. A request that finds none idle waits in the
 * worker's queue (ARENA_DB_QUEUE requests at most: beyond it, 503) and is
 * taken by the next connection that becomes idle. Nothing blocks the loop
 * and no thread waits: the handler returns at once, and the poll callback
 * answers when the rows arrive.
 *
 * Failures never fail the request: a database that cannot be reached, a
 * query error or a connection lost mid-query answers 200 with the empty
 * result, {"items":[],"count":0}. A broken connection is closed and
 * reopened lazily by a later request; after a connect that failed, none is
 * tried for ARENA_DB_BACKOFF_MS, during which requests that find no
 * connection get the empty result at once.
 *
 * A client that leaves: the request stays valid until it is finished
 * (tern.h, "The client going away"), so tern_request_on_gone tells us and
 * we finish it there. A queued one leaves the queue and is never sent; one
 * whose query is in flight is finished at once (the call returns
 * TERN_ECLOSED and frees it) and its rows, when they come, are read and
 * dropped, the connection staying in the pool. libpq could cancel the
 * query (PQcancel), but only with a blocking connection of its own.
 *
 * Stop: the on_stop hook closes every connection that is not running a
 * query; those that are close once it is answered (the graceful stop waits
 * for the requests in flight), and a request that the stop deadline cuts
 * closes its connection. Every uv_poll is closed before its socket, as
 * libuv requires, and the loop ends with no handle of ours open.
 *
 * Without libpq (ARENA_LIBPQ undefined) the route answers the empty result
 * and arena_db_init says why.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena_db.h"

#define ARENA_DB_PER_WORKER 8    /* connections per worker, unless told */
#define ARENA_DB_QUEUE 4096      /* requests waiting per worker */
#define ARENA_DB_BACKOFF_MS 500  /* after a failed connect */
#define ARENA_DB_CONNECT_MS 5000 /* a connect that takes longer fails */

/* The query's parameters, from the request: defaults 10, 50, 50; limit
 * clamped to 1..50 and the prices to int4's range (the column's type, so
 * that no value makes the query fail). 0, or -1 for a malformed one. */
static int db_params(tern_request *r, int64_t *min, int64_t *max,
                     int64_t *limit) {
  *min = 10;
  *max = 50;
  *limit = 50;
  if (arena_query_int(r, "min", min) < 0 ||
      arena_query_int(r, "max", max) < 0 ||
      arena_query_int(r, "limit", limit) < 0)
    return -1;
  *limit = *limit < 1 ? 1 : *limit > 50 ? 50 : *limit;
  *min = *min < INT_MIN ? INT_MIN : *min > INT_MAX ? INT_MAX : *min;
  *max = *max < INT_MIN ? INT_MIN : *max > INT_MAX ? INT_MAX : *max;
  return 0;
}

static const tern_header db_text[] = {{"content-type", 12, "text/plain", 10}};

static void db_bad_request(tern_request *r) {
  static const char msg[] = "min, max and limit are integers\n";
  tern_respond(r, 400, db_text, 1, msg, sizeof(msg) - 1);
}

#ifdef ARENA_LIBPQ

#include <libpq-fe.h>
#include <uv.h>

static const char arena_sql[] =
    "SELECT id, name, category, price, quantity, active, tags, rating_score, "
    "rating_count FROM items WHERE price BETWEEN $1 AND $2 LIMIT $3";

enum {
  C_DOWN,       /* no connection */
  C_CONNECTING, /* PQconnectPoll until PGRES_POLLING_OK */
  C_PREPARING,  /* PQsendPrepare's result pending */
  C_IDLE,       /* ready for a query */
  C_BUSY        /* a query in flight */
};

typedef struct db_worker db_worker;
typedef struct db_conn db_conn;

typedef struct db_query {
  struct db_query *prev, *next; /* the worker's queue, while queued */
  tern_request *r;              /* NULL once finished (client gone) */
  db_conn *conn;                /* the connection running it, or NULL */
  char min[16], max[16], limit[8];
} db_query;

struct db_conn {
  db_worker *w;
  PGconn *pg;
  uv_poll_t *poll; /* on PQsocket; its own block, freed when closed */
  int fd;
  int events; /* what poll watches */
  int state;
  int answered;     /* the query's request has its answer */
  uint64_t started; /* uv_now when the connect began */
  db_query *q;      /* C_BUSY: the query */
};

struct db_worker {
  unsigned index;
  uv_loop_t *loop;
  db_conn *conns;
  unsigned nconns;
  db_query *head, *tail;
  unsigned queued;
  int stopping;
  uv_timer_t *tick;   /* connect timeouts (unreferenced), from the
                         first connect to the stop */
  uint64_t failed_at; /* uv_now of the last failed connect, 0: none */
  int logged_down;    /* a failure was logged; cleared by a success */
};

static char *db_conninfo;
static db_worker *db_workers;
static unsigned db_nworkers;

/* ---- The queue ---- */

static void queue_push(db_worker *w, db_query *q) {
  q->prev = w->tail;
  q->next = NULL;
  if (w->tail != NULL)
    w->tail->next = q;
  else
    w->head = q;
  w->tail = q;
  w->queued++;
}

static void queue_remove(db_worker *w, db_query *q) {
  if (q->prev != NULL)
    q->prev->next = q->next;
  else
    w->head = q->next;
  if (q->next != NULL)
    q->next->prev = q->prev;
  else
    w->tail = q->prev;
  q->prev = q->next = NULL;
  w->queued--;
}

/* Finish the query's request with the empty result (when it still has
 * one) and free the query. */
static void query_fail(db_query *q) {
  if (q->r != NULL)
    arena_respond_empty(q->r);
  free(q);
}

/* ---- Rows to JSON ---- */

static json_int_t cell_int(const PGresult *res, int row, int col) {
  return PQgetisnull(res, row, col)
             ? 0
             : (json_int_t)strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static json_t *cell_str(const PGresult *res, int row, int col) {
  json_t *s = json_stringn(PQgetvalue(res, row, col),
                           (size_t)PQgetlength(res, row, col));
  return s != NULL ? s : json_string("");
}

/* {"items":[...],"count":N} from the query's rows; NULL when out of
 * memory. tags is JSONB, sent as text: parsed, and an empty array when it
 * does not parse. */
static json_t *rows_json(const PGresult *res) {
  int i, n = PQntuples(res), bad = 0;
  json_t *root = json_object(), *items = json_array();
  /* The array joins the root first, so that the root owns everything. */
  if (json_object_set_new_nocheck(root, "items", items) != 0 ||
      PQnfields(res) != 9) {
    json_decref(root);
    return NULL;
  }
  for (i = 0; i < n && !bad; i++) {
    json_t *o = json_object(), *rating = json_object(), *tags;
    tags = json_loadb(PQgetvalue(res, i, 6), (size_t)PQgetlength(res, i, 6), 0,
                      NULL);
    if (tags == NULL || !json_is_array(tags)) {
      json_decref(tags);
      tags = json_array();
    }
    bad |= o == NULL || rating == NULL || tags == NULL;
    bad |= json_object_set_new_nocheck(rating, "score",
                                       json_integer(cell_int(res, i, 7))) != 0;
    bad |= json_object_set_new_nocheck(rating, "count",
                                       json_integer(cell_int(res, i, 8))) != 0;
    bad |= json_object_set_new_nocheck(o, "id",
                                       json_integer(cell_int(res, i, 0))) != 0;
    bad |= json_object_set_new_nocheck(o, "name", cell_str(res, i, 1)) != 0;
    bad |= json_object_set_new_nocheck(o, "category", cell_str(res, i, 2)) != 0;
    bad |= json_object_set_new_nocheck(o, "price",
                                       json_integer(cell_int(res, i, 3))) != 0;
    bad |= json_object_set_new_nocheck(o, "quantity",
                                       json_integer(cell_int(res, i, 4))) != 0;
    bad |= json_object_set_new_nocheck(
               o, "active", json_boolean(PQgetvalue(res, i, 5)[0] == 't')) != 0;
    bad |= json_object_set_new_nocheck(o, "tags", tags) != 0;
    bad |= json_object_set_new_nocheck(o, "rating", rating) != 0;
    bad |= json_array_append_new(items, o) != 0;
  }
  if (bad || json_object_set_new_nocheck(root, "count", json_integer(n)) != 0) {
    json_decref(root);
    return NULL;
  }
  return root;
}

/* ---- Connections ---- */

static void db_dispatch(db_worker *w);
static void on_poll(uv_poll_t *h, int status, int events);

static void free_handle(uv_handle_t *h) {
  free(h);
}

static void poll_close(db_conn *c) {
  if (c->poll == NULL)
    return;
  uv_poll_stop(c->poll); /* out of epoll before libpq closes the socket */
  c->poll->data = NULL;
  uv_close((uv_handle_t *)c->poll, free_handle);
  c->poll = NULL;
  c->fd = -1;
  c->events = 0;
}

/* Watch the connection's socket for `events`; a new socket (libpq may open
 * another while it connects) gets a new handle. 0, or -1. */
static int poll_watch(db_conn *c, int events) {
  int fd = PQsocket(c->pg);
  if (fd < 0)
    return -1;
  if (c->poll != NULL && c->fd != fd)
    poll_close(c);
  if (c->poll == NULL) {
    c->poll = malloc(sizeof(*c->poll));
    if (c->poll == NULL)
      return -1;
    if (uv_poll_init(c->w->loop, c->poll, fd) != 0) {
      free(c->poll);
      c->poll = NULL;
      return -1;
    }
    c->poll->data = c;
    c->fd = fd;
    c->events = 0;
  }
  if (events != c->events) {
    if (uv_poll_start(c->poll, events, on_poll) != 0)
      return -1;
    c->events = events;
  }
  return 0;
}

/* Close the connection; the query it ran, if any, gets the empty result. */
static void conn_close(db_conn *c) {
  db_query *q = c->q;
  poll_close(c);
  if (c->pg != NULL)
    PQfinish(c->pg);
  c->pg = NULL;
  c->state = C_DOWN;
  c->q = NULL;
  if (q != NULL) {
    q->conn = NULL;
    if (c->answered)
      free(q);
    else
      query_fail(q);
  }
}

static void conn_fail(db_conn *c, const char *what) {
  db_worker *w = c->w;
  if (c->state == C_CONNECTING)
    w->failed_at = uv_now(w->loop) ? uv_now(w->loop) : 1;
  if (!w->logged_down) {
    const char *e = c->pg != NULL ? PQerrorMessage(c->pg) : "";
    size_t n = strlen(e);
    while (n > 0 && (e[n - 1] == '\n' || e[n - 1] == ' '))
      n--;
    char msg[400];
    size_t i;
    if (n >= sizeof(msg))
      n = sizeof(msg) - 1;
    for (i = 0; i < n; i++) /* libpq's messages span lines */
      msg[i] = e[i] == '\n' || e[i] == '\t' ? ' ' : e[i];
    msg[n] = '\0';
    arena_log("worker %u: database: %s%s%s (the empty result until a "
              "connection works again)",
              w->index, what, n ? ": " : "", msg);
    w->logged_down = 1;
  }
  conn_close(c);
}

/* Send what libpq holds back; keep watching for writable while it does. */
static int conn_flush(db_conn *c) {
  int f = PQflush(c->pg);
  if (f < 0)
    return -1;
  return poll_watch(c, UV_READABLE | (f > 0 ? UV_WRITABLE : 0));
}

static void conn_connect_step(db_conn *c) {
  switch (PQconnectPoll(c->pg)) {
  case PGRES_POLLING_READING:
    if (poll_watch(c, UV_READABLE) != 0)
      conn_fail(c, "connect");
    return;
  case PGRES_POLLING_WRITING:
    if (poll_watch(c, UV_WRITABLE) != 0)
      conn_fail(c, "connect");
    return;
  case PGRES_POLLING_OK:
    if (PQsetnonblocking(c->pg, 1) != 0 ||
        !PQsendPrepare(c->pg, "arena", arena_sql, 3, NULL) ||
        conn_flush(c) != 0) {
      conn_fail(c, "prepare");
      return;
    }
    c->state = C_PREPARING;
    return;
  default:
    conn_fail(c, "connect");
  }
}

/* Once a second: fail the connects that take too long (libpq's
 * connect_timeout is for its blocking connects only). */
static void on_tick(uv_timer_t *t) {
  db_worker *w = t->data;
  unsigned i;
  for (i = 0; i < w->nconns; i++)
    if (w->conns[i].state == C_CONNECTING &&
        uv_now(w->loop) - w->conns[i].started >= ARENA_DB_CONNECT_MS)
      conn_fail(&w->conns[i], "connect timed out");
  db_dispatch(w);
}

/* libpq prints notices (and a server's FATAL on an idle connection) on
 * stderr by default; the failure they lead to is logged once instead. */
static void quiet_notice(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static int conn_start(db_conn *c) {
  db_worker *w = c->w;
  if (w->tick == NULL && (w->tick = malloc(sizeof(*w->tick))) != NULL) {
    if (uv_timer_init(w->loop, w->tick) != 0) {
      free(w->tick);
      w->tick = NULL;
    } else {
      w->tick->data = w;
      uv_timer_start(w->tick, on_tick, 1000, 1000);
      uv_unref((uv_handle_t *)w->tick); /* never keeps the loop alive */
    }
  }
  c->started = uv_now(w->loop);
  c->pg = PQconnectStart(db_conninfo);
  c->state = C_CONNECTING;
  if (c->pg == NULL || PQstatus(c->pg) == CONNECTION_BAD) {
    conn_fail(c, "connect");
    return -1;
  }
  PQsetNoticeProcessor(c->pg, quiet_notice, NULL);
  /* Before the first PQconnectPoll, wait as if it had said "writing" (the
   * connect may still be in progress). */
  if (poll_watch(c, UV_WRITABLE) != 0) {
    conn_fail(c, "connect");
    return -1;
  }
  return 0;
}

static void conn_send(db_conn *c, db_query *q) {
  const char *params[3] = {q->min, q->max, q->limit};
  c->q = q;
  c->answered = 0;
  q->conn = c;
  c->state = C_BUSY;
  if (!PQsendQueryPrepared(c->pg, "arena", 3, params, NULL, NULL, 0) ||
      conn_flush(c) != 0)
    conn_fail(c, "query");
}

/* One result of the connection's command. */
static void conn_result(db_conn *c, PGresult *res) {
  ExecStatusType st = PQresultStatus(res);
  if (c->state == C_PREPARING) {
    if (st != PGRES_COMMAND_OK) {
      arena_log("worker %u: database: prepare: %s", c->w->index,
                PQresultErrorMessage(res));
      c->answered = -1; /* close it once the command is over */
    }
    return;
  }
  if (c->q == NULL || c->answered)
    return;
  c->answered = 1;
  if (c->q->r == NULL)
    return; /* the client left: the rows are dropped */
  if (st == PGRES_TUPLES_OK) {
    json_t *root = rows_json(res);
    arena_respond_json(c->q->r, root);
    json_decref(root);
  } else {
    arena_respond_empty(c->q->r);
  }
  c->q->r = NULL;
}

/* The command is over (PQgetResult gave NULL): back to idle. */
static void conn_done(db_conn *c) {
  if (c->state == C_PREPARING && c->answered < 0) {
    conn_close(c);
    return;
  }
  if (c->q != NULL) {
    db_query *q = c->q;
    c->q = NULL;
    q->conn = NULL;
    if (q->r != NULL)
      arena_respond_empty(q->r); /* no rows came: an empty answer */
    free(q);
  }
  c->state = C_IDLE;
  c->answered = 0;
  c->w->logged_down = 0;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  db_conn *c = h->data;
  if (c == NULL)
    return; /* closing */
  if (status < 0) {
    /* libuv reports an error on the socket (POLLERR) as UV_EBADF. */
    conn_fail(c, status == UV_EBADF ? "socket error" : uv_strerror(status));
    db_dispatch(c->w);
    return;
  }
  if (c->state == C_CONNECTING) {
    conn_connect_step(c);
    db_dispatch(c->w);
    return;
  }
  if ((events & UV_READABLE) && !PQconsumeInput(c->pg)) {
    conn_fail(c, "read");
    db_dispatch(c->w);
    return;
  }
  if (conn_flush(c) != 0) {
    conn_fail(c, "write");
    db_dispatch(c->w);
    return;
  }
  while (c->pg != NULL && !PQisBusy(c->pg)) {
    PGresult *res = PQgetResult(c->pg);
    if (res == NULL) {
      conn_done(c);
      break;
    }
    conn_result(c, res);
    PQclear(res);
  }
  if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_BAD)
    conn_fail(c, "connection lost");
  db_dispatch(c->w);
}

/* Hand queued queries to idle connections, open connections for those
 * left (lazily: no more than are waiting), and answer them empty when no
 * connection can take them. During the stop, close the idle ones once
 * nothing waits. */
static void db_dispatch(db_worker *w) {
  unsigned i, connecting = 0, live = 0;
  for (i = 0; i < w->nconns && w->head != NULL; i++) {
    db_conn *c = &w->conns[i];
    if (c->state == C_IDLE) {
      db_query *q = w->head;
      queue_remove(w, q);
      conn_send(c, q);
    }
  }
  for (i = 0; i < w->nconns; i++) {
    int s = w->conns[i].state;
    if (w->stopping && w->head == NULL && s == C_IDLE)
      conn_close(&w->conns[i]);
    else if (s == C_CONNECTING || s == C_PREPARING)
      connecting++;
  }
  if (w->head != NULL && !w->stopping &&
      (w->failed_at == 0 ||
       uv_now(w->loop) - w->failed_at >= ARENA_DB_BACKOFF_MS)) {
    for (i = 0; i < w->nconns && w->queued > connecting; i++)
      if (w->conns[i].state == C_DOWN) {
        if (conn_start(&w->conns[i]) != 0)
          break; /* down: back off */
        connecting++;
        w->failed_at = 0;
      }
  }
  for (i = 0; i < w->nconns; i++)
    live += w->conns[i].state != C_DOWN;
  while (w->head != NULL && live == 0) {
    db_query *q = w->head;
    queue_remove(w, q);
    query_fail(q);
  }
}

static void on_gone(tern_request *r, void *user) {
  db_query *q = user;
  db_worker *w = &db_workers[tern_request_worker(r)];
  arena_respond_empty(r); /* TERN_ECLOSED: finished, nothing sent */
  q->r = NULL;
  if (q->conn == NULL) {
    queue_remove(w, q);
    free(q);
  } else if (w->stopping) {
    conn_close(q->conn); /* the stop deadline: nobody waits for it */
    db_dispatch(w);
  }
}

void arena_db_handler(tern_request *r, void *user) {
  int64_t min, max, limit;
  db_worker *w;
  db_query *q;
  int rc;
  (void)user;
  if (db_params(r, &min, &max, &limit) != 0) {
    db_bad_request(r);
    return;
  }
  w = db_workers != NULL ? &db_workers[tern_request_worker(r)] : NULL;
  if (w == NULL || w->loop == NULL || w->nconns == 0) {
    arena_respond_empty(r);
    return;
  }
  if (w->queued >= ARENA_DB_QUEUE) {
    static const char msg[] = "too many queries waiting\n";
    tern_respond(r, 503, db_text, 1, msg, sizeof(msg) - 1);
    return;
  }
  q = calloc(1, sizeof(*q));
  if (q == NULL) {
    tern_respond(r, 503, NULL, 0, NULL, 0);
    return;
  }
  q->r = r;
  snprintf(q->min, sizeof(q->min), "%lld", (long long)min);
  snprintf(q->max, sizeof(q->max), "%lld", (long long)max);
  snprintf(q->limit, sizeof(q->limit), "%lld", (long long)limit);
  rc = tern_request_on_gone(r, on_gone, q);
  if (rc != 0) { /* TERN_ECLOSED: the client is gone already */
    q->r = NULL;
    free(q);
    arena_respond_empty(r);
    return;
  }
  queue_push(w, q);
  db_dispatch(w);
}

void arena_db_worker_start(unsigned worker, void *uv_loop) {
  if (db_workers != NULL && worker < db_nworkers)
    db_workers[worker].loop = uv_loop;
}

void arena_db_worker_stop(unsigned worker, void *uv_loop) {
  db_worker *w;
  unsigned i;
  (void)uv_loop;
  if (db_workers == NULL || worker >= db_nworkers)
    return;
  w = &db_workers[worker];
  w->stopping = 1;
  if (w->tick != NULL) {
    uv_close((uv_handle_t *)w->tick, free_handle);
    w->tick = NULL;
  }
  for (i = 0; i < w->nconns; i++)
    if (w->conns[i].state != C_BUSY)
      conn_close(&w->conns[i]);
  /* A busy one closes when its query is answered, or at the stop
   * deadline, which tern reports to on_gone as the client gone. */
  db_dispatch(w);
}

int arena_db_init(unsigned workers, const char *conninfo, unsigned max_conn,
                  int explicit_max) {
  unsigned i, per, extra;
  if (conninfo == NULL || conninfo[0] == '\0') {
    arena_log("no database (--database or DATABASE_URL): /async-db answers "
              "the empty result");
    return 0;
  }
  if (workers == 0 || max_conn == 0)
    return 0;
  db_conninfo = strdup(conninfo);
  db_workers = calloc(workers, sizeof(*db_workers));
  if (db_conninfo == NULL || db_workers == NULL)
    return -1;
  db_nworkers = workers;
  per = max_conn / workers;
  extra = max_conn % workers;
  if (!explicit_max && per >= ARENA_DB_PER_WORKER) {
    per = ARENA_DB_PER_WORKER;
    extra = 0;
  }
  if (per == 0)
    arena_log("--db-max-conn %u is below the %u workers: each opens one",
              max_conn, workers);
  for (i = 0; i < workers; i++) {
    db_worker *w = &db_workers[i];
    unsigned n = per + (i < extra ? 1 : 0), k;
    w->index = i;
    w->nconns = n ? n : 1;
    w->conns = calloc(w->nconns, sizeof(*w->conns));
    if (w->conns == NULL)
      return -1;
    for (k = 0; k < w->nconns; k++) {
      w->conns[k].w = w;
      w->conns[k].fd = -1;
    }
  }
  for (i = 0, per = 0; i < workers; i++)
    per += db_workers[i].nconns;
  arena_log("database: up to %u connections per worker, %u in all, opened "
            "when needed",
            db_workers[0].nconns, per);
  return 0;
}

void arena_db_free(void) {
  unsigned i, k;
  for (i = 0; db_workers != NULL && i < db_nworkers; i++) {
    db_worker *w = &db_workers[i];
    for (k = 0; w->conns != NULL && k < w->nconns; k++)
      if (w->conns[k].pg != NULL)
        PQfinish(w->conns[k].pg); /* a stop cut short: its loop is gone */
    free(w->conns);
  }
  free(db_workers);
  free(db_conninfo);
  db_workers = NULL;
  db_conninfo = NULL;
}

#else /* no libpq */

int arena_db_init(unsigned workers, const char *conninfo, unsigned max_conn,
                  int explicit_max) {
  (void)workers;
  (void)max_conn;
  (void)explicit_max;
  arena_log("built without libpq: /async-db answers the empty result%s",
            conninfo != NULL ? " (--database is ignored)" : "");
  return 0;
}

void arena_db_worker_start(unsigned worker, void *uv_loop) {
  (void)worker;
  (void)uv_loop;
}

void arena_db_worker_stop(unsigned worker, void *uv_loop) {
  (void)worker;
  (void)uv_loop;
}

void arena_db_handler(tern_request *r, void *user) {
  int64_t min, max, limit;
  (void)user;
  if (db_params(r, &min, &max, &limit) != 0)
    db_bad_request(r);
  else
    arena_respond_empty(r);
}

void arena_db_free(void) {}

#endif
