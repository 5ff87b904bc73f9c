/* A counting allocator for tern_settings.allocator in unit tests: it
 * tracks live blocks (to prove every allocation is returned) and can be
 * told to fail the Nth call (to prove failures are handled cleanly). */
#ifndef TERN_TEST_COUNT_ALLOC_H
#define TERN_TEST_COUNT_ALLOC_H

#include <stdatomic.h>
#include <stdlib.h>

#include "tern.h"

static _Atomic long ca_live;  /* blocks allocated and not yet freed */
static _Atomic long ca_calls; /* calls counted while ca_fail_at >= 0 */
static _Atomic long ca_fail_at = -1;

static int ca_should_fail(void) {
  return ca_fail_at >= 0 && ca_calls++ == ca_fail_at;
}

static void *ca_malloc(size_t n, void *u) {
  (void)u;
  if (ca_should_fail())
    return NULL;
  ca_live++;
  return malloc(n);
}

static void *ca_realloc(void *p, size_t n, void *u) {
  (void)u;
  if (ca_should_fail())
    return NULL;
  if (p == NULL)
    ca_live++;
  return realloc(p, n);
}

static void ca_free(void *p, void *u) {
  (void)u;
  if (p != NULL)
    ca_live--;
  free(p);
}

/* Point a settings struct at the counting allocator. */
static void ca_use(tern_settings *s) {
  s->allocator.malloc = ca_malloc;
  s->allocator.realloc = ca_realloc;
  s->allocator.free = ca_free;
}

#endif
