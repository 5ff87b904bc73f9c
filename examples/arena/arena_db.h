/* The arena's /async-db route (arena_db.c) and what it shares with
 * arena.c. */
#ifndef ARENA_DB_H
#define ARENA_DB_H

#include <jansson.h>
#include <stdint.h>

#include "tern.h"

/* The graceful stop's deadline (tern_stop): queries still running then
 * are cut by tern (503; on_gone closes their connections). */
#define ARENA_STOP_MS 5000

/* arena.c: a line on stderr, prefixed "arena: ". */
void arena_log(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* arena.c: query parameter `name` as a decimal integer (sign and leading
 * zeros allowed): 1 with *out set, 0 when absent, -1 when malformed or out
 * of range. */
int arena_query_int(tern_request *r, const char *name, int64_t *out);

/* arena.c: answer 200 application/json with `root` serialized compactly
 * into the worker's own buffer (a malloc only past 64 KiB), or 503 when
 * `root` is NULL (an allocation failed while it was built). Does not take
 * the reference. Returns tern_respond's result. */
int arena_respond_json(tern_request *r, const json_t *root);

/* arena.c: answer the empty result, {"items":[],"count":0}. */
int arena_respond_empty(tern_request *r);

/* Set the database up for `workers` workers: `conninfo` is a libpq
 * connection string or URL (NULL: none, the route answers the empty
 * result), `max_conn` the connections of all workers together, and
 * `explicit_max` whether the command line named it (else each worker
 * opens at most ARENA_DB_PER_WORKER). Logs what it decided. Returns 0, or
 * -1 when out of memory. */
int arena_db_init(unsigned workers, const char *conninfo, unsigned max_conn,
                  int explicit_max);

/* Called from the tern_server_on_workers hooks: the worker's loop starts,
 * and its graceful stop begins (the connections close once the queries in
 * flight are answered). */
void arena_db_worker_start(unsigned worker, void *uv_loop);
void arena_db_worker_stop(unsigned worker, void *uv_loop);

/* GET /async-db?min=&max=&limit= */
void arena_db_handler(tern_request *r, void *user);

/* After tern_run has returned. */
void arena_db_free(void);

#endif
