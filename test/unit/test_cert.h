/* An ECDSA P-256 certificate for "localhost" (self-signed, valid until
 * 2126) and its key, made once with openssl req -x509 -newkey ec: for the
 * unit tests that need a TLS set (test_tls_alloc.c, test_abi.c). */
#ifndef TERN_TEST_CERT_H
#define TERN_TEST_CERT_H

static const char cert_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkzCCATqgAwIBAgITamonVJJklx6yVDlD37n8EPvrBzAKBggqhkjOPQQDAjAU\n"
    "MRIwEAYDVQQDDAlsb2NhbGhvc3QwIBcNMjYxMjAyMDMxOTI2WhgPMjEyNjExMDgw\n"
    "MzE5MjZaMBQxEjAQBgNVBAMMCWxvY2FsaG9zdDBZMBMGByqGSM49AgEGCCqGSM49\n"
    "AwEHA0IABGZ+OjLpjD5rHy5583EhErrtR9kSJGg1AnFNJD6Fu77o4BHYgGMlb/0D\n"
    "X+PX+jSrOsCwGZAvopk4Ds1rTJW0ZLWjaTBnMB0GA1UdDgQWBBRy3YYEdZKOeQF7\n"
    "KIJVmXcGKmtXdzAfBgNVHSMEGDAWgBRy3YYEdZKOeQF7KIJVmXcGKmtXdzAPBgNV\n"
    "HRMBAf8EBTADAQH/MBQGA1UdEQQNMAuCCWxvY2FsaG9zdDAKBggqhkjOPQQDAgNH\n"
    "ADBEAiA/cum553DklMcm1qJcnZ2aqjuMsZ7oxJWfvaT3bfiz+QIgKrLl+KfNs59U\n"
    "dxA96lTXSr1zOB+Qz49W7xBUCaryQVo=\n"
    "-----END CERTIFICATE-----\n";

static const char key_pem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgov1D2TlwChwI9JoB\n"
    "NJb3jBgnOS2OrXafySoX7tuERHahRANCAARmfjoy6Yw+ax8uefNxIRK67UfZEiRo\n"
    "NQJxTSQ+hbu+6OAR2IBjJW/9A1/j1/o0qzrAsBmQL6KZOA7Na0yVtGS1\n"
    "-----END PRIVATE KEY-----\n";

#endif
