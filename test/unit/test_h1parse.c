/* Unit tests for the HTTP/1.1 request parser (lib/http1/parse.c).
 *
 * Every rejection is checked against its exact result code, because the
 * code decides the status the client gets and a 400 where a 501 or 505
 * belongs is a bug too.
 */
#include "http1/parse.h"
#include "core/text.h"

#include <stdio.h>
#include <string.h>

#include "t.h"

static tern__h1_field F[64];
static tern__h1_head H;
static const tern__h1_limits LIM = {8192, 64, 1024};

/* Parse a head of n bytes into H with `cap` field slots. */
static int parse_n(const char *s, size_t n, const tern__h1_limits *lim,
                   size_t cap) {
  memset(&H, 0, sizeof H);
  H.fields = F;
  H.nfields = cap;
  return tern__h1_parse_head(s, n, &H, lim);
}

/* String literals only: sizeof keeps embedded NULs in the input. */
#define PARSE(s) parse_n((s), sizeof(s) - 1, &LIM, 64)
#define OK(s) T_EQ_INT(PARSE(s), (int)(sizeof(s) - 1))
#define BAD(s, code) T_EQ_INT(PARSE(s), code)

#define RL11 "GET / HTTP/1.1\r\n"
#define HOST "Host: a\r\n"

static size_t head_end_whole(const char *s, size_t n) {
  size_t sc = 0;
  return tern__h1_head_end(s, n, &sc);
}

/* ------------------------------------------------------------------ */
/* Request line                                                         */

static void t_get_basic(void) {
  static const char req[] = "GET /index.html HTTP/1.1\r\n"
                            "Host: example.com\r\n"
                            "User-Agent: t\r\n"
                            "Accept: */*\r\n\r\n";
  T_EQ_INT(head_end_whole(req, sizeof req - 1), sizeof req - 1);
  OK(req);
  T_EQ_STR(H.method, H.method_len, "GET");
  T_EQ_STR(H.target, H.target_len, "/index.html");
  T_EQ_STR(H.path, H.path_len, "/index.html");
  T_ASSERT(H.query == NULL);
  T_EQ_INT(H.query_len, 0);
  T_EQ_STR(H.authority, H.authority_len, "example.com");
  T_EQ_INT(H.version_minor, 1);
  T_EQ_INT(H.flags, TERN__H1_F_HAS_HOST);
  T_EQ_INT(H.body, TERN__H1_BODY_NONE);
  T_EQ_INT(H.nfields, 3);
  T_EQ_STR(F[0].name, F[0].name_len, "Host");
  T_EQ_STR(F[0].value, F[0].value_len, "example.com");
  T_EQ_STR(F[1].name, F[1].name_len, "User-Agent");
  T_EQ_STR(F[2].value, F[2].value_len, "*/*");
  T_ASSERT(H.upgrade == NULL);
}

static void t_method_token(void) {
  OK("M-SEARCH / HTTP/1.1\r\n" HOST "\r\n");
  BAD("OPTIONS\t/ HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("G(T / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GE\"T / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD(" / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("G\x80T / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  OK("!#$%&'*+-.^_`|~09azAZ / HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.method, H.method_len, "!#$%&'*+-.^_`|~09azAZ");
  /* Methods are case-sensitive: "get" is a different (unknown) method,
   * which is the caller's business, not a syntax error. */
  OK("get / HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.method, H.method_len, "get");
}

static void t_method_long(void) {
  OK("ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEF / HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_INT(H.method_len, TERN__H1_MAX_METHOD);
  BAD("ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG / HTTP/1.1\r\n" HOST "\r\n",
      TERN__H1_E501);
}

static void t_single_spaces(void) {
  BAD("GET  / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /  HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/1.1 \r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /a b HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET\t/\tHTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / \r\n" HOST "\r\n", TERN__H1_E400);
}

static void t_target_chars(void) {
  BAD("GET /\x01 HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /a\x7f HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /\xc3\xa9 HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /a#frag HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET /a\0b HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  /* No version at all is HTTP/0.9, which is not spoken. */
  BAD("GET /\r\n" HOST "\r\n", TERN__H1_E400);
  OK("GET /a%20b;p=1/~x!$&'()*+,=:@-._ HTTP/1.1\r\n" HOST "\r\n");
}

static void t_version(void) {
  OK("GET / HTTP/1.0\r\n\r\n");
  T_EQ_INT(H.version_minor, 0);
  OK(RL11 HOST "\r\n");
  T_EQ_INT(H.version_minor, 1);
  /* A higher minor version of HTTP/1 is served as HTTP/1.1 (RFC 9110
   * 2.5), with all of HTTP/1.1's rules, such as Host. */
  OK("GET / HTTP/1.2\r\n" HOST "\r\n");
  T_EQ_INT(H.version_minor, 1);
  OK("GET / HTTP/1.9\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n");
  T_EQ_INT(H.version_minor, 1);
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  BAD("GET / HTTP/1.9\r\n\r\n", TERN__H1_E400);
  BAD("GET / HTTP/2.0\r\n" HOST "\r\n", TERN__H1_E505);
  BAD("GET / HTTP/0.9\r\n" HOST "\r\n", TERN__H1_E505);
  BAD("GET / HTTP/9.9\r\n" HOST "\r\n", TERN__H1_E505);
  BAD("GET / HTTP/1.10\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/11\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / http/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/a.b\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTPS/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/1.1x\r\n" HOST "\r\n", TERN__H1_E400);
}

static void t_bare_cr_lf(void) {
  BAD("GET / HTTP/1.1\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET / HTTP/1.1\r" HOST "\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a\r\nX: 1\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: a\rb\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: a\nb\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X\r\n\r\n", TERN__H1_E400);
  /* A bare LF where a leading empty line would be. */
  BAD("\n" RL11 HOST "\r\n", TERN__H1_E400);
  BAD("\r" RL11 HOST "\r\n", TERN__H1_E400);
  /* A bare "\n\n" never ends a head, so a head ending that way is never
   * handed to the parser; check_partial rejects its first bare LF only if
   * it is in the request line. */
  T_EQ_INT(head_end_whole(RL11 HOST "\n\n", sizeof(RL11 HOST) + 1), 0);
  T_EQ_INT(tern__h1_check_partial("GET / HTTP/1.1\n", 15, &LIM), TERN__H1_E400);
}

static void t_leading_crlf(void) {
  static const char one[] = "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
  static const char two[] = "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
  size_t sc = 0;

  T_EQ_INT(head_end_whole(one, sizeof one - 1), sizeof one - 1);
  T_EQ_INT(head_end_whole(two, sizeof two - 1), sizeof two - 1);
  OK(one);
  T_EQ_STR(H.method, H.method_len, "GET");
  OK(two);
  T_EQ_STR(H.target, H.target_len, "/");
  /* "\r\n\r\n" at the start is two empty lines, not an empty head. */
  T_EQ_INT(tern__h1_head_end("\r\n\r\n", 4, &sc), 0);
  T_EQ_INT(tern__h1_head_end(two, sizeof two - 1, &sc), sizeof two - 1);
  T_EQ_INT(tern__h1_check_partial("\r\n\r", 3, &LIM), 0);
  T_EQ_INT(tern__h1_check_partial("\r\n\rG", 4, &LIM), TERN__H1_E400);
  /* Only empty lines is not a head even when given as one. */
  BAD("\r\n\r\n", TERN__H1_E400);
}

/* ------------------------------------------------------------------ */
/* Target forms                                                         */

static void t_origin_query(void) {
  OK("GET /a/b?x=1&y=2 HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.path, H.path_len, "/a/b");
  T_EQ_STR(H.query, H.query_len, "x=1&y=2");
  OK("GET /a?b?c HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.path, H.path_len, "/a");
  T_EQ_STR(H.query, H.query_len, "b?c");
  OK("GET /a? HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.path, H.path_len, "/a");
  T_ASSERT(H.query != NULL);
  T_EQ_INT(H.query_len, 0);
  OK("GET //x HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.path, H.path_len, "//x");
  T_EQ_INT(H.flags & (TERN__H1_F_ABSOLUTE | TERN__H1_F_ASTERISK), 0);
}

static void t_absolute_form(void) {
  OK("GET http://example.com:8080/p/q?x=1 HTTP/1.1\r\n"
     "Host: other\r\n\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_ABSOLUTE | TERN__H1_F_HAS_HOST);
  T_EQ_STR(H.authority, H.authority_len, "example.com:8080");
  T_EQ_STR(H.path, H.path_len, "/p/q");
  T_EQ_STR(H.query, H.query_len, "x=1");
  T_EQ_STR(H.target, H.target_len, "http://example.com:8080/p/q?x=1");

  OK("GET http://example.com HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.path, H.path_len, "/");
  T_ASSERT(H.query == NULL);
  T_EQ_STR(H.authority, H.authority_len, "example.com");

  OK("GET HTTPS://[::1]:8443?q HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.authority, H.authority_len, "[::1]:8443");
  T_EQ_STR(H.path, H.path_len, "/");
  T_EQ_STR(H.query, H.query_len, "q");

  /* HTTP/1.0 needs no Host; the authority comes from the target. */
  OK("GET http://h/x HTTP/1.0\r\n\r\n");
  T_EQ_STR(H.authority, H.authority_len, "h");

  BAD("GET http:///p HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET http://u@h/p HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET ftp://h/p HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET http:/h/p HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET http://h:8x/p HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  /* An absolute-form request still needs a Host in HTTP/1.1. */
  BAD("GET http://h/ HTTP/1.1\r\n\r\n", TERN__H1_E400);
}

static void t_asterisk(void) {
  OK("OPTIONS * HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_ASTERISK | TERN__H1_F_HAS_HOST);
  T_EQ_STR(H.path, H.path_len, "*");
  T_ASSERT(H.query == NULL);
  BAD("GET * HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("OPTIONS *x HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("options * HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
}

static void t_connect(void) {
  OK("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n");
  T_EQ_STR(H.authority, H.authority_len, "example.com:443");
  T_EQ_INT(H.path_len, 0);
  T_ASSERT(H.path != NULL);
  OK("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n" HOST "\r\n");
  T_EQ_STR(H.authority, H.authority_len, "[2001:db8::1]:443");
  BAD("CONNECT example.com HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("CONNECT example.com: HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("CONNECT :443 HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("CONNECT / HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("CONNECT http://a:1/ HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("CONNECT * HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
  BAD("GET example.com:443 HTTP/1.1\r\n" HOST "\r\n", TERN__H1_E400);
}

/* ------------------------------------------------------------------ */
/* Fields                                                               */

static void t_field_syntax(void) {
  BAD(RL11 HOST "X : 1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X\t: 1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST ": 1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X(y): 1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X-\xc3: 1\r\n\r\n", TERN__H1_E400);
  /* obs-fold, after a field and right after the request line. */
  BAD(RL11 HOST "X: 1\r\n  2\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: 1\r\n\t2\r\n\r\n", TERN__H1_E400);
  BAD(RL11 " " HOST "\r\n", TERN__H1_E400);
  /* CTLs in values. */
  BAD(RL11 HOST "X: a\0b\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: a\x01\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: a\x7f\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "X: a\x1b[0m\r\n\r\n", TERN__H1_E400);
}

static void t_field_values(void) {
  OK(RL11 HOST "A: \t bar  baz \t \r\n"
               "B:\r\n"
               "C:   \r\n"
               "D: \x80\xff caf\xc3\xa9\r\n"
               "E:x\ty\r\n\r\n");
  T_EQ_INT(H.nfields, 6);
  T_EQ_STR(F[1].value, F[1].value_len, "bar  baz");
  T_EQ_INT(F[2].value_len, 0);
  T_EQ_INT(F[3].value_len, 0);
  T_EQ_STR(F[4].value, F[4].value_len, "\x80\xff caf\xc3\xa9");
  T_EQ_STR(F[5].name, F[5].name_len, "E");
  T_EQ_STR(F[5].value, F[5].value_len, "x\ty");
}

/* ------------------------------------------------------------------ */
/* Framing                                                              */

static void t_post_content_length(void) {
  static const char req[] =
      "POST /form HTTP/1.1\r\n" HOST "Content-Type: text/plain\r\n"
      "Content-Length: 5\r\n\r\nhello";
  size_t end = head_end_whole(req, sizeof req - 1);

  T_EQ_INT(end, sizeof req - 1 - 5);
  T_EQ_INT(parse_n(req, end, &LIM, 64), (int)end);
  T_EQ_INT(H.body, TERN__H1_BODY_LENGTH);
  T_EQ_INT(H.content_length, 5);
  T_EQ_STR(H.method, H.method_len, "POST");
  T_EQ_STR(req + end, 5, "hello");

  OK(RL11 HOST "content-length: 0\r\n\r\n");
  T_EQ_INT(H.body, TERN__H1_BODY_LENGTH);
  T_EQ_INT(H.content_length, 0);
  OK(RL11 HOST "Content-Length: 007\r\n\r\n");
  T_EQ_INT(H.content_length, 7);
}

static void t_content_length_strict(void) {
  BAD(RL11 HOST "Content-Length: +5\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: -1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 5 5\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 5,5\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 5, 6\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 0x10\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: \r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 5\r\nContent-Length: 5\r\n\r\n",
      TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 18446744073709551616\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 99999999999999999999999\r\n\r\n",
      TERN__H1_E400);
  OK(RL11 HOST "Content-Length: 4611686018427387904\r\n\r\n");
  T_EQ_INT(H.content_length == ((uint64_t)1 << 62), 1);
  BAD(RL11 HOST "Content-Length: 4611686018427387905\r\n\r\n", TERN__H1_E400);
  /* Trailing OWS is not part of the value, so this one is fine. */
  OK(RL11 HOST "Content-Length: 12 \r\n\r\n");
  T_EQ_INT(H.content_length, 12);
}

static void t_transfer_encoding(void) {
  OK("POST / HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n");
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  OK(RL11 HOST "Transfer-Encoding: CHUNKED\r\n\r\n");
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  OK(RL11 HOST "Transfer-Encoding: , chunked ,\r\n\r\n");
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  /* chunked is the only coding decoded: one before it would reach the
   * handler as if the body were plain (RFC 9112 6.1). */
  BAD(RL11 HOST "Transfer-Encoding: gzip, chunked\r\n\r\n", TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: x-foo;q=1 , chunked\r\n\r\n",
      TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: gzip\r\n"
                "Transfer-Encoding: chunked\r\n\r\n",
      TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: identity\r\n\r\n", TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: identity, chunked\r\n\r\n", TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: gzip\r\n\r\n", TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: chunked, gzip\r\n\r\n", TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: chunked\r\n"
                "Transfer-Encoding: gzip\r\n\r\n",
      TERN__H1_E501);
  BAD(RL11 HOST "Transfer-Encoding: chunked, chunked\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: chunked\r\n"
                "Transfer-Encoding: chunked\r\n\r\n",
      TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
      TERN__H1_E400);
  BAD(RL11 HOST "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
      TERN__H1_E400);
  BAD("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", TERN__H1_E400);
  BAD("POST / HTTP/1.0\r\nTransfer-Encoding: gzip\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: \r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: ,\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: chunked;x=1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: foo bar, chunked\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST "Transfer-Encoding: \"chunked\"\r\n\r\n", TERN__H1_E400);
}

/* ------------------------------------------------------------------ */
/* Host, Connection, Expect                                             */

static void t_host(void) {
  BAD(RL11 "\r\n", TERN__H1_E400);
  BAD(RL11 "X: 1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 HOST HOST "\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a\r\nhost: b\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a b\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a/b\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: u@a\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a:80x\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: a:80:81\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: %zz\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: [::1\r\n\r\n", TERN__H1_E400);
  BAD(RL11 "Host: []\r\n\r\n", TERN__H1_E400);
  OK(RL11 "Host: [::1]:8080\r\n\r\n");
  T_EQ_STR(H.authority, H.authority_len, "[::1]:8080");
  OK(RL11 "HOST: Ex-ample.COM:80 \r\n\r\n");
  T_EQ_STR(H.authority, H.authority_len, "Ex-ample.COM:80");
  OK(RL11 "Host: a%20b\r\n\r\n");
  /* An empty Host is how a client says the target has no authority. */
  OK(RL11 "Host:\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_HAS_HOST, TERN__H1_F_HAS_HOST);
  T_EQ_INT(H.authority_len, 0);
  OK("GET / HTTP/1.0\r\n\r\n");
  T_ASSERT(H.authority == NULL);
  T_EQ_INT(H.flags & TERN__H1_F_HAS_HOST, 0);
}

static void t_connection(void) {
  OK(RL11 HOST "Connection: close\r\n\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_HAS_HOST | TERN__H1_F_CLOSE);
  OK(RL11 HOST "Connection: foo\r\nConnection: bar , CLOSE\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_CLOSE, TERN__H1_F_CLOSE);
  OK(RL11 HOST "Connection: closed, xclose\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_CLOSE, 0);
  OK(RL11 HOST "\r\n");
  T_EQ_INT(H.flags & (TERN__H1_F_CLOSE | TERN__H1_F_KEEPALIVE), 0);
  OK(RL11 HOST "Connection: keep-alive, close\r\n\r\n");
  T_EQ_INT(H.flags & (TERN__H1_F_CLOSE | TERN__H1_F_KEEPALIVE),
           TERN__H1_F_CLOSE | TERN__H1_F_KEEPALIVE);
}

static void t_http10_keepalive(void) {
  OK("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  T_EQ_INT(H.version_minor, 0);
  T_EQ_INT(H.flags, TERN__H1_F_KEEPALIVE);
  OK("GET / HTTP/1.0\r\n\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_CLOSE);
  OK("GET / HTTP/1.0\r\nConnection: x\r\n\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_CLOSE);
  OK("GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n");
  T_EQ_INT(H.flags, TERN__H1_F_KEEPALIVE | TERN__H1_F_HAS_HOST);
}

static void t_upgrade(void) {
  OK(RL11 HOST "Connection: keep-alive, Upgrade\r\n"
               "Upgrade: websocket\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_UPGRADE, TERN__H1_F_UPGRADE);
  T_EQ_STR(H.upgrade, H.upgrade_len, "websocket");
  /* Either order of the two fields. */
  OK(RL11 HOST "Upgrade: h2c\r\nConnection: upgrade\r\n\r\n");
  T_EQ_STR(H.upgrade, H.upgrade_len, "h2c");
  OK(RL11 HOST "Upgrade: websocket\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_UPGRADE, 0);
  T_ASSERT(H.upgrade == NULL);
  OK(RL11 HOST "Connection: upgrade\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_UPGRADE, 0);
  OK(RL11 HOST "Connection: upgrade\r\nUpgrade: \r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_UPGRADE, 0);
  /* RFC 9110 7.8: Upgrade in an HTTP/1.0 request is ignored. */
  OK("GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_UPGRADE, 0);
}

static void t_expect(void) {
  OK("PUT / HTTP/1.1\r\n" HOST "Expect: 100-Continue\r\n"
     "Content-Length: 1\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_EXPECT100, TERN__H1_F_EXPECT100);
  OK(RL11 HOST "Expect: 100-continue\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_EXPECT100, TERN__H1_F_EXPECT100);
  OK(RL11 HOST "Expect: something-else\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_EXPECT100, 0);
  T_EQ_STR(F[1].value, F[1].value_len, "something-else");
  OK(RL11 HOST "Expect: 100-continued\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_EXPECT100, 0);
  OK("GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n");
  T_EQ_INT(H.flags & TERN__H1_F_EXPECT100, 0);
}

/* ------------------------------------------------------------------ */
/* Limits                                                               */

static void t_limit_head(void) {
  static const char req[] = RL11 HOST "\r\n"; /* 27 bytes */
  tern__h1_limits lim = {sizeof req - 1, 8, 100};

  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), (int)sizeof req - 1);
  lim.max_head--;
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), TERN__H1_E431);
}

static void t_limit_fields(void) {
  static const char req[] = RL11 HOST "B: 1\r\nC: 2\r\n\r\n";
  tern__h1_limits lim = {8192, 3, 100};

  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 64), (int)sizeof req - 1);
  T_EQ_INT(H.nfields, 3);
  lim.max_headers = 2;
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 64), TERN__H1_E431);
  /* The caller's array is the other bound. */
  lim.max_headers = 64;
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 2), TERN__H1_E431);
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 3), (int)sizeof req - 1);
}

static void t_limit_uri(void) {
  static const char req[] = "GET /123456789 HTTP/1.1\r\n" HOST "\r\n";
  tern__h1_limits lim = {8192, 8, 10};

  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), (int)sizeof req - 1);
  lim.max_uri = 9;
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), TERN__H1_E414);
  /* The request line is judged before the head's size. */
  lim.max_head = 10;
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), TERN__H1_E414);
}

static void t_check_partial(void) {
  static const char req[] =
      "\r\nPOST /upload?x=1 HTTP/1.1\r\n" HOST "Content-Length: 3\r\n\r\n";
  tern__h1_limits lim = {100, 8, 20};
  char big[200];
  size_t k;

  /* Every proper prefix of a head that parses is fine. */
  T_EQ_INT(parse_n(req, sizeof req - 1, &lim, 8), (int)sizeof req - 1);
  for (k = 0; k < sizeof req - 1; k++)
    T_EQ_INT(tern__h1_check_partial(req, k, &lim), 0);

  /* An over-long target is caught before its line ends. */
  memset(big, 'a', sizeof big);
  memcpy(big, "GET /", 5);
  T_EQ_INT(tern__h1_check_partial(big, 5 + 15, &lim), 0);
  T_EQ_INT(tern__h1_check_partial(big, 5 + 20, &lim), TERN__H1_E414);
  /* Still 414, not 431, when that line is also past max_head. */
  T_EQ_INT(tern__h1_check_partial(big, sizeof big, &lim), TERN__H1_E414);
  /* A complete request line, then a head that never ends. */
  memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
  T_EQ_INT(tern__h1_check_partial(big, 100, &lim), 0);
  T_EQ_INT(tern__h1_check_partial(big, 101, &lim), TERN__H1_E431);
  /* A request line that never ends but has a short target. */
  lim.max_head = 30;
  T_EQ_INT(tern__h1_check_partial("GET / HTTP/1", 12, &lim), 0);

  /* Garbage is refused at its first byte. */
  T_EQ_INT(tern__h1_check_partial("\x16\x03\x01", 3, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial(" ", 1, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial("\n", 1, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial("\r", 1, &lim), 0);
  T_EQ_INT(tern__h1_check_partial("\rX", 2, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial("", 0, &lim), 0);
  T_EQ_INT(tern__h1_check_partial("GET /\x01", 6, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial("GET / X", 7, &lim), TERN__H1_E400);
  T_EQ_INT(tern__h1_check_partial("GET / HTTP/2.0", 14, &lim), 0);
  T_EQ_INT(tern__h1_check_partial("GET / HTTP/2.0\r", 15, &lim), TERN__H1_E505);
  T_EQ_INT(tern__h1_check_partial("GET / HTTP/1.1\r\r", 16, &lim),
           TERN__H1_E400);
  T_EQ_INT(
      tern__h1_check_partial("ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG", 33, &lim),
      TERN__H1_E501);
  /* Leading empty lines alone can exhaust max_head. */
  memset(big, 0, sizeof big);
  for (k = 0; k + 1 < sizeof big; k += 2)
    memcpy(big + k, "\r\n", 2);
  T_EQ_INT(tern__h1_check_partial(big, 30, &lim), 0);
  T_EQ_INT(tern__h1_check_partial(big, 40, &lim), TERN__H1_E431);
}

/* ------------------------------------------------------------------ */
/* Head end                                                             */

static void t_head_end_pipelined(void) {
  static const char two[] = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"
                            "GET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
  size_t first = head_end_whole(two, sizeof two - 1), second, sc = 0;

  T_EQ_INT(first, (sizeof two - 1) / 2);
  T_EQ_INT(parse_n(two, first, &LIM, 64), (int)first);
  T_EQ_STR(H.target, H.target_len, "/1");
  second = tern__h1_head_end(two + first, sizeof two - 1 - first, &sc);
  T_EQ_INT(second, (sizeof two - 1) / 2);
  T_EQ_INT(parse_n(two + first, second, &LIM, 64), (int)second);
  T_EQ_STR(H.target, H.target_len, "/2");
  /* Handing the parser both heads as one is a caller error. */
  T_EQ_INT(parse_n(two, sizeof two - 1, &LIM, 64), TERN__H1_E400);
}

static void t_head_end_misc(void) {
  size_t sc = 0;

  T_EQ_INT(tern__h1_head_end("", 0, &sc), 0);
  T_EQ_INT(tern__h1_head_end("GET / HTTP/1.1\n\n", 16, &sc), 0);
  sc = 0;
  T_EQ_INT(tern__h1_head_end("X\r\n\r\n", 5, &sc), 5);
  sc = 0;
  T_EQ_INT(tern__h1_head_end("\r\n\r\nX\r\n\r\n", 9, &sc), 9);
  /* A resume point that would land on a CRLF pair must not make the
   * empty-line skip jump over the real end. */
  sc = 0;
  T_EQ_INT(tern__h1_head_end("X\r\n\r", 4, &sc), 0);
  T_EQ_INT(tern__h1_head_end("X\r\n\r\n", 5, &sc), 5);
  sc = 0;
  T_EQ_INT(tern__h1_head_end("XY\r\n\r", 5, &sc), 0);
  T_EQ_INT(tern__h1_head_end("XY\r\n\r\n", 6, &sc), 6);
  /* A stale offset past the end is treated as a fresh start. */
  sc = 100;
  T_EQ_INT(tern__h1_head_end("X\r\n\r\n", 5, &sc), 5);
}

static void t_head_byte_at_a_time(void) {
  static const char req[] = "\r\nPOST http://h:1/a?b HTTP/1.1\r\n"
                            "Host: h\r\n"
                            "Connection: keep-alive, upgrade\r\n"
                            "Upgrade: websocket\r\n"
                            "Transfer-Encoding: chunked\r\n"
                            "X-Empty:\r\n"
                            "\r\n";
  tern__h1_head whole;
  tern__h1_field wf[16];
  size_t n = sizeof req - 1, k, sc = 0, end = 0, i;

  T_EQ_INT(PARSE(req), (int)n);
  whole = H;
  memcpy(wf, F, sizeof wf);

  for (k = 1; k <= n; k++) {
    T_EQ_INT(tern__h1_check_partial(req, k - 1, &LIM), 0);
    end = tern__h1_head_end(req, k, &sc);
    if (end != 0)
      break;
  }
  T_EQ_INT(k, n);
  T_EQ_INT(end, n);
  T_EQ_INT(PARSE(req), (int)n);
  T_ASSERT(H.method == whole.method && H.target == whole.target);
  T_ASSERT(H.path == whole.path && H.path_len == whole.path_len);
  T_ASSERT(H.query == whole.query && H.query_len == whole.query_len);
  T_ASSERT(H.authority == whole.authority);
  T_ASSERT(H.upgrade == whole.upgrade);
  T_EQ_INT(H.flags, whole.flags);
  T_EQ_INT(H.body, whole.body);
  T_EQ_INT(H.nfields, whole.nfields);
  for (i = 0; i < H.nfields; i++) {
    T_ASSERT(F[i].name == wf[i].name && F[i].value == wf[i].value);
    T_EQ_INT(F[i].value_len, wf[i].value_len);
  }
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  T_EQ_INT(H.flags, TERN__H1_F_ABSOLUTE | TERN__H1_F_HAS_HOST |
                        TERN__H1_F_KEEPALIVE | TERN__H1_F_UPGRADE);
  T_EQ_STR(H.authority, H.authority_len, "h:1");
}

/* ------------------------------------------------------------------ */
/* Chunked bodies                                                       */

/* Decode `in` through a fresh decoder, handing it the input in pieces:
 * [0, split) then the rest, or `step` bytes at a time when step > 0.
 * Collects the data into out. Returns the final result; *used is the
 * number of input bytes consumed in total. */
static int feed(const char *in, size_t len, size_t split, size_t step,
                size_t max_line, char *out, size_t *outlen, size_t *used) {
  tern__h1_chunked c;
  size_t pos = 0, piece_end, got, off, dl;
  int r = TERN__H1_CHUNKED_MORE;

  tern__h1_chunked_init(&c, max_line);
  *outlen = 0;
  while (pos < len) {
    piece_end = step ? pos + step : (pos < split ? split : len);
    if (piece_end > len)
      piece_end = len;
    while (pos < piece_end) {
      r = tern__h1_chunked_decode(&c, in + pos, piece_end - pos, &got, &off,
                                  &dl);
      if (r < 0 || r == TERN__H1_CHUNKED_DONE) {
        *used = pos + got;
        return r;
      }
      /* Without data, all input is consumed; with data, up to its end. */
      T_ASSERT(dl ? got == off + dl : got == piece_end - pos);
      memcpy(out + *outlen, in + pos + off, dl);
      *outlen += dl;
      pos += got;
    }
  }
  *used = pos;
  return r;
}

static void t_chunked_basic(void) {
  static const char body[] = "5\r\nhello\r\n"
                             "7;ext=1;q=\"a b\"\r\n, world\r\n"
                             "0\r\n\r\n";
  tern__h1_chunked c;
  size_t got, off, dl;
  char out[64];
  size_t olen, used;

  T_EQ_INT(feed(body, sizeof body - 1, 0, 0, 64, out, &olen, &used),
           TERN__H1_CHUNKED_DONE);
  T_EQ_STR(out, olen, "hello, world");
  T_EQ_INT(used, sizeof body - 1);

  /* Spans point into the input. */
  tern__h1_chunked_init(&c, 64);
  T_EQ_INT(tern__h1_chunked_decode(&c, body, sizeof body - 1, &got, &off, &dl),
           TERN__H1_CHUNKED_MORE);
  T_EQ_INT(off, 3);
  T_EQ_INT(dl, 5);
  T_EQ_INT(got, 8);

  /* DONE is sticky and consumes nothing more. */
  tern__h1_chunked_init(&c, 64);
  T_EQ_INT(tern__h1_chunked_decode(&c, "0\r\n\r\nGET", 8, &got, &off, &dl),
           TERN__H1_CHUNKED_DONE);
  T_EQ_INT(got, 5);
  T_EQ_INT(dl, 0);
  T_EQ_INT(tern__h1_chunked_decode(&c, "GET", 3, &got, &off, &dl),
           TERN__H1_CHUNKED_DONE);
  T_EQ_INT(got, 0);
}

static void t_chunked_hex(void) {
  static const char body[] = "a\r\n0123456789\r\nA\r\nabcdefghij\r\n"
                             "000000000000001f\r\n"
                             "0123456789abcdef0123456789abcde\r\n"
                             "0\r\n\r\n";
  char out[128];
  size_t olen, used;

  T_EQ_INT(feed(body, sizeof body - 1, 0, 0, 64, out, &olen, &used),
           TERN__H1_CHUNKED_DONE);
  T_EQ_INT(olen, 10 + 10 + 31);
}

static void t_chunked_bad(void) {
  char out[64];
  size_t olen, used;

#define CHUNKED_IS(s, code)                                                    \
  T_EQ_INT(feed((s), sizeof(s) - 1, 0, 0, 64, out, &olen, &used), code)
  CHUNKED_IS("5\nhello\r\n0\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("5\r\nhello\n0\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("5\r\nhelloX\r\n0\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("5\r\nhello\r\r\n", TERN__H1_E400);
  CHUNKED_IS("\r\nhello\r\n", TERN__H1_E400);
  CHUNKED_IS("x\r\n", TERN__H1_E400);
  CHUNKED_IS("-5\r\n", TERN__H1_E400);
  CHUNKED_IS("0x5\r\n", TERN__H1_E400);
  CHUNKED_IS("5 \r\nhello\r\n", TERN__H1_E400);
  CHUNKED_IS(" 5\r\nhello\r\n", TERN__H1_E400);
  CHUNKED_IS("5;a\x01\r\nhello\r\n", TERN__H1_E400);
  CHUNKED_IS("5\r\nhello\r\n0\r\n\n", TERN__H1_E400);
  CHUNKED_IS("5\r\nhello\r\n0\n\r\n", TERN__H1_E400);
  /* The value is bounded, not the digits: leading zeros are fine, a
   * value over 2^62 is not, however it is spelled. */
  CHUNKED_IS("00000000000000005\r\nhello\r\n0\r\n\r\n", TERN__H1_CHUNKED_DONE);
  CHUNKED_IS("0000000000000000005\r\nhello\r\n0\r\n\r\n",
             TERN__H1_CHUNKED_DONE);
  CHUNKED_IS("00000000000000000000000000000000\r\n\r\n", TERN__H1_CHUNKED_DONE);
  CHUNKED_IS("000000000000000004000000000000001\r\n", TERN__H1_E400);
  CHUNKED_IS("10000000000000000\r\n", TERN__H1_E400);
  CHUNKED_IS("ffffffffffffffffff\r\n", TERN__H1_E400);
  CHUNKED_IS("4000000000000001\r\n", TERN__H1_E400);
  CHUNKED_IS("ffffffffffffffff\r\n", TERN__H1_E400);
  CHUNKED_IS("4000000000000000\r\nabc", TERN__H1_CHUNKED_MORE);
  CHUNKED_IS("0000000000000005\r\nhello\r\n0\r\n\r\n", TERN__H1_CHUNKED_DONE);
  /* Extensions are allowed, with BWS before the ';'. */
  CHUNKED_IS("5 \t;x=\"y\"\r\nhello\r\n0;last\r\n\r\n", TERN__H1_CHUNKED_DONE);
  CHUNKED_IS("5 x\r\nhello\r\n", TERN__H1_E400);
  /* Trailer lines follow the field grammar. */
  CHUNKED_IS("0\r\n X: 1\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX : 1\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\n: 1\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX: a\0b\r\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX: 1\n\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX: 1\r\r\n", TERN__H1_E400);
  CHUNKED_IS("0\r\nX: \x80\r\nY:\r\n\r\n", TERN__H1_CHUNKED_DONE);
#undef CHUNKED_IS
}

static void t_chunked_limits(void) {
  char out[64];
  size_t olen, used;
  static const char ext[] = "5;aaaaaaaa\r\nhello\r\n0\r\n\r\n";
  static const char tr[] = "0\r\nAb: cd\r\nEf: gh\r\n\r\n";

  /* The size line "5;aaaaaaaa" is 10 bytes. */
  T_EQ_INT(feed(ext, sizeof ext - 1, 0, 0, 10, out, &olen, &used),
           TERN__H1_CHUNKED_DONE);
  T_EQ_INT(feed(ext, sizeof ext - 1, 0, 0, 9, out, &olen, &used),
           TERN__H1_E400);
  /* The trailer section is 16 bytes with its CRLFs. */
  T_EQ_INT(feed(tr, sizeof tr - 1, 0, 0, 16, out, &olen, &used),
           TERN__H1_CHUNKED_DONE);
  T_EQ_INT(feed(tr, sizeof tr - 1, 0, 0, 15, out, &olen, &used), TERN__H1_E400);
}

static void t_chunked_trailers(void) {
  static const char body[] = "3\r\nabc\r\n0\r\nX-A: 1\r\nX-B: two\r\n\r\nnext";
  tern__h1_chunked c;
  size_t got, off, dl, pos = 0;
  int r;

  tern__h1_chunked_init(&c, 256);
  r = tern__h1_chunked_decode(&c, body, sizeof body - 1, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_CHUNKED_MORE);
  T_EQ_STR(body + off, dl, "abc");
  pos = got;
  r = tern__h1_chunked_decode(&c, body + pos, sizeof body - 1 - pos, &got, &off,
                              &dl);
  T_EQ_INT(r, TERN__H1_CHUNKED_DONE);
  T_EQ_STR(body + pos + off, dl, "X-A: 1\r\nX-B: two\r\n");
  T_EQ_INT(c.trailer_len, dl);
  T_EQ_STR(body + pos + got, sizeof body - 1 - pos - got, "next");

  /* Split inside the trailers: the span is partial and says so. */
  tern__h1_chunked_init(&c, 256);
  r = tern__h1_chunked_decode(&c, "0\r\nX: 1\r", 8, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_CHUNKED_MORE);
  r = tern__h1_chunked_decode(&c, "\n\r\n", 3, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_CHUNKED_DONE);
  T_EQ_INT(got, 3);
  T_EQ_INT(c.trailer_len, 6);
  T_ASSERT(dl != c.trailer_len);

  /* No trailers: an empty span. */
  tern__h1_chunked_init(&c, 256);
  r = tern__h1_chunked_decode(&c, "0\r\n\r\n", 5, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_CHUNKED_DONE);
  T_EQ_INT(dl, 0);
  T_EQ_INT(c.trailer_len, 0);

  /* An error is sticky. */
  tern__h1_chunked_init(&c, 256);
  r = tern__h1_chunked_decode(&c, "z", 1, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_E400);
  r = tern__h1_chunked_decode(&c, "0\r\n\r\n", 5, &got, &off, &dl);
  T_EQ_INT(r, TERN__H1_E400);
  T_EQ_INT(got, 0);
}

static void t_chunked_every_split(void) {
  static const char body[] = "1\r\na\r\n"
                             "1A;name=value\r\n"
                             "bcdefghijklmnopqrstuvwxyz0\r\n"
                             "10\r\n0123456789ABCDEF\r\n"
                             "0;x\r\nTrailer: yes\r\n\r\n";
  static const char want[] = "abcdefghijklmnopqrstuvwxyz00123456789ABCDEF";
  char out[128];
  size_t n = sizeof body - 1, split, olen, used;

  for (split = 0; split <= n; split++) {
    T_EQ_INT(feed(body, n, split, 0, 64, out, &olen, &used),
             TERN__H1_CHUNKED_DONE);
    T_EQ_STR(out, olen, want);
    T_EQ_INT(used, n);
  }
  T_EQ_INT(feed(body, n, 0, 1, 64, out, &olen, &used), TERN__H1_CHUNKED_DONE);
  T_EQ_STR(out, olen, want);
  T_EQ_INT(used, n);
  /* Every prefix is incomplete, never an error. */
  for (split = 0; split < n; split++)
    T_EQ_INT(feed(body, split, split, 1, 64, out, &olen, &used),
             TERN__H1_CHUNKED_MORE);
}

static void t_chunked_post(void) {
  static const char req[] =
      "POST /up HTTP/1.1\r\n" HOST "Transfer-Encoding: chunked\r\n\r\n"
      "4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";
  size_t end = head_end_whole(req, sizeof req - 1), olen, used;
  char out[32];

  T_EQ_INT(parse_n(req, end, &LIM, 64), (int)end);
  T_EQ_INT(H.body, TERN__H1_BODY_CHUNKED);
  T_EQ_INT(feed(req + end, sizeof req - 1 - end, 3, 0, 64, out, &olen, &used),
           TERN__H1_CHUNKED_DONE);
  T_EQ_STR(out, olen, "Wikipedia");
  T_EQ_INT(end + used, sizeof req - 1);
}

/* ------------------------------------------------------------------ */
/* Token lists                                                          */

static void t_has_token(void) {
  T_ASSERT(tern__has_token("a, b ,c", 7, "b", 1));
  T_ASSERT(tern__has_token("a, B ,c", 7, "b", 1));
  T_ASSERT(tern__has_token("a, b ,c", 7, "C", 1));
  T_ASSERT(tern__has_token(" ,\t,close,", 10, "close", 5));
  T_ASSERT(tern__has_token("Keep-Alive", 10, "keep-alive", 10));
  T_ASSERT(tern__has_token("x,\tkeep-alive\t", 14, "keep-alive", 10));
  T_ASSERT(!tern__has_token("keep-alive", 10, "alive", 5));
  T_ASSERT(!tern__has_token("closed", 6, "close", 5));
  T_ASSERT(!tern__has_token("close", 4, "close", 5));
  T_ASSERT(!tern__has_token("a b", 3, "a", 1));
  T_ASSERT(!tern__has_token("", 0, "a", 1));
  T_ASSERT(!tern__has_token(",,", 2, "", 0));
  /* Bytes that only look alike under a careless case fold. */
  T_ASSERT(!tern__has_token("\r", 1, "-", 1));
  T_ASSERT(!tern__has_token("[", 1, "{", 1));
}

int main(void) {
  T_RUN(t_get_basic);
  T_RUN(t_method_token);
  T_RUN(t_method_long);
  T_RUN(t_single_spaces);
  T_RUN(t_target_chars);
  T_RUN(t_version);
  T_RUN(t_bare_cr_lf);
  T_RUN(t_leading_crlf);
  T_RUN(t_origin_query);
  T_RUN(t_absolute_form);
  T_RUN(t_asterisk);
  T_RUN(t_connect);
  T_RUN(t_field_syntax);
  T_RUN(t_field_values);
  T_RUN(t_post_content_length);
  T_RUN(t_content_length_strict);
  T_RUN(t_transfer_encoding);
  T_RUN(t_host);
  T_RUN(t_connection);
  T_RUN(t_http10_keepalive);
  T_RUN(t_upgrade);
  T_RUN(t_expect);
  T_RUN(t_limit_head);
  T_RUN(t_limit_fields);
  T_RUN(t_limit_uri);
  T_RUN(t_check_partial);
  T_RUN(t_head_end_pipelined);
  T_RUN(t_head_end_misc);
  T_RUN(t_head_byte_at_a_time);
  T_RUN(t_chunked_basic);
  T_RUN(t_chunked_hex);
  T_RUN(t_chunked_bad);
  T_RUN(t_chunked_limits);
  T_RUN(t_chunked_trailers);
  T_RUN(t_chunked_every_split);
  T_RUN(t_chunked_post);
  T_RUN(t_has_token);
  return T_DONE();
}
