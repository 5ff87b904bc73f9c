/* What every libFuzzer target here shares: the check that traps (a
 * finding, its input kept by libFuzzer) and the entry point's
 * declaration. */
#ifndef TERN_TEST_FUZZ_H
#define TERN_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The contract `e` is broken: say where, then trap. */
#define CHECK(e)                                                               \
  do {                                                                         \
    if (!(e)) {                                                                \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #e);    \
      __builtin_trap();                                                        \
    }                                                                          \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
