/* libFuzzer target for the ClientHello ticket finder (lib/tls/hello.c),
 * which the GnuTLS engine runs on every ClientHello while a previous
 * ticket key is set. The target traps when it breaks its contract
 * (hello.h): a ticket found is non-empty and lies inside the input, and
 * the answer does not depend on bytes past the input (the same bytes in
 * a larger buffer give the same ticket).
 *
 * Build: clang -g -fsanitize=fuzzer,address,undefined -Ilib -Iinclude
 *        lib/tls/hello.c test/fuzz/fuzz_hello.c
 */
#include "tls/hello.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *t = NULL, *t2 = NULL;
  size_t len = 0, len2 = 0;
  uint8_t *big;
  int rc = tern__tls_hello_ticket(data, size, &t, &len);

  if (rc == 0) {
    CHECK(t != NULL && len > 0);
    CHECK(t >= data && len <= size && (size_t)(t - data) <= size - len);
  } else {
    CHECK(rc == -1);
  }
  big = malloc(size + 64);
  if (big == NULL)
    return 0;
  memcpy(big, data, size);
  memset(big + size, 0xff, 64);
  CHECK(tern__tls_hello_ticket(big, size, &t2, &len2) == rc);
  if (rc == 0)
    CHECK(len2 == len && t2 - big == t - data);
  free(big);
  return 0;
}
