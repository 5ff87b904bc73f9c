/* The base of every internal header: the public API, the router, the
 * sanitizer switch, the forward declarations and the intrusive list. */
#ifndef TERN_CORE_BASE_H
#define TERN_CORE_BASE_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "tern.h"
#include "core/router.h"

#if defined(__SANITIZE_ADDRESS__)
#define TERN__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TERN__ASAN 1
#endif
#endif

#define TERN__CONTAINER_OF(p, type, field)                                     \
  ((type *)(void *)((char *)(p)-offsetof(type, field)))

typedef struct tern__worker tern__worker;
typedef struct tern__conn tern__conn;
typedef struct tern__proto tern__proto;
typedef struct tern__req_ops tern__req_ops;
typedef struct tern__filter tern__filter;

/* ---- Intrusive doubly linked list -------------------------------- */

typedef struct tern__list {
  struct tern__list *prev, *next;
} tern__list;

static inline void tern__list_init(tern__list *l) {
  l->prev = l->next = l;
}
static inline int tern__list_empty(const tern__list *l) {
  return l->next == l;
}
static inline int tern__list_linked(const tern__list *n) {
  return n->next != NULL && n->next != n;
}
static inline void tern__list_append(tern__list *l, tern__list *n) {
  n->prev = l->prev;
  n->next = l;
  l->prev->next = n;
  l->prev = n;
}
static inline void tern__list_remove(tern__list *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->prev = n->next = n;
}

#endif
