/* allocshim: an LD_PRELOAD library that counts a process's heap
 * allocations, for the benchmarks' allocations-per-request figures.
 *
 *   LD_PRELOAD=build/perf/alloc/liballocshim.so \
 *   TERN_ALLOCSHIM_DIR=/some/dir  server ...
 *   kill -s RTMIN+4 PID      ->  /some/dir/PID.txt: allocs=N bytes=N frees=N
 *
 * Counted: malloc, calloc, realloc and reallocarray when they allocate (a
 * new size above 0, or any successful call on NULL), posix_memalign,
 * aligned_alloc, memalign, valloc and pvalloc; bytes is the sum of the
 * sizes asked for. frees counts free of a non-NULL pointer and realloc to
 * size 0. A realloc that moves a block is one allocation and no free, as
 * tern's own counter has it, so allocs - frees is not the live count.
 * Everything is forwarded to the next definition (libc's, normally),
 * found with dlsym(RTLD_NEXT).
 *
 * The counters are cumulative. On SIGRTMIN+4 the shim writes them to
 * $TERN_ALLOCSHIM_DIR/<pid>.txt, replacing the file atomically (written
 * to <pid>.tmp, then renamed), so a reader that sees the file sees a whole
 * line. The handler is installed when the library loads, only if
 * TERN_ALLOCSHIM_DIR is set; a program that later installs its own
 * handler for that signal silences the shim. Take figures as the
 * difference between two signals around the measured work.
 *
 * Several processes: a child made by fork() starts its counters at zero
 * (the parent's history stays with the parent), and each process writes
 * its own <pid>.txt. For a server of several processes (nginx: master and
 * worker) the driver signals every process and sums the files, and the
 * sum counts each allocation once.
 *
 * The signal interrupts whatever the process is doing. With SA_RESTART
 * most blocking calls resume, but some return early regardless (sleeps,
 * epoll_wait with EINTR): servers retry those, but a server whose
 * handler sleeps (the reference server's /block and /defer) may answer
 * sooner.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ---- Counters ------------------------------------------------------------
 * Relaxed: they are statistics read at a signal, and ordering between them
 * does not matter; lock-free on the targets we run on, so reading them in a
 * signal handler is safe. */
static atomic_ullong n_allocs, n_bytes, n_frees;

static void count_alloc(size_t size) {
  atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&n_bytes, size, memory_order_relaxed);
}

static void count_free(void) {
  atomic_fetch_add_explicit(&n_frees, 1, memory_order_relaxed);
}

/* ---- Bootstrap arena -----------------------------------------------------
 * dlsym() may allocate (glibc's dlerror state uses calloc) before the real
 * functions are known. Those few early requests are served from this
 * arena; free() ignores its pointers, and realloc() moves them out. Each
 * block has a 16-byte header holding its size, for realloc. */
#define ARENA_SIZE (64 * 1024)
#define ARENA_HDR 16

static _Alignas(64) unsigned char arena[ARENA_SIZE];
static atomic_size_t arena_used;

static int in_arena(const void *p) {
  uintptr_t u = (uintptr_t)p, a = (uintptr_t)arena;
  return u >= a && u < a + ARENA_SIZE;
}

static void *arena_alloc(size_t size, size_t align) {
  size_t old, start, end;
  if (align < ARENA_HDR)
    align = ARENA_HDR;
  old = atomic_load_explicit(&arena_used, memory_order_relaxed);
  do {
    start = (old + ARENA_HDR + align - 1) & ~(align - 1);
    if (size > ARENA_SIZE || start + size > ARENA_SIZE)
      return NULL; /* a dlsym that needs 64 KiB is not one we know */
    end = start + size;
  } while (!atomic_compare_exchange_weak_explicit(
      &arena_used, &old, end, memory_order_relaxed, memory_order_relaxed));
  memcpy(arena + start - ARENA_HDR, &size, sizeof(size));
  return arena + start;
}

static size_t arena_size(const void *p) {
  size_t size;
  memcpy(&size, (const unsigned char *)p - ARENA_HDR, sizeof(size));
  return size;
}

/* ---- The real functions ---- */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);

/* A message on stderr from places where stdio may not be usable. */
static void say(const char *msg) {
  size_t n = strlen(msg);
  if (write(2, msg, n) < 0)
    return; /* nowhere left to report it */
}

/* 0: not resolved, 1: resolving (allocations go to the arena), 2: done. */
static atomic_int state;

/* dlsym returns an object pointer; ISO C has no cast from that to a
 * function pointer, but copying the bytes is what POSIX implies. */
static void lookup(void *fn_ptr, size_t size, const char *name) {
  void *sym = dlsym(RTLD_NEXT, name);
  if (sym != NULL)
    memcpy(fn_ptr, &sym, size);
}
#define LOOKUP(var, name) lookup(&(var), sizeof(var), name)

static int resolve(void) {
  int expect = 0;
  if (atomic_load_explicit(&state, memory_order_acquire) == 2)
    return 1;
  if (!atomic_compare_exchange_strong(&state, &expect, 1))
    return 0; /* being resolved: by this thread (dlsym) or, rarely,
                 another, which the arena serves meanwhile */
  LOOKUP(real_malloc, "malloc");
  LOOKUP(real_calloc, "calloc");
  LOOKUP(real_realloc, "realloc");
  LOOKUP(real_free, "free");
  LOOKUP(real_posix_memalign, "posix_memalign");
  LOOKUP(real_aligned_alloc, "aligned_alloc");
  LOOKUP(real_memalign, "memalign");
  LOOKUP(real_valloc, "valloc");
  LOOKUP(real_pvalloc, "pvalloc");
  if (real_malloc == NULL || real_calloc == NULL || real_realloc == NULL ||
      real_free == NULL) {
    say("allocshim: no malloc to forward to\n");
    abort();
  }
  atomic_store_explicit(&state, 2, memory_order_release);
  return 1;
}

static int ready(void) {
  return atomic_load_explicit(&state, memory_order_acquire) == 2 || resolve();
}

/* ---- The interposed functions ---- */

EXPORT void *malloc(size_t size) {
  void *p;
  if (!ready())
    return arena_alloc(size, 16);
  p = real_malloc(size);
  if (p != NULL)
    count_alloc(size);
  return p;
}

EXPORT void *calloc(size_t n, size_t size) {
  void *p;
  if (!ready()) {
    if (size != 0 && n > SIZE_MAX / size)
      return NULL;
    return arena_alloc(n * size, 16); /* static: already zero */
  }
  p = real_calloc(n, size);
  if (p != NULL)
    count_alloc(n * size);
  return p;
}

EXPORT void free(void *p) {
  if (p == NULL || in_arena(p))
    return;
  count_free();
  real_free(p);
}

EXPORT void *realloc(void *p, size_t size) {
  void *q;
  if (p != NULL && in_arena(p)) {
    size_t old = arena_size(p);
    q = malloc(size); /* counts it, unless still bootstrapping */
    if (q != NULL)
      memcpy(q, p, old < size ? old : size);
    return q;
  }
  if (!ready())
    return p == NULL ? arena_alloc(size, 16) : NULL;
  q = real_realloc(p, size);
  if (p != NULL && size == 0)
    count_free(); /* glibc frees and returns NULL */
  else if (q != NULL)
    count_alloc(size);
  return q;
}

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, n * size);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
  int rc;
  if (!ready()) {
    *out = arena_alloc(size, align);
    return *out ? 0 : ENOMEM;
  }
  if (real_posix_memalign == NULL)
    return ENOMEM; /* this libc has none */
  rc = real_posix_memalign(out, align, size);
  if (rc == 0)
    count_alloc(size);
  return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t size) {
  void *p;
  if (!ready())
    return arena_alloc(size, align);
  if (real_aligned_alloc == NULL)
    return NULL; /* this libc has none */
  p = real_aligned_alloc(align, size);
  if (p != NULL)
    count_alloc(size);
  return p;
}

EXPORT void *memalign(size_t align, size_t size) {
  void *p;
  if (!ready())
    return arena_alloc(size, align);
  if (real_memalign == NULL)
    return NULL; /* this libc has none */
  p = real_memalign(align, size);
  if (p != NULL)
    count_alloc(size);
  return p;
}

EXPORT void *valloc(size_t size) {
  void *p;
  if (!ready())
    return arena_alloc(size, 4096);
  if (real_valloc == NULL)
    return NULL; /* this libc has none */
  p = real_valloc(size);
  if (p != NULL)
    count_alloc(size);
  return p;
}

EXPORT void *pvalloc(size_t size) {
  void *p;
  if (!ready())
    return arena_alloc(size, 4096);
  if (real_pvalloc == NULL)
    return NULL; /* this libc has none */
  p = real_pvalloc(size);
  if (p != NULL)
    count_alloc(size);
  return p;
}

/* ---- The report ---- */

static char dir[PATH_MAX - 32]; /* room for "/<pid>.tmp" */
static size_t dir_len;

/* Decimal digits of v at out; returns the length. Async-signal-safe. */
static size_t put_num(char *out, unsigned long long v) {
  char tmp[24];
  size_t n = 0, i;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0);
  for (i = 0; i < n; i++)
    out[i] = tmp[n - 1 - i];
  return n;
}

static size_t put_str(char *out, const char *s) {
  size_t n = strlen(s);
  memcpy(out, s, n);
  return n;
}

/* Only async-signal-safe calls: getpid, open, write, close, rename; errno
 * is saved, as the interrupted code may be about to read it. */
static void on_signal(int sig) {
  char tmp[sizeof(dir) + 32], path[sizeof(dir) + 32], line[96];
  size_t n, len = 0, done = 0;
  int saved = errno, fd;
  (void)sig;
  memcpy(path, dir, dir_len);
  n = dir_len;
  path[n++] = '/';
  n += put_num(path + n, (unsigned long long)getpid());
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".tmp", 5);
  memcpy(path + n, ".txt", 5);

  len += put_str(line + len, "allocs=");
  len += put_num(line + len,
                 atomic_load_explicit(&n_allocs, memory_order_relaxed));
  len += put_str(line + len, " bytes=");
  len +=
      put_num(line + len, atomic_load_explicit(&n_bytes, memory_order_relaxed));
  len += put_str(line + len, " frees=");
  len +=
      put_num(line + len, atomic_load_explicit(&n_frees, memory_order_relaxed));
  line[len++] = '\n';

  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    while (done < len) {
      ssize_t w = write(fd, line + done, len - done);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        break;
      done += (size_t)w;
    }
    close(fd);
    if (done == len)
      rename(tmp, path);
  }
  errno = saved;
}

/* A forked child is a new process for the counts: without this, the sum
 * over a master and its workers would count the master's allocations made
 * before the fork once per process. */
static void on_fork_child(void) {
  atomic_store_explicit(&n_allocs, 0, memory_order_relaxed);
  atomic_store_explicit(&n_bytes, 0, memory_order_relaxed);
  atomic_store_explicit(&n_frees, 0, memory_order_relaxed);
}

__attribute__((constructor)) static void allocshim_init(void) {
  const char *d;
  struct sigaction sa;
  resolve();
  d = getenv("TERN_ALLOCSHIM_DIR");
  if (d == NULL || d[0] == '\0')
    return;
  dir_len = strlen(d);
  if (dir_len >= sizeof(dir)) {
    say("allocshim: TERN_ALLOCSHIM_DIR too long\n");
    dir_len = 0;
    return;
  }
  memcpy(dir, d, dir_len);
  pthread_atfork(NULL, NULL, on_fork_child);
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGRTMIN + 4, &sa, NULL);
}
