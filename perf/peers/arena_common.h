/*
 * arena_common.h - what the arena peers (arena_h2o.c, arena_mhd.c,
 * arena_pgblock.c) share: integer and query parsing, the arena's command
 * line and its defaults, process setup (SIGPIPE, the open-file limit, the
 * stop signals), listening sockets, the "listening KIND PORT" and "ready"
 * lines, the /json dataset and its answers (jansson), /baseline11's body,
 * and the content types of /static.
 *
 * Messages on stderr start with the peer's name, as given to arena_args.
 */
#ifndef ARENA_COMMON_H
#define ARENA_COMMON_H

#include <netdb.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

#define ARENA_PORT_OFF (-1)
#define ARENA_MAX_WORKERS 1024
#define ARENA_UPLOAD_MAX (64u << 20) /* /upload: larger bodies get 413 */
#define ARENA_BASELINE_BODY_MAX 1024
/* /async-db's answer when there is no database or it fails. */
#define ARENA_DB_EMPTY "{\"items\":[],\"count\":0}"

/* The listener kinds, in the order of their flags and of the
 * "listening KIND PORT" lines. */
enum { ARENA_H1, ARENA_H1_TLS, ARENA_H2C, ARENA_H2, ARENA_KINDS };
extern const char *const arena_kind_names[ARENA_KINDS];

/* ---- Numbers and query strings ---- */

/* A decimal integer of n bytes: optional sign, digits (leading zeros
 * fine).  0 with *out set, or -1. */
int arena_parse_int(const char *s, size_t n, int64_t *out);

/* The integer query parameter `name` of q (without the '?'): 1 found,
 * 0 absent, -1 malformed.  The first occurrence counts. */
int arena_query_int(const char *q, size_t qlen, const char *name, int64_t *out);

/* a+b from the query q: 0 with *sum set, or -1 (answer 400
 * ARENA_AB_MSG). */
int arena_query_sum(const char *q, size_t qlen, int64_t *sum);
#define ARENA_AB_MSG "a and b are integers\n"

/* Adds /baseline11's body (an integer, white space around it allowed;
 * empty adds nothing) to *sum: 0, or -1 (answer 400 ARENA_BODY_MSG),
 * also when len is over ARENA_BASELINE_BODY_MAX. */
int arena_add_body(const char *body, size_t len, int64_t *sum);
#define ARENA_BODY_MSG "the body is an integer\n"

/* ---- The command line ---- */

/* What a peer does with the flags it does not serve: without
 * ARENA_USES_WORKERS --workers takes any value; without ARENA_USES_DB
 * --database and --db-max-conn take any value and $DATABASE_URL and
 * $DATABASE_MAX_CONN are not read. */
#define ARENA_USES_WORKERS 1u
#define ARENA_USES_DB 2u

struct arena_opts {
  const char *host;       /* --host: 0.0.0.0 */
  int ports[ARENA_KINDS]; /* --port 8080, --tls-port 8081,
                             --h2c-port 8082, --h2-port 8443 */
  const char *cert, *key; /* $TLS_CERT/$TLS_KEY, else /certs/server.* */
  const char *data;       /* --data: /data */
  const char *database;   /* --database, $DATABASE_URL; NULL: none */
  unsigned db_max_conn;   /* --db-max-conn, $DATABASE_MAX_CONN: 256 */
  unsigned workers;       /* --workers: 1 */
};

/* Parses the arena's flags into *o for the peer `name` (uses: the
 * ARENA_USES_ bits).  -1 to go on, or the exit status (0 after --help,
 * 2 after a usage line). */
int arena_args(const char *name, unsigned uses, int argc, char **argv,
               struct arena_opts *o);

/* ---- The process ---- */

/* Ignores SIGPIPE and raises the open-file soft limit to the hard one;
 * the limit then in *rl.  0, or -1 when getrlimit fails. */
int arena_setup(struct rlimit *rl);

/* Blocks SIGINT and SIGTERM in this thread (and the threads it starts
 * from now on), for arena_wait_stop. */
void arena_block_stop(sigset_t *set);
void arena_wait_stop(const sigset_t *set);

/* host:port resolved for a passive socket (numeric only); NULL with a
 * line on stderr.  freeaddrinfo it. */
struct addrinfo *arena_resolve(const char *host, int port);

/* A listening socket on host:port (with SO_REUSEPORT when reuseport);
 * the port it got in *bound.  The fd, or -1 with a line on stderr. */
int arena_listen(const char *host, int port, int reuseport, int *bound);

/* Prints "listening KIND PORT" for each kind whose bound[k] is not
 * ARENA_PORT_OFF, then "ready", and flushes. */
void arena_ready(const int bound[ARENA_KINDS]);

/* ---- /json ---- */

/* Loads DIR/dataset.json; without it (a line on stderr) /json answers
 * 503. */
void arena_load_dataset(const char *dir);
void arena_free_dataset(void);

/* The answer to GET /json/COUNT?m=: count is COUNT's text, m_found what
 * arena_query_int (or alike) said of m.  Its status: 200 with *json the
 * body (application/json, free() it), else *msg the text/plain body. */
int arena_json(const char *count, size_t count_len, int m_found, int64_t m,
               char **json, const char **msg);

/* ---- /static ---- */

struct arena_type {
  const char *ext, *type; /* the extension without its dot */
};
/* The arena's file types (css, js, html, woff2, svg, webp, json); the
 * table ends with {NULL, NULL}. */
extern const struct arena_type arena_types[];

/* The Content-Type of file name by its extension: arena_types, .txt
 * text/plain, else application/octet-stream. */
const char *arena_content_type(const char *name);

#endif
