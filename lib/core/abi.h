/* Versioned public structs: reading and writing them by the caller's
 * version (lib/core/server.c). */
#ifndef TERN_CORE_ABI_H
#define TERN_CORE_ABI_H

#include "core/base.h"

/* ---- Versioned public structs (lib/core/server.c) ----------------- */

/* The end of field `f` of struct `t`: where a struct version that ends
 * with `f` ends, its minimum size. */
#define TERN__END(t, f) (offsetof(t, f) + sizeof(((t *)0)->f))

/* Read a struct the caller laid out after an older, the same or a newer
 * header (tern.h's ABI rule). `dst` holds the library's defaults and is
 * `dst_size` bytes; `ends[v - 1]` is where version v ends, for the
 * `nversions` versions this library knows. On success the caller's
 * fields of its version replace the defaults, dst's version and size
 * become the library's, and 0 is returned. Otherwise `dst` is untouched,
 * `why` (`why_len` bytes) says what is wrong, and -1 is returned. Every
 * such struct starts with `int version; uint32_t size;`. */
/* An _init for the caller's struct of `size` bytes (its sizeof): `def`
 * holds the library's defaults, version and size aside; the caller gets
 * the newest version that fits in `size` (its fields, that version and
 * `size`), nothing written past `size`. Smaller than version 1: left as
 * it is. */
void tern__abi_init(void *dst, size_t size, void *def, const size_t *ends,
                    int nversions);
/* tern_quic_options' version ends, shared by server.c's _init and
 * lib/quic/listen.c. */
extern const size_t tern__quic_options_ends[];
int tern__abi_read(void *dst, size_t dst_size, const void *src,
                   const size_t *ends, int nversions, char *why,
                   size_t why_len);
/* Write the library's filled-in struct `src` (its version's head is
 * overwritten) into the caller's `dst`, only up to where the caller's
 * version ends, or all of ours for a newer caller; dst's version becomes
 * the one written, its size stays. Returns 0, or -1 with `why` filled and
 * `dst` untouched for a version below 1 or a size too small for it. */
int tern__abi_write(void *dst, void *src, const size_t *ends, int nversions,
                    char *why, size_t why_len);

#endif
