/* tern: an embeddable HTTP server library.
 *
 * This header is the API reference. Conventions that hold for every
 * function below unless its comment says otherwise:
 *
 * - Errors are negative int codes (TERN_E*); tern_strerror() names them.
 *   Zero means success. Out of memory is TERN_ENOMEM, never an abort.
 * - A function that takes a callback and returns an error never calls that
 *   callback.
 * - On failure an out-parameter is left untouched.
 * - Strings are passed as pointer + length and need not be NUL-terminated,
 *   except where a parameter is documented as a C string.
 * - Every callback receives the `void *user` pointer given with it.
 * - Objects are opaque and created by *_new, destroyed by *_free.
 *
 * Threads: a server runs `workers` event loops, one per thread. Request
 * handlers run on the worker that owns the connection. The response
 * functions (tern_respond* and tern_response_*) may be called from any
 * thread; calls from a thread other than the owning worker are posted to
 * it. Configuration functions (settings, routes, listen) are called before
 * tern_run() or tern_attach(), from one thread.
 *
 * ABI: the shared library's soname carries TERN_VERSION_MAJOR. Under one
 * soname functions are only added (a call whose signature changes keeps
 * its old form under its old symbol version, docs/api.md), and the
 * structs a caller lays out (tern_settings, the options structs and the
 * output struct tern_stats) only grow at their end. Each begins with `version`
 * and `size`, which its _init function sets to the header's
 * TERN_*_VERSION and sizeof (each _init is inline below, so that the
 * library writes no more than this header's sizeof: see
 * TERN__INIT_BY_SIZE). The rule: every field added bumps the
 * struct's version, and each version ends with a known field (listed
 * beside each struct), so that a program built against an older header
 * keeps working with a newer library. The library starts from its own
 * defaults and reads only the fields of the caller's version: a field the
 * caller's header did not have keeps its default. It refuses (TERN_EINVAL,
 * with a log line) a version below 1 or above its own, and a size smaller
 * than the caller's version's layout (a struct not filled by its _init).
 * An output struct is written only up to the end of the caller's version.
 * A struct nested by value is part of its container's layout and can
 * never grow, so nested structs go by pointer; the one exception is
 * tern_settings' allocator, which is version 1's and stays. tern_header
 * (passed in arrays) never changes; tern_error_info is laid out by the
 * library and only read.
 *
 * Contents, in the order of the sections below:
 *   (first, unheaded) tern_version, tern_version_number, the _init rule
 *   Errors            TERN_E* codes, tern_strerror
 *   Settings          tern_settings, tern_settings_init
 *   Server lifecycle  tern_server_new, tern_server_fork, tern_run,
 *                     tern_attach, tern_stop, tern_server_free
 *   TLS               tern_tls_new, tern_tls_add_cert_*, tern_tls_commit,
 *                     engines, ticket keys, minimum version
 *   HTTP/3 over QUIC  tern_quic_options
 *   Listening         tern_listen (the one-liner), tern_listen_with and
 *                     tern_listen_options (host and port, path or fd; TLS,
 *                     PROXY protocol, QUIC), tern_listen_fds_from_env,
 *                     tern_server_set_alt_svc
 *   Routing           tern_route, tern_route_with, route options and
 *                     response compression, the default handler
 *   The request       method, target, path, query, fields (TERN_HEADER),
 *                     TLS (tern_request_tls), peer, body; query strings
 *                     and forms (tern_form_next, _decode, _get); cookies
 *                     (tern_request_cookie, tern_cookie_next, _format);
 *                     Basic authentication (tern_request_basic_auth,
 *                     tern_equal_secret); multipart bodies
 *                     (tern_multipart_new, _next);
 *                     streaming bodies (tern_request_read/pause/resume);
 *                     the client going away (tern_request_on_gone); the
 *                     worker's loop (tern_worker_call, tern_request_loop)
 *   Answers tern makes itself  tern_server_on_error, tern_error_respond
 *   The response hook tern_server_on_response, tern_response_head_add, _get
 *   Responses         tern_respond, tern_respond_ref, tern_response_start,
 *                     _write, _write_ref, _end, tern_respond_interim;
 *                     holding a request (tern_request_ref, _unref)
 *   Serving files     tern_static_new, tern_static_handler,
 *                     tern_static_mount
 *   Server-Sent Events tern_sse_start, _send, _close, hubs: tern_sse_publish
 *   WebSocket         tern_ws_accept, tern_ws_send, _fragment, _ping,
 *                     _close, _broadcast, flow control, per-socket data
 *   Statistics        tern_stats, tern_server_stats, tern_metrics_handler
 *   Access log        tern_server_access_log, _reopen, tern_server_on_access
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TERN_BUILDING) && defined(__GNUC__)
#define TERN_EXTERN __attribute__((visibility("default")))
#else
#define TERN_EXTERN
#endif

#define TERN_VERSION_MAJOR 0
#define TERN_VERSION_MINOR 2
#define TERN_VERSION_PATCH 0

/* The library's version as "MAJOR.MINOR.PATCH" (a static C string). */
TERN_EXTERN const char *tern_version(void);

/* The same as a number, MAJOR * 10000 + MINOR * 100 + PATCH (0.2.0 is
 * 200), to compare with TERN_VERSION_NUMBER, the header's. A program may
 * require at least the version its header names: a library older than
 * the header refuses structs of versions it does not know. */
#define TERN_VERSION_NUMBER                                                    \
  (TERN_VERSION_MAJOR * 10000 + TERN_VERSION_MINOR * 100 + TERN_VERSION_PATCH)
TERN_EXTERN unsigned tern_version_number(void);

/* Each versioned struct's _init (tern_settings_init, ...) is an inline
 * function here that passes the struct's size, as this header lays it
 * out, to the library's X_init_size(o, size): the library writes the
 * newest version that fits in `size` and nothing past it, so a program
 * built against an older header never has a newer library write past its
 * struct (FFI callers: call X_init_size with the size of the struct they
 * lay out). The library also exports X_init itself, for programs built
 * against headers that declared it as a function: it writes version 1's
 * fields only, the one layout every such program has. */
#ifdef TERN__LEGACY_INIT /* lib/core/abi_legacy.c, which defines them */
#define TERN__INIT_BY_SIZE(type, name) TERN_EXTERN void name(type *o);
#else
#define TERN__INIT_BY_SIZE(type, name)                                         \
  static inline void name(type *o) {                                           \
    name##_size(o, sizeof(*o));                                                \
  }
#endif

/* ---------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------ */

enum {
  TERN_OK = 0,
  TERN_EINVAL = -1,      /* an argument is invalid */
  TERN_ENOMEM = -2,      /* an allocation failed */
  TERN_ESTATE = -3,      /* not allowed in the object's current state */
  TERN_EEXIST = -4,      /* already exists (duplicate route) */
  TERN_EADDRINUSE = -5,  /* address already in use */
  TERN_EADDR = -6,       /* address cannot be parsed or bound */
  TERN_ECLOSED = -7,     /* the peer went away; the request is finished */
  TERN_EIO = -8,         /* a system call failed (see the log) */
  TERN_ETOOBIG = -9,     /* a limit was exceeded */
  TERN_ENOTFOUND = -10,  /* no such item (header, parameter) */
  TERN_ETLS = -11,       /* a TLS certificate, key or handshake problem */
  TERN_EHANDSHAKE = -12, /* not a valid WebSocket handshake (answered) */
  TERN_ENOTSUP = -13,    /* not built into this library */
};

/* A static, human-readable message for an error code; never NULL. */
TERN_EXTERN const char *tern_strerror(int err);

/* ---------------------------------------------------------------------
 * Settings
 * ------------------------------------------------------------------ */

/* Allocator hook. All memory tern allocates goes through these three
 * functions (realloc(NULL, n) must behave as malloc; free(NULL) is a
 * no-op). They may be called from any worker thread at once. */
typedef struct {
  void *(*malloc)(size_t size, void *user);
  void *(*realloc)(void *ptr, size_t size, void *user);
  void (*free)(void *ptr, void *user);
  void *user;
} tern_allocator;

enum {
  TERN_LOG_ERROR = 0,
  TERN_LOG_WARN = 1,
  TERN_LOG_INFO = 2,
  TERN_LOG_DEBUG = 3,
};

/* Log callback: `msg` is `len` bytes, valid only during the call, without
 * a trailing newline. Called from any thread that tern runs on. */
typedef void (*tern_log_fn)(int level, const char *msg, size_t len, void *user);

#define TERN_SETTINGS_VERSION 5

/* Server settings. Initialise with tern_settings_init(), change what you
 * need, pass to tern_server_new(). Every limit has a safe default.
 * Versions (see ABI above), each ending with the field named: 1 with
 * log_level, 2 with max_conn_window, 3 with max_compressors_per_conn, 4
 * with ip_table_size, 5 with balance. */
typedef struct {
  int version;               /* TERN_SETTINGS_VERSION */
  uint32_t size;             /* sizeof(tern_settings) */
  unsigned workers;          /* worker threads; 0 = CPU count */
  uint32_t max_head_size;    /* request head bytes (16384): 431 */
  uint32_t max_header_count; /* header fields (100): 431 */
  uint32_t max_uri_length;   /* request-target bytes (8192): 414 */
  uint64_t max_body_size;    /* collected body bytes (8 MiB): 413 */
  uint32_t head_timeout_ms;  /* a whole head must arrive (10000) */
  uint32_t idle_timeout_ms;  /* keep-alive idle (60000) */
  uint32_t body_timeout_ms;  /* between body reads (30000) */
  uint32_t max_connections;  /* per worker; beyond: closed (10000);
                              lowered to fit RLIMIT_NOFILE, whose soft
                              limit tern_run raises to the hard one */
  uint32_t max_pipeline;     /* requests in flight per conn (32) */
  int tcp_nodelay;           /* 1 = TCP_NODELAY, set before a connection's
                                second write (default 1) */
  uint32_t read_buffer_size; /* per connection while busy (16384) */
  tern_allocator allocator;  /* malloc/realloc/free by default (nested by
                                value: version 1's, it never grows) */
  tern_log_fn log;           /* NULL: errors and warnings to stderr */
  void *log_user;
  int log_level; /* most verbose level passed (WARN) */
  /* Version 2. The largest receive windows HTTP/2 and HTTP/3 grow to
   * (bytes; 0 = the defaults, 8 MiB and 16 MiB, 16 KiB to 1 GiB): per
   * stream, what one request's upload may have in flight (and wait in
   * tern, when its handler has paused), and per connection, the same for
   * all of a connection's streams together. Windows start small (64 KiB
   * per stream, 1 MiB per connection) and double while the handler keeps
   * up; a maximum below the starting size lowers the start to it, so a
   * maximum equal to it pins the window there. HTTP/2 cannot announce a
   * connection window below 65535 (RFC 9113 6.9.2): a smaller
   * max_conn_window keeps it at 65535. */
  uint32_t max_stream_window;
  uint32_t max_conn_window;
  /* Version 3. Streamed responses compressed at once (routes with
   * tern_compress_options; each holds its compressor, up to about 2 MiB
   * with the default windows, until it ends): at most max_compressors in
   * the whole server (0 = 64) and max_compressors_per_conn on one
   * connection (0 = 4), 1 to 65536. A response past either goes out
   * uncompressed (identity), never refused. A whole body (tern_respond)
   * is compressed within the call and counts only during it. */
  uint32_t max_compressors;
  uint32_t max_compressors_per_conn;
  /* Version 4. Limits per client address, over every worker and listener
   * (QUIC included), an IPv4 address or an IPv6 /64 (behind a trusted
   * PROXY balancer: the address it names); 0 = none, the default.
   * Beyond max_connections_per_ip open connections a new one is closed
   * at accept (QUIC: refused). Beyond requests_per_ip_per_s a request is
   * answered 429 with Retry-After, as tern's own answer (the error hook
   * sees it), and its connection kept; the rate is a token bucket that
   * holds request_burst requests (0: one second's worth), 1 to 1000000.
   * At most ip_table_size addresses are tracked (0: 65536; up to 2^24,
   * about 48 bytes each, allocated at tern_server_new): under a flood of
   * addresses the one seen longest ago without an open connection is
   * forgotten, and an address that finds no room is let in uncounted,
   * so memory stays bounded whatever the number of addresses. */
  uint32_t max_connections_per_ip;
  uint32_t requests_per_ip_per_s;
  uint32_t request_burst;
  uint32_t ip_table_size;
  /* Version 5. How new TCP connections (and Unix ones) spread over the
   * workers, TERN_BALANCE_* (0: tern's default, least connections);
   * docs/operations.md has the measurements behind the default. */
  int balance;
} tern_settings;

/* tern_settings.balance. The workers share each listening socket.
 * KERNEL: whichever worker the kernel wakes accepts the connection and
 * keeps it (a busy worker keeps winning under epoll's wake-up order, and
 * keep-alive connections stay where they landed). LEAST_CONNECTIONS: the
 * worker that accepts hands the connection on, through the other
 * worker's inbox, to the worker with the fewest open connections (those
 * on their way to it counted) when that one has fewer than itself. A
 * worker held up by a handler that blocks its loop accepts nothing; once
 * a connection handed to it has waited 10 ms it is handed no more until
 * it runs again (the acceptor keeps them), so at most a connection or two
 * wait out the stall. REUSEPORT: each worker listens on a socket of its own,
 * the sockets one SO_REUSEPORT group, and the kernel picks one by a hash
 * of the client's address and port (even over many connections, blind to
 * load, nothing handed over). The group is kept to tern's sockets: a port
 * anyone holds is refused (TERN_EADDRINUSE) as with a shared socket, and
 * a socket of the same user that joins the group later gets no
 * connection (a BPF program picks among tern's); Unix sockets and
 * sockets handed over (fd) stay shared. QUIC's packets are spread by the
 * kernel's hash over the workers' sockets (docs/operations.md). */
enum {
  TERN_BALANCE_KERNEL = 1,
  TERN_BALANCE_LEAST_CONNECTIONS = 2,
  TERN_BALANCE_REUSEPORT = 3
};

/* Fill `s` with the defaults above, its version and its size. */
TERN_EXTERN void tern_settings_init_size(tern_settings *s, size_t size);
TERN__INIT_BY_SIZE(tern_settings, tern_settings_init)

/* ---------------------------------------------------------------------
 * Server lifecycle
 * ------------------------------------------------------------------ */

typedef struct tern_server tern_server;
typedef struct tern_request tern_request;
typedef struct tern_ws tern_ws; /* see WebSocket below */

/* Create a server. `settings` may be NULL for the defaults; it is copied.
 * Every field is checked: TERN_EINVAL, with a log line (through the
 * settings' log callback, or stderr) naming the field, for a version or
 * size refused by the ABI rule (see the top) or a field outside its
 * range: max_head_size 64 to 16 MiB, max_header_count 1 to 65535,
 * max_uri_length 1 to 16 MiB, max_body_size at least 1, every timeout at
 * least 1 ms, max_connections 1 to 2^24, max_pipeline 1 to 1024,
 * read_buffer_size 1 KiB to 16 MiB, workers at most 1024, tcp_nodelay 0
 * or 1, log_level TERN_LOG_ERROR to TERN_LOG_DEBUG, an allocator with
 * all three functions, and max_stream_window and max_conn_window 0 or
 * 16 KiB to 1 GiB. */
TERN_EXTERN int tern_server_new(const tern_settings *s, tern_server **out);

/* Free a server that is not running (never ran, or tern_run() returned, or
 * after tern_attach() its loop closed every handle). NULL is a no-op. */
TERN_EXTERN void tern_server_free(tern_server *srv);

/* Listen on `host` (a C string: an IPv4 or IPv6 literal, "localhost", or
 * NULL for every IPv6 and IPv4 address) and `port` (0: the kernel picks a
 * free port). One listening socket serves the address, shared by every
 * worker; it does not set SO_REUSEPORT, so no other socket or process can
 * bind the port while tern serves it (TERN_EADDRINUSE). On success the
 * bound port is stored in *bound_port if it is not NULL. May be called
 * several times for several addresses. Errors: TERN_EADDR,
 * TERN_EADDRINUSE, TERN_ESTATE (server already running), TERN_ENOMEM. */
TERN_EXTERN int tern_listen(tern_server *srv, const char *host, int port,
                            int *bound_port);

/* Process mode: serve from `processes` processes (1 to 1024), each with
 * the server's `workers` threads, sharing its listeners. Call once, after
 * the listeners (tern_listen, tern_listen_with) and before tern_run, in a
 * process that has started no threads of its own, with stdio flushed: it
 * forks processes - 1 children and returns in each process, *index 0 in
 * the caller and 1 .. processes - 1 in the children (`pids`, when not
 * NULL, gets the children's process ids in the caller: processes - 1 of
 * them). Each process then calls tern_run on its copy of the server, and
 * stops on its own (tern_stop from its signal handler): the caller passes
 * signals on to its children and reaps them (waitpid). The balance
 * setting holds across the processes: with least connections (the
 * default) a worker hands a connection it accepted to the least loaded
 * worker of any process, over a socket pair, and the loads are in shared
 * memory; with the kernel's choice every worker of every process accepts
 * from the shared socket. tern_server_worker_stats and /metrics are each
 * process's own. Errors: TERN_EINVAL, TERN_ESTATE (running, forked
 * already, no listener yet, or the access log configured: its writer
 * thread would not be in the children, so configure it after), TERN_ENOTSUP
 * (a QUIC listener, whose connections are routed within one process; the
 * REUSEPORT balance, whose sockets are one process's), TERN_ENOMEM,
 * TERN_EIO (fork or socketpair failed; children made are killed). With
 * `processes` 1 it does nothing and sets *index 0. */
TERN_EXTERN int tern_server_fork(tern_server *srv, unsigned processes,
                                 unsigned *index, int *pids);

/* Run the server: start the worker threads and block until the server has
 * stopped (tern_stop). Returns 0, or an error if the threads or loops could
 * not be started (then nothing is running). If SIGPIPE has its default
 * action, tern_run and tern_attach set it to be ignored, so that a client
 * resetting its connection cannot kill the process. Worker 0 runs on the
 * calling thread. After tern_stop it returns once every request is
 * finished, or at the stop deadline, whichever comes first (see
 * tern_stop). */
TERN_EXTERN int tern_run(tern_server *srv);

/* Attach the server to the caller's libuv loop (a `uv_loop_t *`, passed as
 * void * so that this header needs no libuv) instead of starting threads:
 * one worker, on that loop. Call it from the thread that runs the loop.
 * Returns at once; the caller runs its loop. After tern_stop() the server
 * closes its handles and the loop may return once the caller's own handles
 * are closed too; then tern_server_free(). On failure (TERN_ENOMEM,
 * TERN_EIO, TERN_ESTATE, TERN_EINVAL for a server of several workers)
 * nothing stays on the loop: closing what was opened may run the loop's
 * closing phase once before this returns. */
TERN_EXTERN int tern_attach(tern_server *srv, void *uv_loop);

/* Stop gracefully: stop accepting, let requests in flight finish, close
 * idle connections. After `deadline_ms` milliseconds the stop is a hard
 * one: calls from other threads are no longer taken (they return
 * TERN_ECLOSED), every request a handler still holds without having
 * started its response is answered 503, every connection still open is
 * closed (a started response is cut off: the client sees the close or a
 * stream reset), a warning is logged per worker with the connections
 * closed and why each was still open (output its client was not reading,
 * a request body that stopped coming, requests in flight) and the number
 * of requests cut, and tern_run() returns, even while handlers (blocking ones
 * included) still hold requests. Such a cut request stays valid for its holder,
 * the strings its accessors returned included: tern_response_start/write return
 * TERN_ECLOSED, and the finishing call returns TERN_ECLOSED and frees it, also
 * after tern_server_free() (which then leaves the server's own block to the
 * last such call). A request that is never finished keeps its memory (its head,
 * body and a few KiB) and the server's allocated for good.
 *
 * Callable from any thread and from a signal handler (it only sets flags
 * and wakes the loops). A stop is never lost: called before tern_run() or
 * tern_attach(), or while they are still starting, it is remembered and
 * carried out as soon as the server runs (tern_run then returns after the
 * graceful stop). Called again before the stop began, the shorter
 * deadline counts; once stopping, another call changes nothing. Returns
 * 0, or TERN_ESTATE once the server has stopped (tern_run returned). */
TERN_EXTERN int tern_stop(tern_server *srv, uint32_t deadline_ms);

/* ---------------------------------------------------------------------
 * TLS (HTTP/1.1 over TLS; ALPN offers h2 where HTTP/2 is built)
 *
 * A tern_tls is a set of certificates for one or more TLS listeners. Add
 * certificate/key pairs, then commit them: the committed set serves new
 * handshakes. Committing again later (after adding a fresh set of pairs)
 * replaces the certificates at run time: new handshakes use the new set,
 * live connections keep theirs and are never dropped. With several pairs,
 * SNI picks the first certificate whose subjectAltName (or subject CN)
 * names the requested host ("*.example.com" wildcards match one label);
 * without SNI, or with no match, the first pair whose key suits the
 * client's cipher suites serves. ECDHE (X25519, P-256, P-384) with AES-GCM
 * or ChaCha20-Poly1305, ECDSA or RSA keys, session tickets on.
 *
 * Two TLS engines may be built in: GnuTLS (TLS 1.3 and 1.2, and the
 * faster one) and mbedTLS (TLS 1.2 only, small). A tern_tls uses GnuTLS
 * when the library has it, unless tern_tls_set_engine says otherwise;
 * both pick certificates by the same rules.
 *
 * Every bad certificate, bad key, mismatched pair or unreadable file is
 * found when it is added: TERN_ETLS, with a log line naming the file and
 * the reason. The add and commit calls of one tern_tls must not run
 * concurrently with each other; they may run while the server runs.
 * ------------------------------------------------------------------ */

typedef struct tern_tls tern_tls;

/* Create an empty certificate set owned by the server (freed with it).
 * Errors: TERN_EINVAL, TERN_ENOMEM, TERN_ETLS (no entropy source). */
TERN_EXTERN int tern_tls_new(tern_server *srv, tern_tls **out);

/* Add a PEM certificate chain and its private key from files (C strings:
 * paths). The pair joins the set at the next tern_tls_commit(). */
TERN_EXTERN int tern_tls_add_cert_file(tern_tls *tls, const char *cert_file,
                                       const char *key_file);

/* The same from memory: PEM text, `*_len` bytes, copied. */
TERN_EXTERN int tern_tls_add_cert_mem(tern_tls *tls, const char *cert_pem,
                                      size_t cert_len, const char *key_pem,
                                      size_t key_len);

/* Make the pairs added since the last commit the live set. Errors:
 * TERN_ESTATE (nothing added), TERN_ETLS, TERN_ENOMEM. */
TERN_EXTERN int tern_tls_commit(tern_tls *tls);

enum {
  TERN_TLS_ENGINE_AUTO = 0,    /* GnuTLS where built, else mbedTLS */
  TERN_TLS_ENGINE_MBEDTLS = 1, /* TLS 1.2 */
  TERN_TLS_ENGINE_GNUTLS = 2,  /* TLS 1.3 and 1.2 */
};

/* Choose the engine that serves this set's connections. Only before the
 * first tern_tls_commit (TERN_ESTATE after). Errors: TERN_EINVAL (an
 * unknown engine), TERN_ENOTSUP (not built into this library). */
TERN_EXTERN int tern_tls_set_engine(tern_tls *tls, int engine);

/* The engine serving this set: "gnutls" or "mbedtls"; never NULL. */
TERN_EXTERN const char *tern_tls_engine_name(const tern_tls *tls);

enum {
  TERN_TLS_1_2 = 0x0303,
  TERN_TLS_1_3 = 0x0304,
};

#define TERN_TLS_TICKET_KEY_SIZE 64

/* Set the key that session tickets are protected with (copied; exactly
 * TERN_TLS_TICKET_KEY_SIZE bytes of good randomness), instead of the one
 * drawn at random for each set. Give every instance behind one address
 * the same key so that a client resumes its session on any of them.
 * GnuTLS derives the keys it encrypts tickets with from this one and the
 * time, and rotates them by itself (a ticket stays valid through the next
 * period): instances' clocks must agree. Change the key (a restart with a
 * new one) to invalidate every ticket issued. On mbedTLS (no API for it
 * in 2.28) tern fills its ticket context's slots itself: bytes 0-3 name
 * the key in each ticket, bytes 32-63 are its AES-256-GCM key, and
 * tickets resume for 24 hours. Before tern_run only (also on QUIC
 * connections of the set). Errors: TERN_EINVAL (a NULL key or another
 * size), TERN_ESTATE (running), TERN_ETLS (the engine refused the key). */
TERN_EXTERN int tern_tls_set_ticket_key(tern_tls *tls, const void *key,
                                        size_t len);

/* Rotation: the key set before (tern_tls_set_ticket_key's, on instances
 * not yet given the new one), whose tickets still resume here while new
 * sessions get tickets under the current key. Roll a new key out as the
 * ticket key with the old one as this, on every instance; once no
 * instance issues under the old key and its tickets have expired, drop
 * it. A session that resumes with an old-key ticket is served under the
 * old key, so its next ticket is an old-key one too (GnuTLS 3.7 holds one
 * key per session): such a client moves to the new key at its next full
 * handshake (on mbedTLS too). Copied; same size, errors and timing as
 * tern_tls_set_ticket_key. */
TERN_EXTERN int tern_tls_set_previous_ticket_key(tern_tls *tls, const void *key,
                                                 size_t len);

/* The lowest protocol version the set accepts (default TERN_TLS_1_2);
 * it applies from the next tern_tls_commit. Errors: TERN_EINVAL (not one
 * of the above), TERN_ENOTSUP (the engine does not speak it: mbedTLS and
 * TLS 1.3). */
TERN_EXTERN int tern_tls_set_min_version(tern_tls *tls, int version);

/* Client certificates (mutual TLS). */
enum {
  TERN_TLS_CLIENT_NONE = 0,     /* none asked for (the default) */
  TERN_TLS_CLIENT_OPTIONAL = 1, /* asked for: a client without one is
                                   served, one whose certificate does not
                                   verify is refused at the handshake */
  TERN_TLS_CLIENT_REQUIRED = 2, /* a client without a verified
                                   certificate is refused at the
                                   handshake */
};

/* Ask TLS clients (TCP and QUIC) for a certificate, verified against the
 * CA certificates in `ca_file` (PEM, one or more: a chain's
 * intermediates are the client's to send), per `mode`; it applies from
 * the next tern_tls_commit, which reads the file (a file with no
 * certificate fails the commit, logged). TERN_TLS_CLIENT_NONE (ca_file
 * may be NULL) turns it off. The handler reads the verified certificate
 * with tern_request_tls_client_cert and _subject. Errors: TERN_EINVAL,
 * TERN_ENOTSUP (the mbedTLS engine: verification is built on GnuTLS's),
 * TERN_ENOMEM. */
TERN_EXTERN int tern_tls_set_client_ca_file(tern_tls *tls, const char *ca_file,
                                            int mode);

/* ---------------------------------------------------------------------
 * HTTP/3 over QUIC
 *
 * A QUIC listener serves HTTP/3 on a UDP port with the certificates of a
 * tern_tls (the same set may serve a TLS listener too: one certificate
 * configuration for both). QUIC's TLS is TLS 1.3 from GnuTLS (through
 * ngtcp2's crypto helper), so the set must use the GnuTLS engine. Each
 * worker has its own UDP socket on the port (SO_REUSEPORT), and every
 * connection stays on the worker that took its first packet: a packet
 * that reaches another worker (a client that moved to a new address or
 * port) is handed to the owner. The same handlers serve HTTP/3 as
 * HTTP/1.1 and HTTP/2; tern_request_protocol says TERN_PROTO_HTTP3.
 * ------------------------------------------------------------------ */

enum {
  /* Address validation (RFC 9000 8.1): a stateless Retry proves that a
   * new client owns its address before the server spends a handshake on
   * it. LOAD: only while a worker has many handshakes in progress (the
   * default); ALWAYS: every new connection (one more round trip); NEVER:
   * none (the 3x amplification limit still holds until the handshake
   * proves the address). A client that brings a token from an earlier
   * connection (NEW_TOKEN) is spared it. */
  TERN_QUIC_RETRY_LOAD = 0,
  TERN_QUIC_RETRY_ALWAYS = 1,
  TERN_QUIC_RETRY_NEVER = 2,
};

#define TERN_QUIC_OPTIONS_VERSION 2

/* A QUIC listener's options (versioned as the ABI rule at the top says:
 * fill with tern_quic_options_init, then change fields). */
typedef struct {
  int version;
  uint32_t size;
  int retry;            /* TERN_QUIC_RETRY_* (default LOAD) */
  int early_data;       /* 1: accept 0-RTT requests (replayable; default 0) */
  uint32_t max_streams; /* concurrent requests per connection, 1 to 1000
                           (default 100) */
  /* The secret that Retry and NEW_TOKEN tokens and stateless-reset
   * tokens are derived from: `secret_len` bytes (16 to 64), copied; NULL
   * (the default) draws one at random, shared by the server's QUIC
   * listeners. Give every process behind one address the same secret,
   * and keep it across restarts, so that one can validate another's
   * tokens and reset another's (or a previous run's) connections. */
  const void *secret;
  size_t secret_len;
  /* Version 2. Rotation: the secret the fleet used before `secret`
   * (16 to 64 bytes, copied; needs `secret`). Tokens made under it are
   * still accepted (NEW_TOKEN tokens live an hour, Retry tokens 10 s),
   * and a packet for a connection ID issued under it (a client of an
   * instance still on the old secret) gets a stateless reset with that
   * secret's token; everything new is made under `secret`. Each CID
   * carries a tag byte naming its secret (from a hash, not the secret
   * itself), which is how a reset finds the right one. Roll a new secret
   * out as the new `secret` with the old one here, on every instance;
   * once none runs the old one alone and an hour has passed, drop it.
   * NULL (the default): none. */
  const void *previous_secret;
  size_t previous_secret_len;
} tern_quic_options;

/* The defaults, with version and size set. */
TERN_EXTERN void tern_quic_options_init_size(tern_quic_options *opts,
                                             size_t size);
TERN__INIT_BY_SIZE(tern_quic_options, tern_quic_options_init)

/* ---------------------------------------------------------------------
 * Listening: tern_listen (host and port) and tern_listen_with (any
 * listener: TCP, TLS, a Unix socket, a socket handed over, QUIC)
 * ------------------------------------------------------------------ */

#define TERN_LISTEN_OPTIONS_VERSION 4

/* A listener, for tern_listen_with (versioned as the ABI rule at the top
 * says: fill with tern_listen_options_init, then change fields). Where:
 * host and port, or path, or fd (at most one of the three; none: every
 * address, a port the kernel picks). What: HTTP/1.1 and HTTP/2 over a
 * byte stream (TCP or a Unix socket; TLS when tls is set), or HTTP/3 over
 * QUIC on UDP when quic is 1. Versions: 1 ends with proxy_trusted, 2 with
 * quic_options, 3 with http2_only, 4 with http1_only. */
typedef struct {
  int version;
  uint32_t size;
  /* Speak TLS with this set (committed already); NULL (the default):
   * plain. QUIC needs it (its certificates; GnuTLS only). */
  tern_tls *tls;
  /* 1: every connection opens with a PROXY protocol header (HAProxy's,
   * version 1 or 2, told apart by its first byte), sent by the load
   * balancer in front of tern, before any TLS: the client address it
   * carries becomes the connection's peer (tern_request_peer) and its
   * destination the local address. A v2 LOCAL header (a balancer's health
   * check) or a v1 UNKNOWN one keeps the socket's addresses. A header
   * that is malformed, longer than 1024 bytes or not whole within the
   * head timeout closes the connection. Default 0. Not with quic. */
  int proxy_protocol;
  /* The sources allowed to send that header: a comma-separated list of
   * IPv4 and IPv6 networks ("10.0.0.0/8, 192.0.2.7, fd00::/8"; a bare
   * address is one host); a connection from any other source is closed
   * at accept. NULL (the default): loopback only (127.0.0.0/8, ::1).
   * Copied. At most 64 networks; a list that does not parse is
   * TERN_EINVAL. A Unix socket's clients may all send one (the file's
   * permissions decide who connects). */
  const char *proxy_trusted;
  /* Version 2. An IPv4 or IPv6 literal, "localhost" (127.0.0.1), or NULL
   * (the default) for every IPv6 and IPv4 address (dual-stack sockets on
   * "::"; an IPv6 literal listens on IPv6 only). */
  const char *host;
  /* 0 (the default): the kernel picks a free one (*bound_port says which). */
  int port;
  /* A Unix domain socket instead (HTTP/1.1 and h2c, TLS and the PROXY
   * protocol as set): a file path, created by the bind and removed when
   * the server is freed (an existing file is not replaced:
   * TERN_EADDRINUSE; remove a stale one first), or "@name" for Linux's
   * abstract namespace. Connections have no IP peer (tern_request_peer
   * answers TERN_EIO) unless a PROXY header names one. NULL: none. */
  const char *path;
  /* A socket the parent process bound (systemd's socket activation, see
   * tern_listen_fds_from_env, or any other supervisor): a listening TCP
   * or Unix stream socket, or with quic a bound UDP socket. It is made
   * non-blocking and close-on-exec; on success tern owns it (closed when
   * the server is freed), on error the caller keeps it. -1 (the
   * default): none. */
  int fd;
  /* 1: HTTP/3 over QUIC on UDP host:port (one socket per worker, a
   * reuseport group of tern's own), or on fd (one worker serves it; the
   * workers take turns over such sockets), with tls's certificates. The
   * first QUIC listener also makes HTTP/1.1 and HTTP/2 responses over TLS
   * advertise it (Alt-Svc; see tern_server_set_alt_svc). Default 0. */
  int quic;
  /* With quic: its options (NULL: the defaults; tern_quic_options). */
  const tern_quic_options *quic_options;
  /* Version 3. 1: HTTP/2 only, in the clear (h2c with prior knowledge),
   * as a gRPC backend or a proxy's h2c upstream speaks it: every
   * connection must open with the HTTP/2 client preface, and one that
   * does not is a connection error (GOAWAY PROTOCOL_ERROR, RFC 9113 3.4)
   * where a port that also speaks HTTP/1.1 answers it as an HTTP/1.1
   * request (400 for bytes that are neither). Default 0: HTTP/1.1 and
   * h2c on one port. Not with tls (ALPN chooses there) or quic;
   * TERN_ENOTSUP in a build without HTTP/2. */
  int http2_only;
  /* Version 4. 1: HTTP/1.1 only. Over TLS, ALPN offers "http/1.1" alone,
   * so a client that offers h2 too gets HTTP/1.1 (a port that a benchmark
   * or a policy keeps to HTTP/1.1 over TLS); in the clear, neither the
   * HTTP/2 preface (answered as an HTTP/1.1 request of version 2.0: 505)
   * nor Upgrade: h2c (the request is answered over HTTP/1.1) starts
   * HTTP/2. Default 0: ALPN offers h2 and http/1.1, and a plain port
   * speaks h2c too. Not with http2_only or quic; TERN_ENOTSUP over TLS
   * with the mbedTLS engine (its ALPN list is the set's, not the
   * listener's). */
  int http1_only;
} tern_listen_options;

/* The defaults, with version and size set. */
TERN_EXTERN void tern_listen_options_init_size(tern_listen_options *opts,
                                               size_t size);
TERN__INIT_BY_SIZE(tern_listen_options, tern_listen_options_init)

/* Listen as `opts` says (see tern_listen_options: where, TLS, the PROXY
 * protocol, QUIC). On success the port bound (TCP or UDP) is stored in
 * *bound_port if it is not NULL. May be called several times, for
 * several listeners. Errors: TERN_EINVAL (opts NULL, a version or size
 * the ABI rule refuses, a field out of range or fields that do not go
 * together, a socket handed over that does not listen or is not of the
 * kind asked for; logged), TERN_ESTATE (running, or tls has no committed
 * set), TERN_ENOTSUP (quic in a build without HTTP/3, or tls on
 * mbedTLS), TERN_EADDR (a host that does not parse, a path of 108 bytes
 * or more, or one that cannot be bound), TERN_EADDRINUSE, TERN_ENOMEM,
 * TERN_EIO. Configuration time only (before tern_run or tern_attach). */
TERN_EXTERN int tern_listen_with(tern_server *srv,
                                 const tern_listen_options *opts,
                                 int *bound_port);

/* systemd's LISTEN_FDS protocol (sd_listen_fds(3)): when LISTEN_PID is
 * this process's id, store the LISTEN_FDS descriptors it was handed (3,
 * 4, ...; made close-on-exec) in fds[0 .. max) and return their count,
 * after removing LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES from the
 * environment so that children do not take them too. 0 when the
 * variables are absent or meant for another process. TERN_EINVAL (a
 * malformed LISTEN_FDS), TERN_ENOMEM (more than `max`). Pass each to
 * tern_listen_with as its fd (a UDP one, which getsockopt(fd, SOL_SOCKET,
 * SO_TYPE) says is SOCK_DGRAM, with quic = 1). Not thread-safe (it changes
 * the environment). */
TERN_EXTERN int tern_listen_fds_from_env(int *fds, size_t max);

/* The longest descriptor name (systemd's FileDescriptorName=), with its
 * terminating NUL. */
#define TERN_LISTEN_FD_NAME_MAX 256

/* tern_listen_fds_from_env, and each descriptor's name from
 * LISTEN_FDNAMES (colon-separated, one per descriptor, as systemd's
 * FileDescriptorName= sets them) copied into names[i] as a C string;
 * "unknown" for each when LISTEN_FDNAMES is absent (as
 * sd_listen_fds_with_names). `names` holds `max` entries (NULL: names
 * not wanted). Errors as tern_listen_fds_from_env, and TERN_EINVAL when
 * LISTEN_FDNAMES does not name exactly LISTEN_FDS descriptors or a name
 * is TERN_LISTEN_FD_NAME_MAX bytes or longer (the environment is then
 * left as it was). */
TERN_EXTERN int
tern_listen_fds_from_env_named(int *fds, char (*names)[TERN_LISTEN_FD_NAME_MAX],
                               size_t max);

/* The Alt-Svc field that HTTP/1.1 and HTTP/2 responses over TLS carry, so
 * that clients learn of HTTP/3. NULL: automatic (the default): once a
 * QUIC listener exists, h3=":PORT" with its port, else none. "": none.
 * Otherwise the value given (a C string, copied, at most 255 bytes, no
 * CR or LF: TERN_EINVAL). Before tern_run only (TERN_ESTATE). */
TERN_EXTERN int tern_server_set_alt_svc(tern_server *srv, const char *value);

/* ---------------------------------------------------------------------
 * Routing
 * ------------------------------------------------------------------ */

/* A request handler. It runs on the worker (or on the blocking pool for
 * TERN_ROUTE_BLOCKING routes) and must eventually finish the response,
 * now or later, from any thread: tern_respond(), tern_respond_ref(), or
 * tern_response_start() ... tern_response_end(). The request stays valid
 * until then, even if the client goes away or the stop deadline cuts it
 * (see tern_stop). */
typedef void (*tern_handler)(tern_request *req, void *user);

enum {
  /* Run the handler on a thread pool so that it may block: tern's own
   * threads, started on demand, at most UV_THREADPOOL_SIZE (read when the
   * server is created; 4 by default, at most 1024). They belong to no
   * loop, so a handler still blocking at the stop deadline does not hold
   * up tern_run. The body is collected before the handler runs. */
  TERN_ROUTE_BLOCKING = 1u << 0,
  /* Call the handler as soon as the head has arrived and stream the body to
   * it (tern_request_read) instead of collecting it first. */
  TERN_ROUTE_STREAM_BODY = 1u << 1,
};

/* A route with both flags is refused (TERN_EINVAL): a blocking handler
 * cannot pace a streamed body from its thread. So is any other bit. */

/* ---- Response compression (docs/compression.md) ----
 *
 * A route whose options point to a tern_compress_options compresses its
 * responses on the fly (gzip, zstd or br) when the client's
 * Accept-Encoding accepts a coding the options enable (q-values
 * honoured, q=0 refuses; "*" counts). It
 * compresses only a response that:
 * - has status 200..599 other than 204, 206 and 304, and is not a HEAD
 *   answer (the head then announces the uncompressed length);
 * - has a Content-Type in the options' list, and no Content-Encoding,
 *   Content-Range, or Cache-Control with no-transform;
 * - is at least min_size bytes long, when its length is known up front
 *   (tern_respond, tern_respond_ref, tern_response_start with a length);
 *   a streamed body of unknown length is always compressed.
 * Every response of such a route carries `Vary: Accept-Encoding`
 * (compressed or not). A compressed one has Content-Encoding, no
 * Content-Length of the caller's, and its strong ETag made weak
 * ("x" becomes W/"x": the bytes differ from the identity ones); an ETag
 * longer than 258 bytes is dropped. A whole body (tern_respond*) is
 * compressed at once and sent with its compressed Content-Length; a
 * streamed one (tern_response_start with any length) is sent without
 * one (chunked on HTTP/1.1, closed-delimited on HTTP/1.0) and each
 * tern_response_write is compressed and flushed at once, so a streamed
 * response still arrives piece by piece, and the write's `done` runs
 * when its compressed bytes are written.
 *
 * Memory: the compressor (see tern_compress_options) and its output
 * buffers come from the server's allocator
 * only for a response being compressed, and go back when it ends; a
 * response that is not compressed allocates nothing (one array beyond 32
 * caller fields excepted). A compressor that cannot be allocated leaves
 * the response uncompressed; it never fails the request.
 *
 * BREACH: compressing a response that holds a secret (a CSRF token, a
 * session id) next to text an attacker can make it reflect lets the
 * attacker learn the secret from the compressed lengths over TLS. Leave
 * compression off for such routes, or mask the secret per response. */

enum {
  TERN_COMPRESS_GZIP = 1u << 0, /* gzip (RFC 9110 8.4.1.3), by zlib */
  TERN_COMPRESS_ZSTD = 1u << 1, /* zstd (RFC 8878), by libzstd */
  TERN_COMPRESS_BR = 1u << 2,   /* brotli (RFC 7932), by libbrotlienc */
  TERN_COMPRESS_ALL = 7u,
};

#define TERN_COMPRESS_OPTIONS_VERSION 2

/* Versions (see ABI above), each ending with the field named: 1 with
 * types, 2 with br_window. The library copies what it needs when the
 * route is added. Memory per compressed stream with the defaults
 * (docs/compression.md): gzip about 256 KiB, zstd up to about 1.8 MiB,
 * br at quality 4 up to about 2 MiB; smaller windows take less. */
typedef struct {
  int version;          /* TERN_COMPRESS_OPTIONS_VERSION */
  uint32_t size;        /* sizeof(tern_compress_options) */
  unsigned encodings;   /* TERN_COMPRESS_* the route may use (default: those
                           built: gzip always, br and zstd when the library
                           was built with them; a coding not built is
                           TERN_ENOTSUP). The client's highest q-value
                           wins; ties go to br, then zstd, then gzip. */
  int gzip_level;       /* 1 (fast) to 9 (small); default 5 */
  int gzip_window_bits; /* 9 to 15: a 2^bits byte window (default 15) */
  int gzip_mem_level;   /* 1 to 9: zlib's memLevel (default 8) */
  int zstd_level;       /* 1 to 19 (default 3) */
  int zstd_window_log;  /* 10 to 27: a 2^log byte window (default 18) */
  uint32_t min_size;    /* smallest known length compressed (1024) */
  /* The media types compressed: a C string, a comma-separated list of
   * "type/subtype" (exact, ASCII case-insensitive, parameters such as
   * "; charset" ignored on the response's side) and "type/" + "*" (any
   * subtype). NULL: the default list, text/ + "*", application/json,
   * application/javascript, application/xml, application/wasm,
   * image/svg+xml, application/manifest+json and application/ld+json. At
   * most 1024 bytes. */
  const char *types;
  /* Version 2. */
  int br_quality; /* 0 (fast) to 11 (small); default 4. Above 9 brotli
                     spends many times the CPU: for precompressed files,
                     not for answers made per request. */
  int br_window;  /* 10 to 24: a 2^window byte window (default 18); a
                     body of known length gets no larger a window than
                     it fills */
} tern_compress_options;

/* Fill `o` with the defaults above, its version and its size. */
TERN_EXTERN void tern_compress_options_init_size(tern_compress_options *o,
                                                 size_t size);
TERN__INIT_BY_SIZE(tern_compress_options, tern_compress_options_init)

#define TERN_ROUTE_OPTIONS_VERSION 3

/* Versions (see ABI above), each ending with the field named: 1 with
 * max_body_size, 2 with compress, 3 with host. */
typedef struct {
  int version;            /* TERN_ROUTE_OPTIONS_VERSION */
  uint32_t size;          /* sizeof(tern_route_options) */
  unsigned flags;         /* TERN_ROUTE_* */
  uint64_t max_body_size; /* collected-body limit; 0 = the server's */
  /* Version 2: compress the route's responses with these options (see
   * Response compression above; read and copied when the route is added,
   * a bad field is TERN_EINVAL with a log line). NULL (the default): no
   * compression. */
  const tern_compress_options *compress;
  /* Version 3: a virtual host. The route serves only requests for this
   * host (a C string, copied: "example.com", or "*.example.com" for any
   * name below it, not itself), compared without case with the request's
   * Host field (HTTP/2 and HTTP/3: :authority) less its port and a final
   * dot. NULL (the default): any host. A host's routes are looked up
   * first; a path none of them has falls through to the routes without a
   * host (a path they have but not for the method is that host's 405).
   * An exact host wins over a wildcard one. */
  const char *host;
} tern_route_options;

/* Fill `o` with defaults (no flags, the server's body limit, no
 * compression), its version and its size. */
TERN_EXTERN void tern_route_options_init_size(tern_route_options *o,
                                              size_t size);
TERN__INIT_BY_SIZE(tern_route_options, tern_route_options_init)

/* Add a route. `method` is a C string token ("GET") or NULL / "*" for any
 * method; `pattern` is a C string path of segments: literals, ":name"
 * parameters (one segment) and a trailing "*" (the rest). The most
 * specific route wins: literal over parameter over wildcard, exact method
 * over any. A path that matches no route gets 404; a path that matches but
 * not for this method gets 405 with an Allow header. A GET route answers
 * HEAD too (the body is not sent). Errors: TERN_EINVAL (bad pattern or
 * method, a parameter name used twice as in "/q/:x/:x", bad options:
 * each with a log line saying what is wrong), TERN_ENOTSUP (options
 * that ask for a compression coding this library was built without,
 * logged), TERN_EEXIST, TERN_ESTATE (running), TERN_ENOMEM. */
TERN_EXTERN int tern_route(tern_server *srv, const char *method,
                           const char *pattern, tern_handler handler,
                           void *user);

/* tern_route with options (`opts` may be NULL for the defaults). */
TERN_EXTERN int tern_route_with(tern_server *srv, const char *method,
                                const char *pattern, tern_handler handler,
                                void *user, const tern_route_options *opts);

/* Handler for requests no route matches, instead of the 404/405 answer.
 * `opts` may be NULL. The handler tells the two cases apart with
 * tern_request_route_status() and answers a 405 with the Allow list of
 * tern_request_allow(). Errors: TERN_EINVAL (bad options, logged),
 * TERN_ENOTSUP (a compression coding not built, logged), TERN_ESTATE
 * (running), TERN_ENOMEM (the compression options' copy). */
TERN_EXTERN int tern_server_set_default_handler(tern_server *srv,
                                                tern_handler handler,
                                                void *user,
                                                const tern_route_options *opts);

/* How routing went for `r`: 0 when a route matched, 404 when no route has
 * the path, 405 when routes have the path but not for this method. A
 * default handler sees 404 or 405; other handlers see 0. */
TERN_EXTERN int tern_request_route_status(const tern_request *r);

/* For a request with route status 405: the methods the path has, as an
 * Allow header value ("GET, HEAD, POST"; HEAD listed with GET), `*len`
 * bytes, valid like the request's other strings. NULL (and *len 0)
 * otherwise. */
TERN_EXTERN const char *tern_request_allow(const tern_request *r, size_t *len);

/* ---------------------------------------------------------------------
 * The request
 *
 * Every string returned below points into memory the request owns, is not
 * NUL-terminated, and stays valid until the response is finished. Call
 * these from the handler's thread before finishing the response.
 * ------------------------------------------------------------------ */

enum {
  TERN_PROTO_HTTP10 = 10,
  TERN_PROTO_HTTP11 = 11,
  TERN_PROTO_HTTP2 = 20,
  TERN_PROTO_HTTP3 = 30,
};

typedef struct {
  const char *name; /* lower-case on HTTP/2 and HTTP/3; as sent on 1.x */
  size_t name_len;
  const char *value;
  size_t value_len;
} tern_header;

/* A tern_header from two string literals, their lengths counted by the
 * compiler: static const tern_header h[] = {TERN_HEADER("cache-control",
 * "no-store")}; */
#define TERN_HEADER(name, value)                                               \
  { (name), sizeof(name) - 1, (value), sizeof(value) - 1 }

TERN_EXTERN const char *tern_request_method(const tern_request *r, size_t *len);
/* The request-target as sent (path and query). */
TERN_EXTERN const char *tern_request_target(const tern_request *r, size_t *len);
/* The path without the query, not percent-decoded. */
TERN_EXTERN const char *tern_request_path(const tern_request *r, size_t *len);
/* The query without '?', or NULL (and *len 0) when there is none. */
TERN_EXTERN const char *tern_request_query(const tern_request *r, size_t *len);
/* Host / :authority, or NULL when absent. */
TERN_EXTERN const char *tern_request_authority(const tern_request *r,
                                               size_t *len);
/* TERN_PROTO_*. */
TERN_EXTERN int tern_request_protocol(const tern_request *r);
/* The TLS version the request came over: TERN_TLS_1_3 or TERN_TLS_1_2
 * (HTTPS; HTTP/3 is always TERN_TLS_1_3), or 0 in the clear (plain TCP, a
 * Unix socket; behind a TLS-terminating balancer, see
 * tern_request_proxy_tlv with TERN_PROXY_SSL). Any thread holding the
 * request. */
TERN_EXTERN int tern_request_tls(const tern_request *r);
/* The cipher suite the request's TLS handshake chose, as the engine
 * names it (a static C string: GnuTLS gives IANA names such as
 * "TLS_AES_128_GCM_SHA256", mbedTLS its own such as
 * "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256"), or NULL in the clear. */
TERN_EXTERN const char *tern_request_tls_cipher(const tern_request *r);
/* The client certificate the connection's handshake verified
 * (tern_tls_set_client_ca_file): its DER bytes (`*len`), or NULL when
 * the client sent none, none was asked for, or the connection is not
 * TLS. A connection resumed from a session ticket has the certificate
 * its first handshake verified (the session carries it). */
TERN_EXTERN const void *tern_request_tls_client_cert(const tern_request *r,
                                                     size_t *len);
/* That certificate's subject as RFC 4514 text ("CN=alice,O=Example"),
 * NUL-terminated (`*len` bytes, if len is not NULL), or NULL as above. */
TERN_EXTERN const char *tern_request_tls_client_subject(const tern_request *r,
                                                        size_t *len);
/* 1 when the request's head arrived in TLS early data (0-RTT on HTTP/3,
 * with tern_quic_options.early_data on), else 0. Such a request may be a
 * replay of one the client sent before, by an attacker that recorded it:
 * tern has answered 425 Too Early to every method but GET, HEAD and
 * OPTIONS already, and a handler whose GET is not safe to repeat answers
 * 425 itself (RFC 8470: the client retries after the handshake). The
 * handler's thread, like the other accessors. */
TERN_EXTERN int tern_request_early(const tern_request *r);

/* The value of path parameter `name` (`name_len` bytes, without the ':'),
 * or NULL. The wildcard's value is named "*". */
TERN_EXTERN const char *tern_request_param(const tern_request *r,
                                           const char *name, size_t name_len,
                                           size_t *len);

/* The first header named `name` (ASCII case-insensitive), or NULL. On
 * HTTP/2 and HTTP/3 a request carries its host as :authority rather than
 * a Host field: "host" answers it there too (as tern_request_authority
 * does), so a handler reads the same on every protocol. */
TERN_EXTERN const char *tern_request_header(const tern_request *r,
                                            const char *name, size_t name_len,
                                            size_t *len);
/* The host the request is for: its Host field, on HTTP/2 and HTTP/3 its
 * :authority, without the port and a final dot (`*len` bytes; an IPv6
 * literal keeps its brackets), as virtual hosts compare it; NULL when the
 * request names none (HTTP/1.0). */
TERN_EXTERN const char *tern_request_host(const tern_request *r, size_t *len);
/* Headers in arrival order: count, and the i-th (NULL past the end). */
TERN_EXTERN size_t tern_request_header_count(const tern_request *r);
TERN_EXTERN const tern_header *tern_request_header_at(const tern_request *r,
                                                      size_t i);

/* Peer and local address as text ("127.0.0.1", "::1") into buf (a NUL is
 * written; size at least 46) and the port into *port. The addresses are
 * taken when the connection is accepted, so these read no socket: any
 * thread may call them while it holds the request, also after the client
 * has gone. Errors: TERN_EINVAL (NULL or a buffer too small), TERN_EIO
 * (the address could not be read at accept). */
TERN_EXTERN int tern_request_peer(const tern_request *r, char *buf, size_t size,
                                  int *port);
TERN_EXTERN int tern_request_local(const tern_request *r, char *buf,
                                   size_t size, int *port);

/* What the PROXY protocol v2 header the request's connection came with
 * (tern_listen_options.proxy_protocol) said beside the addresses: */
enum {
  TERN_PROXY_ALPN = 0x01,        /* the protocol the client negotiated */
  TERN_PROXY_AUTHORITY = 0x02,   /* the host name the client asked for */
  TERN_PROXY_SSL = 0x20,         /* "1": the client spoke TLS to the proxy */
  TERN_PROXY_SSL_VERSION = 0x21, /* e.g. "TLSv1.3" */
  TERN_PROXY_SSL_CN = 0x22,      /* the client certificate's Common Name */
};
/* The value of TLV `type` (one of TERN_PROXY_*) as bytes, with *len (may
 * be NULL); a NUL follows them. NULL when the connection had no v2 header,
 * the header lacked that TLV, or the type is not one of the above. The
 * values are copied at accept and live as long as the connection: any
 * thread holding the request may read them. Trust them as far as the
 * proxy: only trusted sources may send a header. */
TERN_EXTERN const char *tern_request_proxy_tlv(const tern_request *r, int type,
                                               size_t *len);

/* The collected body (routes without TERN_ROUTE_STREAM_BODY); *len 0 and a
 * non-NULL pointer when there is none. */
TERN_EXTERN const char *tern_request_body(const tern_request *r, size_t *len);

/* The body's length as the head announced it, known when the handler is
 * called (streamed or collected): 0 when the request carries no body
 * (HTTP/1.1 without Content-Length and Transfer-Encoding, or with
 * Content-Length: 0; HTTP/2 and HTTP/3 HEADERS that end the stream), the
 * Content-Length otherwise, and -1 when the length is not known ahead
 * (chunked, or HTTP/2 and HTTP/3 DATA without a Content-Length). A
 * streaming handler that sees 0 need not wait for TERN_BODY_END. -1 for
 * r NULL. */
TERN_EXTERN int64_t tern_request_body_length(const tern_request *r);

/* Trailer fields of a chunked request body (after the body has ended). */
TERN_EXTERN size_t tern_request_trailer_count(const tern_request *r);
TERN_EXTERN const tern_header *tern_request_trailer_at(const tern_request *r,
                                                       size_t i);

/* ---- Query strings and forms ---- */

/* A query string (tern_request_query) or an application/x-www-form-
 * urlencoded body (tern_request_body) is pairs separated by '&' (empty
 * pieces are skipped), each "name=value" or a bare "name" (empty value);
 * names and values are percent-encoded, '+' standing for a space. These
 * read such a string as it is: any thread, no allocation, nothing kept.
 *
 * The next pair from *pos (start at 0): 1 and its still-encoded name and
 * value as views into s in *pair, *pos moved past it; 0 when none is
 * left. */
TERN_EXTERN int tern_form_next(const char *s, size_t len, size_t *pos,
                               tern_header *pair);
/* Decode `len` bytes of a name or value into out (`cap` bytes): its
 * length in *out_len (may be NULL), a NUL after it when there is room.
 * It is never longer than the input. Errors: TERN_EINVAL (a '%' not
 * followed by two hex digits), TERN_ETOOBIG (cap too small). */
TERN_EXTERN int tern_form_decode(const char *in, size_t len, char *out,
                                 size_t cap, size_t *out_len);
/* The first pair whose decoded name is `name` (`name_len` bytes), its
 * value decoded into out as tern_form_decode does. TERN_ENOTFOUND when
 * there is none. For example, with a query "q=tern%20http&page=2":
 * tern_form_get(q, qlen, "q", 1, buf, sizeof(buf), &n) gives
 * "tern http". */
TERN_EXTERN int tern_form_get(const char *s, size_t len, const char *name,
                              size_t name_len, char *out, size_t cap,
                              size_t *out_len);

/* ---- Cookies ---- */

/* The value of the request's cookie `name` (`name_len` bytes, compared
 * exactly), as a view into its Cookie field (the quotes of a quoted value
 * left out), with *len; NULL when there is none. Every Cookie field is
 * looked through (HTTP/2 and HTTP/3 crumbs arrive joined). Cookie values
 * are not decoded: what the server set is what comes back. */
TERN_EXTERN const char *tern_request_cookie(const tern_request *r,
                                            const char *name, size_t name_len,
                                            size_t *len);
/* The next "name=value" pair of a Cookie field value `s` from *pos (start
 * at 0), separated by ';' and spaces, as views in *pair: 1, or 0 when
 * none is left. Pieces without '=' or without a name are passed over. */
TERN_EXTERN int tern_cookie_next(const char *s, size_t len, size_t *pos,
                                 tern_header *pair);
/* A Set-Cookie field value into out (`cap` bytes, NUL-terminated; its
 * length in *out_len, may be NULL): "name=value", then "; " and `attrs`
 * as given when it is not NULL or empty (e.g. "Path=/; Max-Age=3600;
 * Secure; HttpOnly; SameSite=Lax"). The name must be a token and the
 * value RFC 6265 cookie-octets (no space, quote, comma, semicolon,
 * backslash or control: encode such values yourself), and attrs hold no
 * control character: else TERN_EINVAL, so that no field can be split.
 * TERN_ETOOBIG when cap is too small. */
TERN_EXTERN int tern_cookie_format(char *out, size_t cap, size_t *out_len,
                                   const char *name, size_t name_len,
                                   const char *value, size_t value_len,
                                   const char *attrs);

/* ---- Basic authentication ---- */

/* The credentials of an "Authorization: Basic ..." value `v` (RFC 7617):
 * the base64 is decoded into buf (`cap` bytes), and *cred's name is the
 * user-id and its value the password, views into buf. Errors:
 * TERN_ENOTFOUND (another scheme), TERN_EINVAL (bad base64, no ':', or a
 * control character), TERN_ETOOBIG (buf too small). */
TERN_EXTERN int tern_basic_auth_parse(const char *v, size_t len, char *buf,
                                      size_t cap, tern_header *cred);
/* The same for the request's Authorization field; TERN_ENOTFOUND when it
 * has none. Check the password with tern_equal_secret, and answer 401
 * with a WWW-Authenticate field when it does not match. */
TERN_EXTERN int tern_request_basic_auth(const tern_request *r, char *buf,
                                        size_t cap, tern_header *cred);
/* 1 when the two byte strings are equal, else 0, in a time that depends
 * on their lengths only, not on where they differ: for passwords, tokens
 * and MACs, where an early exit would tell an attacker how much of a
 * guess was right. */
TERN_EXTERN int tern_equal_secret(const void *a, size_t alen, const void *b,
                                  size_t blen);

/* ---- Multipart bodies (multipart/form-data, RFC 7578) ---- */

/* A streaming multipart parser, sans-I/O: feed it the body in the pieces
 * it arrives in (a TERN_ROUTE_STREAM_BODY route's TERN_BODY_DATA, or a
 * collected body whole) and take one event per call. A part's data comes
 * as views into the bytes fed, in as many DATA events as it takes: an
 * upload of any size goes to a file or a hash without being held, and
 * the caller's own pace is the backpressure (tern_request_pause while a
 * consumer is behind). The parser keeps only the part being headed (up
 * to max_head bytes) and a possible delimiter's start; any thread, one
 * body per parser. */
typedef struct tern_multipart tern_multipart;

enum {
  TERN_MULTIPART_MORE = 0,     /* every byte fed was taken: feed more */
  TERN_MULTIPART_PART = 1,     /* a part starts: fields, name, filename */
  TERN_MULTIPART_DATA = 2,     /* the next bytes of its data */
  TERN_MULTIPART_PART_END = 3, /* the part's data is complete */
  TERN_MULTIPART_END = 4,      /* the closing delimiter: the body is done
                                  (what follows, the epilogue, is taken
                                  and ignored) */
};

/* One event. The views (fields, name, filename, data) are valid until
 * the next call on the parser, and into the bytes fed for data. */
typedef struct {
  int type;                  /* TERN_MULTIPART_* */
  const tern_header *fields; /* PART: the part's fields, as sent */
  size_t nfields;
  const char *name; /* PART: Content-Disposition's name parameter, or
                       NULL (a quoted one without its quotes; escapes as
                       sent) */
  size_t name_len;
  const char *filename; /* PART: its filename parameter, or NULL: a
                           client's name, never a path to trust */
  size_t filename_len;
  const char *data; /* DATA: `len` bytes */
  size_t len;
} tern_multipart_event;

/* A parser for a body whose Content-Type is `content_type` (`len` bytes:
 * multipart/ANY with a boundary parameter of 1 to 70 characters), with
 * at most `max_parts` parts (0: 1000) and `max_head` bytes of fields per
 * part (0: 8192; at most 65536) and 16 fields. Errors: TERN_EINVAL (not
 * multipart, no or a bad boundary: answer 400 or 415), TERN_ENOMEM. */
TERN_EXTERN int tern_multipart_new(const char *content_type, size_t len,
                                   size_t max_parts, size_t max_head,
                                   tern_multipart **out);

/* Feed `len` bytes; *used is set to how many were taken (feed the rest,
 * `in + *used`, to the next call), `ev` to the event. Returns the event's
 * type, or an error that stays the parser's answer from then on:
 * TERN_EINVAL (malformed: a delimiter not followed by CR LF or "--", a
 * field without a name or folded, control bytes in a value; answer 400),
 * TERN_ETOOBIG (more parts, fields or head bytes than allowed; 413). A
 * body that ends before TERN_MULTIPART_END is incomplete
 * (tern_multipart_finished). */
TERN_EXTERN int tern_multipart_next(tern_multipart *m, const char *in,
                                    size_t len, size_t *used,
                                    tern_multipart_event *ev);

/* 1 once the closing delimiter was read, else 0. */
TERN_EXTERN int tern_multipart_finished(const tern_multipart *m);

/* Free the parser; NULL is a no-op. */
TERN_EXTERN void tern_multipart_free(tern_multipart *m);

/* ---- Streaming request bodies (TERN_ROUTE_STREAM_BODY routes) ---- */

enum {
  TERN_BODY_DATA = 0,  /* `data`/`len` is the next piece */
  TERN_BODY_END = 1,   /* the body is complete (len 0) */
  TERN_BODY_ERROR = 2, /* the client went away or sent bad framing */
};

/* Body callback: `data` is valid only during the call. After TERN_BODY_END
 * or TERN_BODY_ERROR it is not called again. Runs on the owning worker.
 * On HTTP/2 a body that stalls for body_timeout_ms while it is read (not
 * paused) ends with TERN_BODY_ERROR; a response not started by the end of
 * that call is answered 408 by tern, and the handler's response calls
 * then find the client gone (TERN_ECLOSED; the finishing call still
 * finishes). On HTTP/1.1 the connection closes instead. */
typedef void (*tern_body_fn)(tern_request *r, int event, const char *data,
                             size_t len, void *user);

/* Start receiving the body. On HTTP/1.1 a client waiting for
 * "100 Continue" is sent it now, unless a response has already started
 * (then the final response stands in for it). The callback runs later,
 * never inside this call; an empty body is one TERN_BODY_END. Call once,
 * from the owning worker. Errors: TERN_ESTATE (not a streaming route, or
 * already reading), TERN_ECLOSED. */
TERN_EXTERN int tern_request_read(tern_request *r, tern_body_fn fn, void *user);

/* Backpressure: while paused no body callback runs and the socket is not
 * read. Any thread: from the owning worker the call acts at once (and
 * TERN_ESTATE, logged, before tern_request_read); from another thread it
 * is posted to the worker in order with the response calls and returns 0
 * (TERN_ESTATE once a finishing call was made, TERN_ECLOSED once the stop
 * deadline cut the request, TERN_ENOMEM), and the worker applies it once
 * the body is being read, so that a consumer on another thread (a
 * language binding's) can resume a body it paused in the callback. */
TERN_EXTERN int tern_request_pause(tern_request *r);
TERN_EXTERN int tern_request_resume(tern_request *r);

/* Per-request user pointer, free for the handler's use. */
TERN_EXTERN void tern_request_set_data(tern_request *r, void *data);
TERN_EXTERN void *tern_request_data(const tern_request *r);

/* ---- The client going away ---- */

/* Gone callback: the request was aborted before its response was
 * finished. Runs on the owning worker, at most once, and never after a
 * finishing response call (tern_respond, tern_respond_ref,
 * tern_response_end) has been made. The request stays valid: the handler
 * still finishes it, in the callback or later, from any thread, and the
 * response calls then return TERN_ECLOSED and send nothing (a finishing
 * call finishes the request all the same). */
typedef void (*tern_gone_fn)(tern_request *r, void *user);

/* Ask to be told when the request's client goes away, so that a handler
 * that waits (a long poll) can stop waiting. It fires when:
 * - HTTP/1.1: the connection is reset or closed by the client (a FIN
 *   while any handler of the connection has not answered counts: tern
 *   drops the requests still unanswered, also those queued behind the
 *   head of the pipeline, sends what is already answered and closes), or
 *   tern closes it (timeouts, write errors, the tern_stop deadline);
 * - HTTP/2: the client resets the stream (RST_STREAM), or the connection
 *   ends before the response did (closed, reset, or a FIN after GOAWAY).
 * Call from the owning worker (the handler, or another callback of the
 * request), once the handler has the request and before it is finished;
 * calling again replaces the callback, `fn` NULL removes it. Errors:
 * TERN_EINVAL, TERN_ESTATE (another thread, such as a TERN_ROUTE_BLOCKING
 * handler's, or the request is finished), TERN_ECLOSED (the client is
 * gone already; `fn` will not run). */
TERN_EXTERN int tern_request_on_gone(tern_request *r, tern_gone_fn fn,
                                     void *user);

/* ---- The worker's loop ---- */

/* A request (or WebSocket) lives on one worker, whose libuv loop runs
 * its callbacks. A handler that waits for something (a timer, a file, a
 * database query through a libuv-based client library) can start it on
 * that loop and respond from its callback: nothing blocks, and no thread
 * is spent per waiting request. Loops are passed as `void *` (a
 * `uv_loop_t *`) so that this header needs no libuv. Rules:
 * - Use the loop only on its worker's thread (in a handler or a callback
 *   of that worker: a request's, a WebSocket's, a handle's started on
 *   it, a tern_worker_call function). libuv loops are not thread-safe;
 *   from another thread, post with tern_worker_call.
 * - Close what you opened on it. A handle still open keeps the loop
 *   running, so tern_run would not return: close per-request handles when
 *   the request is finished or its client is gone (tern_request_on_gone;
 *   the stop deadline counts as gone), and per-worker ones (a client
 *   library's connection) in the on_stop hook of tern_server_on_workers.
 * - A TERN_ROUTE_BLOCKING handler runs on a pool thread, not a worker:
 *   tern_request_loop refuses it (it may block instead, see
 *   tern_route_with). */

/* Per-worker hook: `worker` is the worker's index (0 to
 * tern_server_workers() - 1) and `uv_loop` its loop (a `uv_loop_t *`), or
 * NULL when a tern_worker_call function is let go without running on the
 * worker (see there). */
typedef void (*tern_worker_fn)(tern_server *srv, unsigned worker, void *uv_loop,
                               void *user);

/* The number of workers (settings `workers`, 0 resolved to the CPU
 * count) from tern_server_new() on; 0 for NULL. Any thread. */
TERN_EXTERN unsigned tern_server_workers(const tern_server *srv);

/* Run `on_start` on each worker's thread before its loop first runs (for
 * tern_attach: inside tern_attach), and `on_stop` on each worker as its
 * graceful stop begins (tern_stop), before tern closes connections: the
 * place to open and to close per-worker state on the loop, such as one
 * database connection per worker. Either may be NULL; `user` goes to
 * both. Configuration: before tern_run() or tern_attach(), else
 * TERN_ESTATE (logged); a later call replaces both. TERN_EINVAL for
 * srv NULL. */
TERN_EXTERN int tern_server_on_workers(tern_server *srv,
                                       tern_worker_fn on_start,
                                       tern_worker_fn on_stop, void *user);

/* The index of the worker that owns the request (0 to
 * tern_server_workers() - 1), from any thread; TERN_EINVAL for NULL. For
 * per-worker state kept in an array. */
TERN_EXTERN int tern_request_worker(const tern_request *r);

/* The owning worker's `uv_loop_t *`, only on that worker's thread (the
 * handler, or any callback that runs on the worker). NULL, with a log
 * line, from any other thread (a TERN_ROUTE_BLOCKING handler's, a
 * thread of the user's) and after the worker's loop has ended; NULL for
 * r NULL. Valid while the request is held; the loop itself outlives it
 * until the worker ends. */
TERN_EXTERN void *tern_request_loop(const tern_request *r);

/* The same for a WebSocket: the worker index (any thread; TERN_EINVAL
 * for NULL) and the loop (only on the owning worker, else NULL with a
 * log line). Valid while the handle is (see Lifetime under WebSocket). */
TERN_EXTERN int tern_ws_worker(const tern_ws *ws);
TERN_EXTERN void *tern_ws_loop(const tern_ws *ws);

/* Run `fn` on worker `worker` (an index), from any thread, the worker's
 * own included (then later, from its loop, not inside this call). Calls
 * to one worker run in the order they were posted, in order with the
 * response calls posted to it. Returns 0 once taken: `fn` then runs
 * exactly once, on the worker with its loop, or, when the worker's loop
 * ends first (the stop deadline passed), with `uv_loop` NULL on whichever
 * thread lets it go, so that it can free `user`. Errors (`fn` never
 * runs): TERN_EINVAL (srv or fn NULL, or no such worker; logged),
 * TERN_ESTATE (the server is not running yet; logged), TERN_ECLOSED (the
 * worker no longer takes calls: the stop deadline passed, or the server
 * has stopped), TERN_ENOMEM. */
TERN_EXTERN int tern_worker_call(tern_server *srv, unsigned worker,
                                 tern_worker_fn fn, void *user);

/* ---------------------------------------------------------------------
 * Answers tern makes itself
 * ------------------------------------------------------------------ */

/* What the error hook is told about an answer tern makes by itself: 400
 * (malformed request, bad WebSocket handshake), 404, 405, 413, 414, 429
 * (a client address past its request rate; Retry-After is kept unless
 * the hook sets its own), 431,
 * 501 (unsupported HTTP/2 :protocol), 503 (out of memory or threads) and
 * HTTP/2's 408 for a collected body that stalled (body_timeout_ms); not
 * the head timeout's 408 (no request exists yet), the 408 answered for a
 * handler reading a stalled HTTP/2 body, nor
 * tern_ws_accept's 426. tern fills this in; fields may be added at the
 * end in later versions, so never copy or allocate one. */
typedef struct tern_error_reply tern_error_reply;
typedef struct {
  int status;         /* the status tern answers with */
  const char *reason; /* its reason phrase, a static C string */
  const char *allow;  /* 405: the Allow value (`allow_len` bytes), else NULL */
  size_t allow_len;
  /* The request, read-only (the request accessors work on it), or NULL
   * when its head did not parse: HTTP/1.1's 400, 414 and 431 for a bad or
   * oversized head have no request. On HTTP/2 a 431's request holds only
   * the fields that arrived before the limit was reached. */
  const tern_request *request;
  tern_error_reply *reply; /* for tern_error_respond() */
} tern_error_info;

/* The error hook: runs on the connection's worker (so on several worker
 * threads at once), synchronously, just before tern sends such an
 * answer. It may call tern_error_respond() to send its own
 * headers and body instead of tern's "404 Not Found\n" text; if it does
 * not, tern's text goes out. It must not block, and must call nothing
 * else on the request (the response calls included). `e` and what it
 * points to are valid only during the call. */
typedef void (*tern_error_fn)(const tern_error_info *e, void *user);

/* Install the error hook (`fn` NULL removes it). Call before tern_run or
 * tern_attach. Errors: TERN_EINVAL (srv NULL), TERN_ESTATE (running). */
TERN_EXTERN int tern_server_on_error(tern_server *srv, tern_error_fn fn,
                                     void *user);

/* From inside the error hook only: answer with `headers` and `body`
 * (`len` bytes, copied) instead of tern's text. The status stays the one
 * tern chose; tern adds Date, Content-Length and Connection as for any
 * response (a connection tern closes after the answer still closes), and
 * on a 405 the Allow header unless `headers` has one. Errors:
 * TERN_EINVAL (bad fields, as for tern_respond; nothing was sent and the
 * hook may try again), TERN_ESTATE (already called for this answer).
 * TERN_ECLOSED and TERN_ENOMEM mean the answer could not be sent; the
 * request is finished either way and tern sends nothing else. */
TERN_EXTERN int tern_error_respond(tern_error_reply *reply,
                                   const tern_header *headers, size_t nheaders,
                                   const void *body, size_t len);

/* ---------------------------------------------------------------------
 * The response hook: fields on every answer
 * ------------------------------------------------------------------ */

/* The head of one answer about to be sent, as the response hook sees it:
 * the answer's own fields and those the hook adds. Valid only during the
 * hook's call. */
typedef struct tern_response_head tern_response_head;

/* The response hook: runs on the connection's worker (so on several
 * worker threads at once), synchronously, just before the head of every
 * final answer is produced, on every protocol: the handlers' (from any
 * thread: when the call is applied on the worker), the static handler's
 * and the compressed ones, the error hook's, tern's own (400, 404, 405,
 * 413, 503, ...), the stop deadline's, and a WebSocket handshake's 101 or
 * 200. Not for 1xx interim answers, nor for the head timeout's 408 (no
 * request exists yet). It is the place for fields every answer needs:
 * CORS, HSTS, Content-Security-Policy, a request ID.
 *
 * `r` is the request, read-only (its accessors work on it), or NULL when
 * its head did not parse; `status` the answer's status. The hook may add
 * fields with tern_response_head_add() and read those already there with
 * tern_response_head_get(). It must not block, and must not call the
 * response functions on `r` (they are refused with TERN_ESTATE while it
 * runs, and logged). Fields tern sets itself (Date, Content-Length,
 * Transfer-Encoding, Connection) are ignored when added, as for any
 * response. A server without a hook pays nothing for it. */
typedef void (*tern_response_fn)(const tern_request *r, int status,
                                 tern_response_head *head, void *user);

/* Install the response hook (`fn` NULL removes it). Call before tern_run
 * or tern_attach. Errors: TERN_EINVAL (srv NULL), TERN_ESTATE (running). */
TERN_EXTERN int tern_server_on_response(tern_server *srv, tern_response_fn fn,
                                        void *user);

/* From inside the response hook only: add one field to the answer, after
 * its own (name and value are copied). Errors: TERN_EINVAL (head NULL, a
 * name that is not a token, a value with CR, LF or NUL, or called after
 * the hook returned), TERN_ENOMEM (the hook already added 32 fields, or
 * 4096 bytes of names and values, to this answer: this one is not added,
 * and logged). */
TERN_EXTERN int tern_response_head_add(tern_response_head *head,
                                       const char *name, size_t name_len,
                                       const char *value, size_t value_len);

/* From inside the response hook only: the value of the first field named
 * `name` (`name_len` bytes, any case) among the answer's own and those
 * added so far, with its length in *value_len (if not NULL); NULL when
 * there is none. Not NUL-terminated. */
TERN_EXTERN const char *tern_response_head_get(const tern_response_head *head,
                                               const char *name,
                                               size_t name_len,
                                               size_t *value_len);

/* ---------------------------------------------------------------------
 * Responses
 *
 * tern adds Date, Content-Length or Transfer-Encoding, and Connection; a
 * caller's header of those names is ignored (but for a 304's
 * Content-Length, see tern_respond). Header names must be tokens
 * and values must not contain CR, LF or NUL (TERN_EINVAL otherwise, before
 * anything is sent). Names and values are copied before the call returns.
 *
 * Any thread may call these functions; from a thread other than the
 * owning worker the call is posted to that worker, in order, and returns
 * at once (a copied body is copied first; a referenced one must stay
 * valid until released).
 *
 * Finishing: tern_respond(), tern_respond_ref() and tern_response_end()
 * finish the request: after they return anything but TERN_EINVAL or
 * TERN_ESTATE the request must not be used again. tern_response_start()
 * and tern_response_write() never finish it: after an error from them,
 * still call tern_response_end().
 *
 * TERN_ECLOSED means the client has gone away (or the stop deadline cut
 * the request); nothing more will be sent. A call that returns an error
 * never calls the callbacks it was given and leaves ownership of
 * referenced memory with the caller.
 *
 * Order is checked when the call is made, on whichever thread, with the
 * request's state kept in atomics: a second tern_respond(), a start after
 * a start, a write or end before start, or any call after the finishing
 * one returns TERN_ESTATE at once, changes nothing and logs an error line
 * (through the server's log callback). That holds for every such call
 * made while the request is alive; a call after the finishing call has
 * returned success and the worker has retired the request reads freed
 * memory, like any use after free, unless the caller holds a reference
 * (tern_request_ref below). What only the worker can see (a
 * posted write past the declared Content-Length, no memory on the
 * worker) closes the connection and is logged. If a finishing call from
 * another thread cannot allocate its message, the connection is closed
 * and the call reports TERN_ENOMEM.
 * ------------------------------------------------------------------ */

/* Keep the handle `r` valid past its finishing call, until the matching
 * tern_request_unref(): take a reference before handing a request to
 * another thread that may still call on it when another part of the
 * program (a second thread, a callback on the worker) finishes it. Any
 * thread, while the caller holds the request (before its finishing call,
 * or through a reference of its own). A reference keeps the handle, not
 * the request's data: once finished, the response calls on it return
 * TERN_ESTATE (logged), or TERN_ECLOSED when the stop deadline cut it;
 * tern_request_read, _pause, _resume and _on_gone return TERN_ESTATE;
 * tern_request_peer and _local TERN_ECLOSED; the accessors of the head,
 * fields, parameters and body find nothing (NULL, 0), though the data
 * they returned before the finish must not be used after it, as without
 * a reference; tern_request_data still answers. A reference does not
 * replace the finishing call, which must still be made exactly once.
 * The block goes back to the worker when the worker is done with the
 * request and the last reference has gone. tern_request_unref() without
 * a reference taken is refused (logged) while the request lives. */
TERN_EXTERN void tern_request_ref(tern_request *r);
TERN_EXTERN void tern_request_unref(tern_request *r);

/* Release callback for caller-owned memory handed to tern. */
typedef void (*tern_release_fn)(void *data, void *user);

/* Respond in one call; `body` (`len` bytes, may be NULL when 0) is copied
 * before the call returns. `status` is the final status, 200..999: a 1xx
 * is TERN_EINVAL in every final call (tern_respond, tern_respond_ref,
 * tern_response_start), from any thread, since it is never an answer
 * (see tern_respond_interim). No body is sent for HEAD, 204 and 304, and
 * no Content-Length for 204 and 304 (a HEAD answer announces the body's);
 * a 304 keeps a Content-Length field given by the caller (HTTP/1.1),
 * which describes the representation (RFC 9110 8.6). */
TERN_EXTERN int tern_respond(tern_request *r, int status,
                             const tern_header *headers, size_t nheaders,
                             const void *body, size_t len);

/* Respond with a body the caller owns: tern references it until it has
 * been written (or the request is dropped), then calls release(body,
 * user) on the owning worker. `release` may be NULL for static data. On
 * error, release is not called and the caller keeps ownership. */
TERN_EXTERN int tern_respond_ref(tern_request *r, int status,
                                 const tern_header *headers, size_t nheaders,
                                 const void *body, size_t len,
                                 tern_release_fn release, void *user);

/* Start a streamed response. `content_length` is the body length, or -1
 * when unknown (HTTP/1.1 then uses chunked encoding; HTTP/1.0 closes the
 * connection at the end). */
TERN_EXTERN int tern_response_start(tern_request *r, int status,
                                    const tern_header *headers, size_t nheaders,
                                    int64_t content_length);

/* Send an interim (1xx) response ahead of the final one, for example 103
 * Early Hints with Link fields (RFC 8297), so that the client can start
 * fetching while the handler works. It is never the answer: one of the
 * finishing calls above must still follow. `status` is 102..199 except
 * 101 (TERN_EINVAL otherwise): 100 Continue is tern's, sent when a body
 * announced with Expect: 100-continue is read, and 101 belongs to
 * upgrades (tern_ws_accept). The fields follow the rules above; tern adds
 * none (no Date, no framing). May be called several times, from any
 * thread (posted, in order with the other response calls), until the
 * final response starts: after that it is TERN_ESTATE on the owning
 * worker, and a posted one that arrives too late is dropped. Clients of
 * HTTP/1.0, which has no interim responses, are sent nothing and the call
 * returns 0. Errors: TERN_EINVAL, TERN_ESTATE, TERN_ECLOSED, TERN_ENOMEM
 * (the connection is closed). The request is not finished by any of
 * them. */
TERN_EXTERN int tern_respond_interim(tern_request *r, int status,
                                     const tern_header *headers,
                                     size_t nheaders);

/* Write completion: status 0 when written to the socket (over TLS:
 * encrypted into it; HTTP/2: framed into it; HTTP/3: acknowledged by the
 * client), TERN_ECLOSED when the client went away first. Runs on the
 * owning worker. */
typedef void (*tern_write_fn)(tern_request *r, int status, void *user);

/* Write a piece of a streamed response. `data` is referenced, not copied,
 * until `done` runs; with `done` NULL it is copied now. Writing more than
 * the declared Content-Length is TERN_EINVAL. A piece that cannot be
 * queued for lack of memory (TERN_ENOMEM) aborts the response: the client
 * sees the connection close (HTTP/1.1) or the stream reset (HTTP/2,
 * HTTP/3), never a response that ends cleanly with a piece missing; call
 * tern_response_end all the same. So does a tern_response_start that
 * failed for lack of memory, once tern_response_end is called. */
TERN_EXTERN int tern_response_write(tern_request *r, const void *data,
                                    size_t len, tern_write_fn done, void *user);

/* Write a piece the caller owns, like tern_respond_ref: tern references
 * it until it has been written or dropped, then calls release(data, user)
 * on the owning worker, with the pointer written: one release function
 * serves pieces of any origin (a pool's blocks, a mapped file's pages).
 * `release` NULL copies the piece now, as tern_response_write does. On an
 * error return release is not called and the piece stays the caller's;
 * from another thread the call returns once posted, and release runs
 * later however the write went (TERN_ECLOSED for a client gone is not an
 * error of the call). Errors as tern_response_write's. */
TERN_EXTERN int tern_response_write_ref(tern_request *r, const void *data,
                                        size_t len, tern_release_fn release,
                                        void *user);

/* Finish a streamed response, with trailers where the protocol carries
 * them (chunked HTTP/1.1, HTTP/2, HTTP/3; ignored otherwise). */
TERN_EXTERN int tern_response_end(tern_request *r, const tern_header *trailers,
                                  size_t ntrailers);

/* Close the connection after this response (HTTP/1.0 and HTTP/1.1: the
 * answer carries Connection: close, and requests pipelined behind it are
 * dropped, as when the client asks for the close); HTTP/2 and HTTP/3,
 * whose connections carry other streams, ignore it. A Connection field
 * given to the response calls is ignored, so this is how a handler (or
 * a binding whose application sent `connection: close`) asks for it.
 * From the owning worker, before the response starts. Errors:
 * TERN_EINVAL (r NULL), TERN_ESTATE (another thread, or the response has
 * started; nothing changes). */
TERN_EXTERN int tern_request_close_after(tern_request *r);

/* Finish the request by cutting its response short, started or not, so
 * that the client can never take what it got for a whole answer (a
 * handler that failed half way through a streamed body): HTTP/1.1 closes
 * the connection at once (bytes queued and not yet written may be lost
 * with it), HTTP/2 and HTTP/3 reset the stream (INTERNAL_ERROR). A finishing
 * call, from any thread (posted from others, in order with the response calls).
 * Returns 0, TERN_ECLOSED (the client was gone already; the request is finished
 * all the same), TERN_ESTATE (already finished; logged), TERN_EINVAL. */
TERN_EXTERN int tern_response_abort(tern_request *r);

/* ---------------------------------------------------------------------
 * Serving files (docs/static.md)
 *
 * A tern_static serves the files under one root directory: mount it on a
 * route prefix (tern_static_mount) or call tern_static_handler from a GET
 * route whose pattern ends in "*" (the wildcard is the file's path below
 * the root). It answers GET and HEAD with:
 * - the path percent-decoded once and normalised; "..", NUL, backslashes,
 *   control bytes and (unless TERN_STATIC_HIDDEN) segments starting with
 *   '.' refused (400, or 404 for hidden files); files reached through a
 *   symbolic link that leaves the root refused (403; openat2 with
 *   RESOLVE_BENEATH, or a check of the opened file's real path where the
 *   kernel lacks openat2);
 * - a directory: its index file (`index`), after a 301 to the path with a
 *   trailing '/' when it lacked one; 404 without an index (no listings);
 * - Content-Type from a built-in table by extension, a strong ETag (inode,
 *   size, modification time in ns, and the coding) and Last-Modified;
 * - If-Match, If-Unmodified-Since (412), If-None-Match, If-Modified-Since
 *   (304) in RFC 9110's order; Range with one range (206 and
 *   Content-Range), several (multipart/byteranges; overlapping ones
 *   merged), suffix ranges, 416 (with a Content-Range giving the size)
 *   when none is satisfiable; If-Range by strong ETag or exact date;
 * - Cache-Control from the options; with TERN_STATIC_PRECOMPRESSED, a
 *   sibling FILE.br, FILE.zst or FILE.gz chosen by Accept-Encoding's
 *   q-values (ties: br, zstd, gzip) with Content-Encoding, and
 *   Vary: Accept-Encoding on every answer;
 * - the options' extra fields (`headers`) on every answer made from a
 *   file (200, 206, 304, 412, 416), and with `fallback` a file served in
 *   place of any path that does not exist (a single-page application's
 *   index.html: try-files), with its own ETag and conditional answers;
 * - its refusals (400, 403, 404, 414, 503) made as tern's own answers:
 *   through the error hook (tern_server_on_error) when one is installed,
 *   else "404 Not Found\n" as text/plain.
 * Files of any size (64-bit offsets). Opening and stat run on libuv's
 * thread pool. Over plain HTTP/1.1 (no TLS, no pipelined response ahead)
 * a file larger than one block goes from the page cache to the socket
 * with sendfile(2) on the worker, while the socket takes it and up to 2
 * MiB at a time; when the socket is full, the next block is read and
 * written the usual way, and sendfile resumes once it drained. sendfile
 * reads on the worker: a file that is not in the page cache makes the
 * worker wait for the disk, so set TERN_STATIC_NO_SENDFILE for a root on
 * slow or network storage. Everywhere else (TLS, HTTP/2, HTTP/3) the
 * body is read block by block into a block of the worker's pool, one
 * block per response held at a time, the next read only once the
 * previous block was written: on the worker where the page cache holds
 * the block (preadv2 with RWF_NOWAIT, which never waits for the disk),
 * on the pool where it does not. A file truncated while it is served
 * ends the response early (the connection is closed on HTTP/1.1, the
 * stream reset on HTTP/2 and HTTP/3), never with wrong bytes under the
 * full length.
 * ------------------------------------------------------------------ */

typedef struct tern_static tern_static;

enum {
  TERN_STATIC_HIDDEN = 1u << 0,        /* serve names starting with '.' */
  TERN_STATIC_PRECOMPRESSED = 1u << 1, /* serve .br/.zst/.gz siblings */
  TERN_STATIC_NO_SENDFILE = 1u << 2,   /* never sendfile(2): see above */
};

#define TERN_STATIC_OPTIONS_VERSION 2

/* Versions (see ABI above), each ending with the field named: 1 with
 * block_size, 2 with fallback. */
typedef struct {
  int version;               /* TERN_STATIC_OPTIONS_VERSION */
  uint32_t size;             /* sizeof(tern_static_options) */
  const char *root;          /* the directory served (C string, required) */
  const char *index;         /* index file name; NULL or "": none */
  const char *cache_control; /* Cache-Control value, or NULL for none */
  unsigned flags;            /* TERN_STATIC_* */
  uint32_t block_size;       /* read block in bytes (4 KiB..16 MiB; 0:
                                256 KiB) */
  /* Version 2. Up to 16 fields added to every answer made from a file
   * (copied; names tokens, values without CR, LF or NUL): security
   * headers, CORS. */
  const tern_header *headers;
  size_t nheaders;
  /* A file below the root (C string, e.g. "index.html"; NULL: none)
   * served, with 200 and its own validators, for a GET or HEAD of a
   * path that does not exist (not for a refused or forbidden one). */
  const char *fallback;
} tern_static_options;

/* Fill `o` with defaults (index "index.html", no Cache-Control, no flags,
 * 256 KiB blocks), its version and its size. */
TERN_EXTERN void tern_static_options_init_size(tern_static_options *o,
                                               size_t size);
TERN__INIT_BY_SIZE(tern_static_options, tern_static_options_init)

/* Create a file server for `o->root` (opened now; the strings of `o` are
 * copied), its memory from `srv`'s allocator (it may serve other servers
 * too, and is freed after all of them). Errors: TERN_EINVAL (srv, o or out
 * NULL, a version or size the ABI rule refuses, no root, an unknown
 * flag, an index name with '/', a Cache-Control value with CR or LF, a
 * block_size outside 4 KiB to 16 MiB; logged), TERN_EIO (the root
 * cannot be opened as a directory; logged), TERN_ENOMEM. */
TERN_EXTERN int tern_static_new(tern_server *srv, const tern_static_options *o,
                                tern_static **out);

/* Free `st`: only after every server using it has been freed. NULL is a
 * no-op. */
TERN_EXTERN void tern_static_free(tern_static *st);

/* A tern_handler that serves `user` (a tern_static *): the request's "*"
 * wildcard, or its whole path when the route has none, is the file's
 * path. Register it for GET on a route without TERN_ROUTE_BLOCKING. */
TERN_EXTERN void tern_static_handler(tern_request *r, void *user);

/* Route GET (and so HEAD) `prefix` + "*" to `st` ("/static" and
 * "/static/" both serve /static/FILE). Errors: those of tern_route, and
 * TERN_EINVAL for a prefix not starting with '/'. */
TERN_EXTERN int tern_static_mount(tern_server *srv, const char *prefix,
                                  tern_static *st);

/* ---------------------------------------------------------------------
 * Server-Sent Events (docs/sse.md)
 *
 * An event stream (the WHATWG HTML standard's text/event-stream, what a
 * browser's EventSource reads) on a streamed response, over HTTP/1.1
 * (chunked), HTTP/2 and HTTP/3. tern_sse_start answers 200 with
 * Content-Type: text/event-stream and Cache-Control: no-cache and keeps
 * the request open; tern_sse_send frames an event (id, event type, data
 * over as many lines as it has) and queues it. tern keeps the stream
 * alive with a comment line after `heartbeat_ms` without an event,
 * closes a client that has more than `high_water` bytes waiting (too
 * slow: its EventSource reconnects and asks for what it missed with
 * Last-Event-ID), and ends every stream when the graceful stop begins.
 *
 * Threads: a stream is its worker's. tern_sse_start (from the handler),
 * tern_sse_send and tern_sse_close are called on that worker (else
 * TERN_ESTATE, logged); another thread publishes through a hub, or posts
 * with tern_worker_call. A hub (tern_sse_hub_new) is a set of streams on
 * every worker: tern_sse_publish, from any thread, frames the event once
 * and has each worker write it to its own subscribers, without a lock.
 *
 * Lifetime: a tern_sse is valid from tern_sse_start until its on_close
 * callback returns (on the worker; it may run inside tern_sse_send or
 * tern_sse_publish's delivery when the client turns out gone or too
 * slow). on_close may close other streams; its own stream's sends and
 * close return TERN_ECLOSED from then on. The request is tern's from
 * tern_sse_start on: do not call the response functions on it. Do not start a
 * stream on a route that compresses its responses: the compressor would hold
 * the events back.
 * ------------------------------------------------------------------ */

typedef struct tern_sse tern_sse;
typedef struct tern_sse_hub tern_sse_hub;

/* Why a stream ended (on_close's `why`). */
enum {
  TERN_SSE_CLIENT_GONE = 1, /* the client went away (or could not be
                               written to) */
  TERN_SSE_TOO_SLOW = 2,    /* more than high_water bytes were waiting */
  TERN_SSE_CLOSED = 3,      /* tern_sse_close */
  TERN_SSE_STOPPING = 4,    /* the server's graceful stop began */
};

typedef void (*tern_sse_close_fn)(tern_sse *s, int why, void *user);

#define TERN_SSE_OPTIONS_VERSION 1

/* Versions (see ABI above), each ending with the field named: 1 with
 * user. */
typedef struct {
  int version;                /* TERN_SSE_OPTIONS_VERSION */
  uint32_t size;              /* sizeof(tern_sse_options) */
  uint32_t retry_ms;          /* sent first as "retry:", the client's delay
                                 before it reconnects; 0: none sent */
  uint32_t heartbeat_ms;      /* a comment line after this long without
                                 anything sent, checked once a second (0:
                                 none; else at least 1000; default 15000) */
  uint32_t high_water;        /* bytes the client may have waiting before it
                                 is closed as too slow (0: 1 MiB, the
                                 default) */
  tern_sse_hub *hub;          /* a hub of the same server to join, or NULL */
  tern_sse_close_fn on_close; /* the stream ended (may be NULL) */
  void *user;                 /* for on_close */
} tern_sse_options;

/* Fill `o` with the defaults above, its version and its size. */
TERN_EXTERN void tern_sse_options_init_size(tern_sse_options *o, size_t size);
TERN__INIT_BY_SIZE(tern_sse_options, tern_sse_options_init)

/* Answer `r` with an event stream (`o` NULL: the defaults) and set *out.
 * Errors: TERN_EINVAL (r or out NULL, bad options, a hub of another
 * server; logged), TERN_ESTATE (not on the request's worker, or a
 * response was already started; logged), TERN_ENOMEM (nothing sent: the
 * handler still answers), TERN_ECLOSED (the head went out but there is
 * no stream: a HEAD request, the server is stopping, or the client left;
 * the request is finished). */
TERN_EXTERN int tern_sse_start(tern_request *r, const tern_sse_options *o,
                               tern_sse **out);

/* Send one event: `id` (a C string or NULL; what the client's
 * Last-Event-ID names after a reconnect), `event` (its type, a C string
 * or NULL for "message"), and `data` (`len` bytes; each line a data
 * field, CR LF, CR and LF all ending a line, read back joined by LF). On
 * the stream's worker. Errors: TERN_EINVAL (an id or event with CR or
 * LF), TERN_ESTATE (another thread), TERN_ETOOBIG (the client was too
 * slow) and TERN_ECLOSED (gone): for these two the stream has ended and
 * on_close has run; TERN_ENOMEM (not sent, the stream goes on). */
TERN_EXTERN int tern_sse_send(tern_sse *s, const char *id, const char *event,
                              const char *data, size_t len);

/* End the stream (on_close runs with TERN_SSE_CLOSED, then the response
 * ends). On the stream's worker; TERN_ESTATE from another thread. */
TERN_EXTERN int tern_sse_close(tern_sse *s);

/* The client's Last-Event-ID (`*len` bytes, not NUL-terminated), or NULL
 * when it sent none: after a reconnect, the id of the last event it
 * saw. */
TERN_EXTERN const char *tern_sse_last_event_id(const tern_sse *s, size_t *len);

/* The stream's request, to read (its accessors); NULL for NULL. */
TERN_EXTERN tern_request *tern_sse_request(const tern_sse *s);

/* A hub for `srv`'s streams, from tern_server_new on. Errors:
 * TERN_EINVAL, TERN_ENOMEM. */
TERN_EXTERN int tern_sse_hub_new(tern_server *srv, tern_sse_hub **out);

/* Free a hub once its server has stopped (every stream has ended then).
 * NULL is a no-op. */
TERN_EXTERN void tern_sse_hub_free(tern_sse_hub *h);

/* Send one event (as tern_sse_send) to every subscriber of `h`, from any
 * thread: framed once here, then written by each worker to its own
 * subscribers in the order published (a client too slow or gone on the
 * way is closed, as by tern_sse_send). A stream that joins while an
 * event is on its way may or may not get it. Errors: TERN_EINVAL (h
 * NULL, an id or event with CR or LF), TERN_ENOMEM. */
TERN_EXTERN int tern_sse_publish(tern_sse_hub *h, const char *id,
                                 const char *event, const char *data,
                                 size_t len);

/* The streams in `h` now, on every worker (any thread). */
TERN_EXTERN size_t tern_sse_hub_subscribers(const tern_sse_hub *h);

/* Frame one event as tern_sse_send does into `out` (`cap` bytes,
 * NUL-terminated), sans-I/O: for an event stream of one's own. *len is
 * set to the event's length (without the NUL) also when `cap` is too
 * small (TERN_ETOOBIG; `out` may be NULL to ask for the size). Errors:
 * TERN_EINVAL (len NULL, data NULL with len > 0, an id or event with CR
 * or LF), TERN_ETOOBIG. */
TERN_EXTERN int tern_sse_format(char *out, size_t cap, size_t *len,
                                const char *id, const char *event,
                                const char *data, size_t data_len);

/* ---------------------------------------------------------------------
 * WebSocket (RFC 6455 over HTTP/1.1 Upgrade, RFC 8441 over HTTP/2, RFC
 * 9220 over HTTP/3)
 *
 * A route accepts WebSocket by calling tern_ws_accept() from its handler
 * (on the owning worker; not from a TERN_ROUTE_BLOCKING route). Register
 * the route for GET: an HTTP/2 or HTTP/3 extended CONNECT with :protocol
 * websocket is routed as GET, so one route serves every carrier. tern
 * validates the handshake, answers it (101 on HTTP/1.1, 200 on HTTP/2 and
 * HTTP/3), negotiates permessage-deflate (RFC 7692) and from then on
 * speaks frames: the callbacks below receive whole messages (or pieces,
 * see stream_messages), and tern_ws_send() and friends send them.
 *
 * tern enforces the protocol: masked client frames, control frame rules,
 * fragmentation order, UTF-8 in text messages and close reasons, close
 * codes, the per-message size limit (close code 1009) and the inflated
 * size of compressed messages. A violation is answered with a close frame
 * carrying 1002, 1007 or 1009, after which the connection (HTTP/1.1) or
 * stream (HTTP/2) ends; on_close reports that code. Pings are answered
 * with pongs automatically; pongs are ignored.
 *
 * Threads: the callbacks run on the owning worker. tern_ws_send*,
 * tern_ws_ping, tern_ws_close and tern_ws_broadcast may be called from any
 * thread; from another thread the call is posted to the worker in order
 * (its data copied first) and returns 0 unless the socket is known to be
 * closed already.
 *
 * Lifetime: a tern_ws handle is valid from tern_ws_accept() until its
 * on_close callback returns. tern_ws_ref() keeps the handle itself valid
 * beyond that (calls then return TERN_ECLOSED) until the matching
 * tern_ws_unref(): take a reference before handing the socket to another
 * thread.
 *
 * Backpressure: tern_ws_buffered() tells how many bytes are queued for the
 * client and not yet written. Past `high_water` bytes either reading
 * pauses (TERN_WS_PAUSE_READING, the default: no more messages are read
 * from this client until the queue drains below half the mark, so an echo
 * or request/response protocol cannot grow memory without bound) or sends
 * fail with TERN_ETOOBIG and queue nothing (TERN_WS_FAIL_SEND). on_drain
 * runs once the queue drops below half the mark after either happened.
 * ------------------------------------------------------------------ */

/* Message types. */
enum {
  TERN_WS_TEXT = 1,   /* UTF-8 text */
  TERN_WS_BINARY = 2, /* bytes */
};

/* What to do when more than high_water bytes are queued for sending. */
enum {
  TERN_WS_PAUSE_READING = 0, /* stop reading from the client */
  TERN_WS_FAIL_SEND = 1,     /* refuse sends with TERN_ETOOBIG */
};

/* The socket is open: the handshake answer is queued and sending works.
 * Runs inside tern_ws_accept(), before it returns. */
typedef void (*tern_ws_open_fn)(tern_ws *ws, void *user);

/* A message (type TERN_WS_TEXT or TERN_WS_BINARY). `data` is valid only
 * during the call. Whole messages (the default) arrive in one call with
 * fin = 1. With stream_messages set, a message arrives in pieces as its
 * bytes come in; the last piece has fin = 1 (and may be empty). Text is
 * validated as UTF-8 before it is delivered; a piece may end inside a
 * multi-byte character when streaming. */
typedef void (*tern_ws_message_fn)(tern_ws *ws, int type, const char *data,
                                   size_t len, int fin, void *user);

/* The socket closed: `code` is the client's close code (1005 when its
 * close frame had none), the code tern sent for a protocol error (1002,
 * 1007, 1009), 1001 for a server shutting down, or 1006 when the
 * connection went away without a close handshake. `reason` is the close
 * frame's reason (UTF-8, `len` bytes, valid during the call). Called
 * exactly once; afterwards the handle is invalid (see tern_ws_ref). Never
 * called from inside a tern_ws_* call: a socket that ends during one (a
 * send that cannot queue its frame: TERN_ENOMEM, close code 1011) refuses
 * later calls with TERN_ECLOSED at once and gets on_close from the
 * worker's loop after the call has returned, so a caller may hold a lock
 * across tern_ws_send or tern_ws_broadcast that on_close takes. */
typedef void (*tern_ws_close_fn)(tern_ws *ws, int code, const char *reason,
                                 size_t len, void *user);

/* The send queue dropped below half of high_water after it had been over
 * it: reading has resumed (TERN_WS_PAUSE_READING) or sends succeed again
 * (TERN_WS_FAIL_SEND). */
typedef void (*tern_ws_drain_fn)(tern_ws *ws, void *user);

#define TERN_WS_OPTIONS_VERSION 2

/* Options for tern_ws_accept(). Initialise with tern_ws_options_init().
 * Versions (see ABI above), each ending with the field named: 1 with
 * subprotocol_len, 2 with deflate_level. */
typedef struct {
  int version;                   /* TERN_WS_OPTIONS_VERSION */
  uint32_t size;                 /* sizeof(tern_ws_options) */
  tern_ws_open_fn on_open;       /* may be NULL */
  tern_ws_message_fn on_message; /* may be NULL: messages are dropped */
  tern_ws_close_fn on_close;     /* may be NULL */
  tern_ws_drain_fn on_drain;     /* may be NULL */
  uint64_t max_message_size;     /* per message, after inflation (16 MiB):
                                    larger ones are closed with 1009 */
  size_t high_water;             /* send queue mark in bytes (1 MiB) */
  int on_full;                   /* TERN_WS_PAUSE_READING */
  int stream_messages;           /* 1: deliver pieces as they arrive (0) */
  int deflate;                   /* accept permessage-deflate (1) */
  int deflate_window_bits;       /* 9-15 (15); memory: see docs/websocket.md */
  int deflate_mem_level;         /* zlib memLevel 1-9 (8) */
  uint32_t close_timeout_ms;     /* wait for the client's close (5000) */
  /* Subprotocol to answer with (Sec-WebSocket-Protocol), or NULL. Pick it
   * from the client's offers with tern_ws_protocol_offered(). */
  const char *subprotocol;
  size_t subprotocol_len;
  /* zlib compression level for messages sent, 0-9 (1: fastest; a socket
   * echoing 128-byte messages spends about a quarter less CPU than at
   * zlib's default 6, for a slightly lower ratio). Version 2. */
  int deflate_level;
} tern_ws_options;

/* Fill `o` with the defaults above, its version and its size. */
TERN_EXTERN void tern_ws_options_init_size(tern_ws_options *o, size_t size);
TERN__INIT_BY_SIZE(tern_ws_options, tern_ws_options_init)

/* Is `r` a WebSocket handshake (HTTP/1.1 Upgrade: websocket or an HTTP/2
 * or HTTP/3 extended CONNECT)? Only looks; tern_ws_accept() validates. 1
 * or 0. */
TERN_EXTERN int tern_ws_is_upgrade(const tern_request *r);

/* Did the client offer subprotocol `name` (`len` bytes) in
 * Sec-WebSocket-Protocol? 1 or 0. */
TERN_EXTERN int tern_ws_protocol_offered(const tern_request *r,
                                         const char *name, size_t len);

/* Accept the request as a WebSocket. `opts` may be NULL for the defaults;
 * `user` goes to every callback. On success the handshake answer is
 * queued, on_open has run, *out (if not NULL) holds the handle, and the
 * request is finished: it must not be used again. Errors:
 * - TERN_EHANDSHAKE: not a valid handshake, or one its connection cannot
 *   honour (HTTP/1.1 with Connection: close, or behind a request whose
 *   body is still arriving; 503 while the server stops); tern answered
 *   400 (or 426 with Sec-WebSocket-Version: 13 for a version other than
 *   13, or that 503) and the request is finished.
 * - TERN_EINVAL (bad options, or a version or size refused by the ABI
 *   rule; logged), TERN_ESTATE (not on the owning worker, or a
 *   response was started): nothing happened, respond as usual.
 * - TERN_ECLOSED, TERN_ENOMEM: the request is finished (the connection is
 *   closed). */
TERN_EXTERN int tern_ws_accept(tern_request *r, const tern_ws_options *opts,
                               void *user, tern_ws **out);

/* Send a whole message: `type` TERN_WS_TEXT (must be UTF-8) or
 * TERN_WS_BINARY; `data` is copied (or compressed) before the call
 * returns. Errors: TERN_EINVAL (bad type, text not UTF-8, a fragmented
 * send in progress), TERN_ECLOSED (closed or closing), TERN_ETOOBIG
 * (TERN_WS_FAIL_SEND and the queue is over high_water), TERN_ENOMEM (the
 * socket is closed). */
TERN_EXTERN int tern_ws_send(tern_ws *ws, int type, const void *data,
                             size_t len);

/* Send a message in pieces: `type` on every piece of one message, fin = 1
 * on the last. No other message may be sent until it is finished (control
 * frames may). Text pieces may split UTF-8 characters; the whole must be
 * valid. Errors as tern_ws_send(). */
TERN_EXTERN int tern_ws_send_fragment(tern_ws *ws, int type, const void *data,
                                      size_t len, int fin);

/* Send a ping with up to 125 bytes of payload (TERN_EINVAL beyond). */
TERN_EXTERN int tern_ws_ping(tern_ws *ws, const void *data, size_t len);

/* Start the close handshake: send a close frame with `code` (1000-1003,
 * 1007-1011 or 3000-4999; 0 for none) and `reason` (UTF-8, cut to 123
 * bytes). Messages that arrive later are dropped; on_close runs when the
 * client's close frame arrives, or after close_timeout_ms with 1006.
 * Errors: TERN_EINVAL (bad code or reason), TERN_ECLOSED. */
TERN_EXTERN int tern_ws_close(tern_ws *ws, int code, const char *reason,
                              size_t len);

/* Send one message to many sockets: the frame is built once and shared
 * (uncompressed, which permessage-deflate allows) rather than copied per
 * socket. NULL entries, sockets that are closed, or refuse
 * (TERN_WS_FAIL_SEND over the mark), are skipped. Any thread. Returns how
 * many sockets took it (>= 0) or TERN_EINVAL / TERN_ENOMEM. */
TERN_EXTERN int tern_ws_broadcast(tern_ws *const *list, size_t n, int type,
                                  const void *data, size_t len);

/* Bytes queued for this client and not yet written, sends that other
 * threads have posted and the worker has not yet queued included
 * (approximate from a thread other than the owner's). */
TERN_EXTERN size_t tern_ws_buffered(const tern_ws *ws);

/* Stop and restart reading messages from the client: while paused no
 * on_message runs (messages already read in the same batch still arrive)
 * and flow control pushes back on the client. Any thread (posted from
 * others). Errors: TERN_ECLOSED. */
TERN_EXTERN int tern_ws_pause(tern_ws *ws);
TERN_EXTERN int tern_ws_resume(tern_ws *ws);

/* The carrier: TERN_PROTO_HTTP11, TERN_PROTO_HTTP2 or TERN_PROTO_HTTP3. */
TERN_EXTERN int tern_ws_protocol(const tern_ws *ws);

/* Per-socket user pointer (initially NULL). */
TERN_EXTERN void tern_ws_set_data(tern_ws *ws, void *data);
TERN_EXTERN void *tern_ws_data(const tern_ws *ws);

/* Keep the handle valid past on_close (see Lifetime above). Any thread. */
TERN_EXTERN void tern_ws_ref(tern_ws *ws);
TERN_EXTERN void tern_ws_unref(tern_ws *ws);

/* ---------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------ */

#define TERN_STATS_VERSION 6

/* Version 3's arrays: by protocol (index TERN_STATS_H1 for HTTP/1.0 and
 * 1.1, TERN_STATS_H2, TERN_STATS_H3), by status class (index 0: no
 * status was sent, 1 to 5: 1xx to 5xx), and the request duration
 * histogram's buckets, whose upper bounds (inclusive, in nanoseconds)
 * tern_stats_bucket_le() gives; the last bucket has no bound (+Inf). */
enum {
  TERN_STATS_H1 = 0,
  TERN_STATS_H2 = 1,
  TERN_STATS_H3 = 2,
  TERN_STATS_PROTOCOLS = 3,
  TERN_STATS_CLASSES = 6,
  TERN_STATS_BUCKETS = 16,
};

/* Server counters, filled by tern_server_stats(). Initialise with
 * tern_stats_init() (or set version and size); a call leaves both valid
 * for the next. Versions (see ABI above), each ending with the field
 * named: 1 with frees, 2 with quic_refused, 3 with access_log_dropped, 4
 * with reallocations, 5 with rejected_ip_rate, 6 with loop_lag_ns.
 * allocations - frees is the
 * number of blocks tern holds from the allocator now. */
typedef struct {
  int version;          /* TERN_STATS_VERSION */
  uint32_t size;        /* sizeof(tern_stats) */
  uint64_t requests;    /* responses finished */
  uint64_t connections; /* accepted (or handed in by another worker) */
  uint64_t active_connections;
  uint64_t bytes_in;
  uint64_t bytes_out;
  uint64_t allocations;     /* new blocks: malloc, realloc of NULL */
  uint64_t bytes_allocated; /* bytes asked for by those calls and by
                               reallocations */
  uint64_t frees;
  /* Version 2: QUIC datagrams tern answered or moved without a
   * connection of their own on the worker that read them. */
  uint64_t quic_forwarded; /* handed to the worker owning their connection
                              (a client that moved to a new address) */
  uint64_t quic_retries;   /* Retry packets sent (address validation) */
  uint64_t quic_resets;    /* stateless resets sent (unknown CIDs) */
  uint64_t quic_version_negotiations; /* for unsupported versions */
  uint64_t quic_refused;              /* first Initials refused (stopping,
                                         max_connections, a bad token) */
  /* Version 3: operations (docs/operations.md). A request counts once,
   * when it is finished (its last byte written, or aborted), under the
   * protocol it was answered on and the class of the status sent;
   * WebSocket sessions count as the request that opened them. */
  uint64_t requests_by_class[TERN_STATS_PROTOCOLS][TERN_STATS_CLASSES];
  uint64_t requests_aborted[TERN_STATS_PROTOCOLS];  /* not completely
                                                        written */
  uint64_t request_bytes_in[TERN_STATS_PROTOCOLS];  /* body bytes */
  uint64_t request_bytes_out[TERN_STATS_PROTOCOLS]; /* body bytes */
  /* From the head received to the last byte written (or the abort);
   * kept only while tern_server_time_requests is on (else 0). */
  uint64_t duration_buckets[TERN_STATS_PROTOCOLS][TERN_STATS_BUCKETS];
  uint64_t duration_sum_ns[TERN_STATS_PROTOCOLS];
  uint64_t open_connections[TERN_STATS_PROTOCOLS]; /* by the protocol they
                                                      speak now */
  uint64_t open_streams[TERN_STATS_PROTOCOLS];     /* requests in flight */
  uint64_t tls_handshakes_full;    /* completed, new session (TCP, QUIC) */
  uint64_t tls_handshakes_resumed; /* completed, resumed (GnuTLS only:
                                      mbedTLS ones count as full) */
  uint64_t tls_handshakes_failed;  /* TCP: a handshake error; QUIC: a
                                      connection gone before it finished */
  uint64_t ws_open;                /* WebSocket sessions open now */
  uint64_t ws_messages_in;         /* whole messages received */
  uint64_t ws_messages_out;        /* messages sent (tern_ws_send calls
                                      and each broadcast recipient) */
  uint64_t rejected_limit;         /* answered 413, 414 or 431 by tern */
  uint64_t rejected_timeout;       /* 408, or a connection closed by a head,
                                      body or write timeout */
  uint64_t rejected_protocol;      /* answered 400 by tern (malformed) */
  uint64_t access_log_lines;       /* lines the built-in writer queued */
  uint64_t access_log_dropped;     /* lines dropped: its queue was full */
  /* Version 4. */
  uint64_t reallocations; /* blocks resized by realloc (a resize is not
                             an allocation: it leaves the count of blocks
                             held as it was) */
  /* Version 5: the limits per client address (tern_settings). */
  uint64_t rejected_ip_connections; /* connections closed at accept */
  uint64_t rejected_ip_rate;        /* requests answered 429 */
  /* Version 6: how load spreads over the workers. */
  uint64_t connections_handed_in; /* accepted by another worker and handed
                                     to this one (TERN_BALANCE_
                                     LEAST_CONNECTIONS); counted in
                                     `connections` too */
  uint64_t loop_lag_ns; /* the longest a worker's loop was busy without
                           polling (its handlers, parsing, writing: how
                           long a new event could wait) over the last one
                           to two seconds, in whole milliseconds; for the
                           server, the worst worker's */
} tern_stats;

/* The upper bound in nanoseconds of duration bucket `i` (0 ..
 * TERN_STATS_BUCKETS - 1): 50 us, 100 us, 250 us, 500 us, 1 ms, 2.5 ms,
 * 5 ms, 10 ms, 25 ms, 50 ms, 100 ms, 250 ms, 500 ms, 1 s, 5 s, and
 * UINT64_MAX for the last (+Inf). Buckets are not cumulative: each counts
 * the durations above the previous bound, so they sum to the requests
 * finished. 0 for an `i` out of range. */
TERN_EXTERN uint64_t tern_stats_bucket_le(unsigned i);

/* Zero `st` and set its version and size. */
TERN_EXTERN void tern_stats_init_size(tern_stats *st, size_t size);
TERN__INIT_BY_SIZE(tern_stats, tern_stats_init)

/* Sum the workers' counters into *out (any thread, any time; the figures
 * of a running server are a consistent-enough snapshot, not atomic).
 * `out` must carry version and size (tern_stats_init). Only the fields of
 * out->version are written, nothing past them; a version newer than the
 * library's gets the library's fields, and out->version is set to the
 * library's so the caller knows which were filled. Returns 0, or
 * TERN_EINVAL (srv or out NULL; a version below 1, or a size smaller than
 * the version's layout, logged), writing nothing. */
TERN_EXTERN int tern_server_stats(const tern_server *srv, tern_stats *out);

/* The same for worker `worker` (0 to tern_server_workers() - 1) alone:
 * the connections it took in (accepted, or handed to it by another
 * worker: connections_handed_in) and holds open, the requests it
 * answered, its bytes, streams and rejections, and its loop's lag, to see
 * how load spreads over the workers (tern_settings.balance). The
 * server-wide figures (allocations, frees, reallocations,
 * the limits per client address) are 0 here. TERN_EINVAL also for a
 * worker out of range. */
TERN_EXTERN int tern_server_worker_stats(const tern_server *srv,
                                         unsigned worker, tern_stats *out);

/* Keep the request duration histogram (tern_stats.duration_buckets and
 * duration_sum_ns, tern_request_duration_seconds): it costs a read of the
 * monotonic clock at each request's head and end (shared by the requests
 * of one loop turn, so under load much less). Off by default; the other
 * counters are always kept. Call before tern_run or tern_attach. Errors:
 * TERN_EINVAL (srv NULL), TERN_ESTATE (running). */
TERN_EXTERN int tern_server_time_requests(tern_server *srv, int on);

/* A route handler that answers with the server's counters in the
 * Prometheus text exposition format 0.0.4 (tern_server_stats version 3,
 * summed over the workers when called; names begin with "tern_", each
 * with HELP and TYPE lines, counters end in _total, the duration
 * histogram has _bucket{le=...}, _sum and _count in seconds). Mount it
 * yourself, e.g. tern_route(srv, "GET", "/metrics",
 * tern_metrics_handler, NULL); `user` is unused. The worker formats the
 * text into a buffer from the allocator (freed when written). */
TERN_EXTERN void tern_metrics_handler(tern_request *r, void *user);

/* ---------------------------------------------------------------------
 * Access log
 * ------------------------------------------------------------------ */

enum {
  TERN_ACCESS_ABORTED = 1u << 0,   /* the response was not completely
                                      written: the client went away, the
                                      stream was reset, the connection or
                                      the answer failed */
  TERN_ACCESS_SELF = 1u << 1,      /* tern answered itself (404, 405, 413,
                                      431, 408, 400, ...), no handler ran */
  TERN_ACCESS_WEBSOCKET = 1u << 2, /* a WebSocket session (logged when it
                                      closes) */
  TERN_ACCESS_EARLY = 1u << 3,     /* the head came in 0-RTT */
  TERN_ACCESS_NO_REQUEST = 1u << 4 /* no request head parsed (HTTP/1.1's
                                      408 for a partial head): method and
                                      target are empty */
};

/* One finished request, as the access hook sees it. tern fills it in on
 * the stack of the worker: it and everything it points to are valid only
 * during the call. Fields are only ever added at the end; `size` is
 * sizeof the struct the library was built with, so a binding reads a
 * field only when `size` covers it. */
typedef struct {
  uint32_t size;
  int protocol;       /* TERN_PROTO_* */
  int status;         /* the status sent; 0 when none was (aborted before
                         an answer); 101 (HTTP/1.1) or 200 for WebSocket */
  unsigned flags;     /* TERN_ACCESS_* */
  int tls_version;    /* TERN_TLS_1_2, TERN_TLS_1_3, or 0 without TLS */
  const char *method; /* `method_len` bytes; "" when no head parsed */
  size_t method_len;
  const char *target; /* the request-target as sent (":path") */
  size_t target_len;
  const char *authority; /* Host or :authority; NULL when absent */
  size_t authority_len;
  const char *referer; /* NULL when absent */
  size_t referer_len;
  const char *user_agent; /* NULL when absent */
  size_t user_agent_len;
  const char *peer; /* the client's address as text (NUL-terminated) */
  int peer_port;
  uint64_t bytes_in;  /* request body bytes received (WebSocket: every
                         byte of the session from the client) */
  uint64_t bytes_out; /* response body bytes handed to the protocol
                         (WebSocket: frames sent) */
  /* Wall-clock time when the head was received, microseconds since the
   * Unix epoch; then monotonic offsets from it in nanoseconds, -1 for a
   * step never reached: the handler called, the response head produced
   * (first byte queued), the last byte written (or the abort). */
  int64_t start_unix_us;
  int64_t handler_ns, first_byte_ns, last_byte_ns;
  void *data; /* tern_request_set_data's pointer, or NULL */
} tern_access_entry;

/* The access hook: called exactly once per finished request on every
 * protocol, on the request's worker (so on several workers at once), after
 * its last byte was written or it was aborted. It must not block and may
 * not call anything on the request: it has finished. */
typedef void (*tern_access_fn)(const tern_access_entry *e, void *user);

/* Install the access hook (`fn` NULL removes it; it replaces the
 * built-in writer of tern_server_access_log). Call before tern_run or
 * tern_attach. Errors: TERN_EINVAL (srv NULL), TERN_ESTATE (running). */
TERN_EXTERN int tern_server_on_access(tern_server *srv, tern_access_fn fn,
                                      void *user);

#define TERN_ACCESS_LOG_OPTIONS_VERSION 1

enum {
  TERN_ACCESS_LOG_JSON = 0,     /* one JSON object per line */
  TERN_ACCESS_LOG_COMBINED = 1, /* Apache/nginx "combined" */
};

/* The built-in writer's options (versioned as the ABI rule at the top
 * says; version 1 ends with queue_buffers). */
typedef struct {
  int version;      /* TERN_ACCESS_LOG_OPTIONS_VERSION */
  uint32_t size;    /* sizeof(tern_access_log_options) */
  const char *path; /* the file, opened for appending (created 0644) */
  int format;       /* TERN_ACCESS_LOG_JSON (default) or _COMBINED */
  /* Each worker formats lines into a buffer of buffer_size bytes (default
   * 64 KiB, at least 1 KiB; a longer line is cut) and hands it to the
   * writer thread when full or at the worker's next tick; queue_buffers
   * buffers exist from the start (default 4 per worker, at least workers
   * + 1). When none is free (a disk that stalls, a burst), up to 8 times
   * as many are allocated and kept, so that a stall of a second or so
   * loses no line; past that, lines are dropped and counted
   * (tern_stats.access_log_dropped), never waited for. */
  uint32_t buffer_size;
  uint32_t queue_buffers;
} tern_access_log_options;

/* Fill `o` with the defaults above, its version and its size. */
TERN_EXTERN void tern_access_log_options_init_size(tern_access_log_options *o,
                                                   size_t size);
TERN__INIT_BY_SIZE(tern_access_log_options, tern_access_log_options_init)

/* Log every finished request to a file through the built-in writer: the
 * worker formats the line into its buffer (no allocation, no lock per
 * line) and a thread of tern's own does the file I/O. Replaces an access
 * hook. Call before tern_run or tern_attach; the file is opened now (its
 * path is copied) and closed by tern_server_free. Errors: TERN_EINVAL
 * (bad options), TERN_ESTATE (running or already set), TERN_EIO (the
 * file cannot be opened; logged), TERN_ENOMEM. */
TERN_EXTERN int tern_server_access_log(tern_server *srv,
                                       const tern_access_log_options *o);

/* Reopen the built-in writer's file by its path (after log rotation
 * renamed it): lines queued from now on go to the new file (the writer
 * thread opens it before it writes them; the call does not wait for
 * that). Any thread;
 * not from a signal handler (set a flag there and call this from a
 * thread). Errors: TERN_EINVAL (srv NULL), TERN_ESTATE (no built-in
 * writer). A file that cannot be opened is logged and the old one kept. */
TERN_EXTERN int tern_server_access_log_reopen(tern_server *srv);

#ifdef __cplusplus
}
#endif
#endif
