/* A throwaway self-signed P-256 certificate for localhost (CN and
 * subjectAltName), for the fuzz targets alone: fuzz_conn's TLS ports and
 * fuzz_quic's QUIC listeners. Made with openssl req -x509 -days 36500. */
#ifndef TERN_FUZZ_CERT_H
#define TERN_FUZZ_CERT_H

static const char fuzz_cert[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBljCCATugAwIBAgIUaOZMo27KIChrD4ZoM+1aomeX8eEwCgYIKoZIzj0EAwIw\n"
    "FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwMTIxMzQwNVoYDzIxMjYxMTA3\n"
    "MjEzNDA1WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO\n"
    "PQMBBwNCAATvlCKn6E7g2o8/0Rqw/Z/TMeQwQ58Wb5JBFy62a8peGZ/49f0ddhUj\n"
    "iv5nY+Ply4yRKqYe8iaOOSN+NZgmTE5Io2kwZzAdBgNVHQ4EFgQUDL4Sq/HgnTBn\n"
    "XrLqTTr+OZwPLKEwHwYDVR0jBBgwFoAUDL4Sq/HgnTBnXrLqTTr+OZwPLKEwDwYD\n"
    "VR0TAQH/BAUwAwEB/zAUBgNVHREEDTALgglsb2NhbGhvc3QwCgYIKoZIzj0EAwID\n"
    "SQAwRgIhAO+Yj+PYxfkj9hfa3sTAyFhc6d0JsVK7Rxfb6orTwby9AiEA3KDJqRVF\n"
    "mfdWurC3VTvt8n6C1L1fAagDL/8rM0j1dF8=\n"
    "-----END CERTIFICATE-----\n";
static const char fuzz_key[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgogsQHsjI+x1zaClG\n"
    "J5SgGB9fNtmwOdSOmGnCVvBT5DihRANCAATvlCKn6E7g2o8/0Rqw/Z/TMeQwQ58W\n"
    "b5JBFy62a8peGZ/49f0ddhUjiv5nY+Ply4yRKqYe8iaOOSN+NZgmTE5I\n"
    "-----END PRIVATE KEY-----\n";

#endif
