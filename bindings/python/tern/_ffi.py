"""The C ABI of libtern, declared with ctypes (include/tern.h is the
reference), and the native module tern._native found beside it. Nothing
here is Python-friendly: tern/__init__.py builds the API on top. ctypes
sets a server up; every call on a request's path goes through the native
module (`native`, tern/_bridge.c).

The library is found, in order, through $TERN_LIBRARY (a path), the
library the native module tern._native links (when it is built), the
build directory of the checkout the package sits in (../../../build, when
it is used from a checkout), build/libtern.so under the current directory
(a checkout's root), and the installed libtern.so.0 (the dynamic loader's
search, as after `meson install` and `ldconfig`).

Every function the library exports is declared below (FUNCTIONS), or
listed in LEFT_OUT with the reason it is not; test_abi checks both lists
against the library's dynamic symbol table.

Two handles load the library: `lib` (ctypes.CDLL) releases the GIL around
each call, for everything that may block, wait on a lock a worker holds
while it runs Python, or call back; `fast` (ctypes.PyDLL) keeps it, for
the request accessors, which only read the request's memory: a worker's
callback never needs the GIL they hold.

The native module is, in order: $TERN_NATIVE (a path, as the meson tests
set it), the installed tern._native, or the one a meson build made beside
the library found (build/_native.cpython-*.so). It must run on the same
libtern file as `lib`, so that one process never holds two copies.
"""

import ctypes
import ctypes.util
import importlib.machinery
import importlib.util
import os
import sys

from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int64,
                    c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

# The versions of tern this binding speaks: the major version (the
# soname's) and the lowest minor version with every call declared here.
SUPPORTED_MAJOR = 0
MIN_MINOR = 2

# Error codes (tern.h, "Errors").
OK = 0
EINVAL = -1
ENOMEM = -2
ESTATE = -3
EEXIST = -4
EADDRINUSE = -5
EADDR = -6
ECLOSED = -7
EIO = -8
ETOOBIG = -9
ENOTFOUND = -10
ETLS = -11
EHANDSHAKE = -12
ENOTSUP = -13

LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3

ROUTE_BLOCKING = 1 << 0
ROUTE_STREAM_BODY = 1 << 1

BODY_DATA, BODY_END, BODY_ERROR = 0, 1, 2

PROTO_HTTP10, PROTO_HTTP11, PROTO_HTTP2, PROTO_HTTP3 = 10, 11, 20, 30

WS_TEXT, WS_BINARY = 1, 2
WS_PAUSE_READING, WS_FAIL_SEND = 0, 1

TLS_ENGINE_AUTO, TLS_ENGINE_MBEDTLS, TLS_ENGINE_GNUTLS = 0, 1, 2
TLS_1_2, TLS_1_3 = 0x0303, 0x0304

# ---------------------------------------------------------------------------
# Callback types

log_fn = CFUNCTYPE(None, c_int, c_void_p, c_size_t, c_void_p)
handler_fn = CFUNCTYPE(None, c_void_p, c_void_p)
body_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_size_t, c_void_p)
gone_fn = CFUNCTYPE(None, c_void_p, c_void_p)
release_fn = CFUNCTYPE(None, c_void_p, c_void_p)
write_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p)
error_fn = CFUNCTYPE(None, c_void_p, c_void_p)
response_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_void_p)
sse_close_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p)
ws_open_fn = CFUNCTYPE(None, c_void_p, c_void_p)
ws_message_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_size_t, c_int,
                          c_void_p)
ws_close_fn = CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_size_t, c_void_p)
worker_fn = CFUNCTYPE(None, c_void_p, c_uint, c_void_p, c_void_p)
ws_drain_fn = CFUNCTYPE(None, c_void_p, c_void_p)
malloc_fn = CFUNCTYPE(c_void_p, c_size_t, c_void_p)
realloc_fn = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_void_p)
free_fn = CFUNCTYPE(None, c_void_p, c_void_p)

# ---------------------------------------------------------------------------
# Structs (each versioned: see tern.h, "ABI")


class Allocator(Structure):
    _fields_ = [("malloc", c_void_p), ("realloc", c_void_p),
                ("free", c_void_p), ("user", c_void_p)]


# tern_settings, version 1 (ends with log_level): the layout a client
# built against the first header lays out. The binding fills version 2;
# test_abi passes this one to show that the library still takes it.
_SETTINGS_V1 = [
    ("version", c_int), ("size", c_uint32), ("workers", c_uint),
    ("max_head_size", c_uint32), ("max_header_count", c_uint32),
    ("max_uri_length", c_uint32), ("max_body_size", c_uint64),
    ("head_timeout_ms", c_uint32), ("idle_timeout_ms", c_uint32),
    ("body_timeout_ms", c_uint32), ("max_connections", c_uint32),
    ("max_pipeline", c_uint32), ("tcp_nodelay", c_int),
    ("read_buffer_size", c_uint32), ("allocator", Allocator),
    ("log", c_void_p), ("log_user", c_void_p), ("log_level", c_int)]


class SettingsV1(Structure):
    _fields_ = _SETTINGS_V1


class Settings(Structure):
    _fields_ = _SETTINGS_V1 + [("max_stream_window", c_uint32),
                               ("max_conn_window", c_uint32),
                               # version 3
                               ("max_compressors", c_uint32),
                               ("max_compressors_per_conn", c_uint32),
                               # version 4
                               ("max_connections_per_ip", c_uint32),
                               ("requests_per_ip_per_s", c_uint32),
                               ("request_burst", c_uint32),
                               ("ip_table_size", c_uint32),
                               # version 5
                               ("balance", c_int)]


SETTINGS_VERSION = 5
# The settings a Server takes as keyword arguments (tern.h documents each).
SETTINGS_FIELDS = ("workers", "max_head_size", "max_header_count",
                   "max_uri_length", "max_body_size", "head_timeout_ms",
                   "idle_timeout_ms", "body_timeout_ms", "max_connections",
                   "max_pipeline", "tcp_nodelay", "read_buffer_size",
                   "log_level", "max_stream_window", "max_conn_window",
                   "max_compressors", "max_compressors_per_conn",
                   "max_connections_per_ip", "requests_per_ip_per_s",
                   "request_burst", "ip_table_size", "balance")


class RouteOptions(Structure):
    # version 2 added compress (a tern_compress_options *; NULL here: the
    # binding does not compress yet)
    _fields_ = [("version", c_int), ("size", c_uint32), ("flags", c_uint),
                ("max_body_size", c_uint64), ("compress", c_void_p),
                # version 3: a virtual host (a C string, or NULL)
                ("host", c_char_p)]


class WsOptions(Structure):
    _fields_ = [("version", c_int), ("size", c_uint32),
                ("on_open", c_void_p), ("on_message", c_void_p),
                ("on_close", c_void_p), ("on_drain", c_void_p),
                ("max_message_size", c_uint64), ("high_water", c_size_t),
                ("on_full", c_int), ("stream_messages", c_int),
                ("deflate", c_int), ("deflate_window_bits", c_int),
                ("deflate_mem_level", c_int), ("close_timeout_ms", c_uint32),
                ("subprotocol", c_char_p), ("subprotocol_len", c_size_t),
                ("deflate_level", c_int)]


class QuicOptions(Structure):
    _fields_ = [("version", c_int), ("size", c_uint32), ("retry", c_int),
                ("early_data", c_int), ("max_streams", c_uint32),
                ("secret", c_void_p), ("secret_len", c_size_t),
                # version 2
                ("previous_secret", c_void_p),
                ("previous_secret_len", c_size_t)]


class ListenOptions(Structure):
    _fields_ = [("version", c_int), ("size", c_uint32), ("tls", c_void_p),
                ("proxy_protocol", c_int), ("proxy_trusted", c_char_p),
                # version 2
                ("host", c_char_p), ("port", c_int), ("path", c_char_p),
                ("fd", c_int), ("quic", c_int), ("quic_options", c_void_p),
                # version 3
                ("http2_only", c_int),
                # version 4
                ("http1_only", c_int)]


_STATS_V1 = [("version", c_int), ("size", c_uint32), ("requests", c_uint64),
             ("connections", c_uint64), ("active_connections", c_uint64),
             ("bytes_in", c_uint64), ("bytes_out", c_uint64),
             ("allocations", c_uint64), ("bytes_allocated", c_uint64),
             ("frees", c_uint64)]


class StatsV1(Structure):
    _fields_ = _STATS_V1


class StatsV2(Structure):
    _fields_ = _STATS_V1 + [
        ("quic_forwarded", c_uint64), ("quic_retries", c_uint64),
        ("quic_resets", c_uint64), ("quic_version_negotiations", c_uint64),
        ("quic_refused", c_uint64)]


# version 3's arrays: by protocol (h1, h2, h3), by status class (none,
# 1xx .. 5xx) and the duration histogram's buckets (tern_stats_bucket_le)
STATS_PROTOCOLS, STATS_CLASSES, STATS_BUCKETS = 3, 6, 16
_PROTO_ARRAY = c_uint64 * STATS_PROTOCOLS


class Stats(Structure):
    _fields_ = StatsV2._fields_ + [
        ("requests_by_class", (c_uint64 * STATS_CLASSES) * STATS_PROTOCOLS),
        ("requests_aborted", _PROTO_ARRAY),
        ("request_bytes_in", _PROTO_ARRAY),
        ("request_bytes_out", _PROTO_ARRAY),
        ("duration_buckets", (c_uint64 * STATS_BUCKETS) * STATS_PROTOCOLS),
        ("duration_sum_ns", _PROTO_ARRAY),
        ("open_connections", _PROTO_ARRAY), ("open_streams", _PROTO_ARRAY),
        ("tls_handshakes_full", c_uint64),
        ("tls_handshakes_resumed", c_uint64),
        ("tls_handshakes_failed", c_uint64), ("ws_open", c_uint64),
        ("ws_messages_in", c_uint64), ("ws_messages_out", c_uint64),
        ("rejected_limit", c_uint64), ("rejected_timeout", c_uint64),
        ("rejected_protocol", c_uint64), ("access_log_lines", c_uint64),
        ("access_log_dropped", c_uint64),
        # version 4
        ("reallocations", c_uint64),
        # version 5
        ("rejected_ip_connections", c_uint64),
        ("rejected_ip_rate", c_uint64),
        # version 6
        ("connections_handed_in", c_uint64),
        ("loop_lag_ns", c_uint64)]


# The version of each struct's layout above (tern.h's TERN_*_VERSION).
VERSIONS = {"ListenOptions": 2, "Settings": 5, "RouteOptions": 3, "WsOptions": 2,
            "QuicOptions": 2, "Stats": 6}
def init_struct(cls, init):
    """cls() filled by the library's sized _init (`init` + "_size"): the
    library writes the newest version of its struct that fits in this
    binding's layout and nothing past it (tern.h, "ABI"), so a library
    newer than the binding fills the fields the binding knows."""
    obj = cls()
    getattr(lib, init + "_size")(ctypes.byref(obj), ctypes.sizeof(cls))
    if obj.version < 1:
        raise ImportError("tern: %s_size wrote no version for %d bytes" % (
            init, ctypes.sizeof(cls)))
    return obj


class Header(Structure):
    _fields_ = [("name", c_void_p), ("name_len", c_size_t),
                ("value", c_void_p), ("value_len", c_size_t)]


class ErrorInfo(Structure):
    _fields_ = [("status", c_int), ("reason", c_char_p), ("allow", c_void_p),
                ("allow_len", c_size_t), ("request", c_void_p),
                ("reply", c_void_p)]


# ---------------------------------------------------------------------------
# Functions: name -> (restype, argtypes, handle) with handle "lib" (GIL
# released) or "fast" (GIL kept: short reads of the request).

_P = c_void_p
_SZ = POINTER(c_size_t)
_I = POINTER(c_int)
FUNCTIONS = {
    "tern_version": (c_char_p, [], "lib"),
    "tern_strerror": (c_char_p, [c_int], "lib"),
    "tern_version_number": (c_uint, [], "lib"),
    "tern_settings_init": (None, [_P], "lib"),
    "tern_settings_init_size": (None, [_P, c_size_t], "lib"),
    "tern_server_new": (c_int, [_P, POINTER(_P)], "lib"),
    "tern_server_free": (None, [_P], "lib"),
    "tern_listen": (c_int, [_P, c_char_p, c_int, _I], "lib"),
    "tern_run": (c_int, [_P], "lib"),
    "tern_stop": (c_int, [_P, c_uint32], "lib"),
    "tern_tls_new": (c_int, [_P, POINTER(_P)], "lib"),
    "tern_tls_add_cert_file": (c_int, [_P, c_char_p, c_char_p], "lib"),
    "tern_tls_add_cert_mem": (c_int, [_P, c_char_p, c_size_t, c_char_p,
                                      c_size_t], "lib"),
    "tern_tls_commit": (c_int, [_P], "lib"),
    "tern_tls_set_engine": (c_int, [_P, c_int], "lib"),
    "tern_tls_engine_name": (c_char_p, [_P], "lib"),
    "tern_tls_set_min_version": (c_int, [_P, c_int], "lib"),
    "tern_tls_set_client_ca_file": (c_int, [_P, c_char_p, c_int], "lib"),
    "tern_listen_with": (c_int, [_P, _P, _I], "lib"),
    "tern_listen_options_init_size": (None, [_P, c_size_t], "lib"),
    "tern_quic_options_init": (None, [_P], "lib"),
    "tern_quic_options_init_size": (None, [_P, c_size_t], "lib"),
    "tern_server_set_alt_svc": (c_int, [_P, c_char_p], "lib"),
    "tern_route_options_init": (None, [_P], "lib"),
    "tern_route_options_init_size": (None, [_P, c_size_t], "lib"),
    "tern_route": (c_int, [_P, c_char_p, c_char_p, handler_fn, _P], "lib"),
    "tern_route_with": (c_int, [_P, c_char_p, c_char_p, handler_fn, _P, _P],
                        "lib"),
    "tern_server_set_default_handler": (c_int, [_P, handler_fn, _P, _P], "lib"),
    "tern_request_route_status": (c_int, [_P], "fast"),
    "tern_request_allow": (_P, [_P, _SZ], "fast"),
    "tern_request_method": (_P, [_P, _SZ], "fast"),
    "tern_request_target": (_P, [_P, _SZ], "fast"),
    "tern_request_path": (_P, [_P, _SZ], "fast"),
    "tern_request_query": (_P, [_P, _SZ], "fast"),
    "tern_request_authority": (_P, [_P, _SZ], "fast"),
    "tern_request_protocol": (c_int, [_P], "fast"),
    "tern_request_early": (c_int, [_P], "fast"),
    "tern_request_tls": (c_int, [_P], "fast"),
    "tern_request_tls_client_cert": (_P, [_P, _SZ], "fast"),
    "tern_request_tls_cipher": (c_char_p, [_P], "fast"),
    "tern_request_host": (_P, [_P, _SZ], "fast"),
    "tern_request_tls_client_subject": (_P, [_P, _SZ], "fast"),
    "tern_request_param": (_P, [_P, c_char_p, c_size_t, _SZ], "fast"),
    "tern_request_header": (_P, [_P, c_char_p, c_size_t, _SZ], "fast"),
    "tern_request_header_count": (c_size_t, [_P], "fast"),
    "tern_request_header_at": (POINTER(Header), [_P, c_size_t], "fast"),
    "tern_request_peer": (c_int, [_P, c_char_p, c_size_t, _I], "fast"),
    "tern_request_local": (c_int, [_P, c_char_p, c_size_t, _I], "fast"),
    "tern_request_proxy_tlv": (_P, [_P, c_int, _SZ], "fast"),
    "tern_request_body": (_P, [_P, _SZ], "fast"),
    "tern_request_body_length": (ctypes.c_int64, [_P], "fast"),
    "tern_request_trailer_count": (c_size_t, [_P], "fast"),
    "tern_request_trailer_at": (POINTER(Header), [_P, c_size_t], "fast"),
    "tern_request_read": (c_int, [_P, body_fn, _P], "lib"),
    "tern_request_pause": (c_int, [_P], "lib"),
    "tern_request_resume": (c_int, [_P], "lib"),
    "tern_request_on_gone": (c_int, [_P, gone_fn, _P], "lib"),
    "tern_server_on_error": (c_int, [_P, error_fn, _P], "lib"),
    "tern_error_respond": (c_int, [_P, _P, c_size_t, _P, c_size_t], "lib"),
    "tern_server_on_response": (c_int, [_P, response_fn, _P], "lib"),
    "tern_response_head_add": (c_int, [_P, c_char_p, c_size_t, c_char_p,
                                       c_size_t], "fast"),
    "tern_response_head_get": (_P, [_P, c_char_p, c_size_t, _SZ], "fast"),
    "tern_respond": (c_int, [_P, c_int, _P, c_size_t, _P, c_size_t], "lib"),
    "tern_respond_ref": (c_int, [_P, c_int, _P, c_size_t, _P, c_size_t,
                                 release_fn, _P], "lib"),
    "tern_response_start": (c_int, [_P, c_int, _P, c_size_t, c_int64],
                            "lib"),
    "tern_respond_interim": (c_int, [_P, c_int, _P, c_size_t], "lib"),
    "tern_response_write": (c_int, [_P, _P, c_size_t, _P, _P], "lib"),
    "tern_response_write_ref": (c_int, [_P, _P, c_size_t, release_fn, _P],
                                "lib"),
    "tern_response_end": (c_int, [_P, _P, c_size_t], "lib"),
    "tern_response_abort": (c_int, [_P], "lib"),
    "tern_request_close_after": (c_int, [_P], "fast"),
    "tern_ws_options_init": (None, [_P], "lib"),
    "tern_ws_options_init_size": (None, [_P, c_size_t], "lib"),
    "tern_ws_is_upgrade": (c_int, [_P], "fast"),
    "tern_ws_protocol_offered": (c_int, [_P, c_char_p, c_size_t], "fast"),
    "tern_ws_accept": (c_int, [_P, _P, _P, POINTER(_P)], "lib"),
    # Server-Sent Events, at the ctypes level (tern.h's contract: a stream
    # is its worker's; publish through a hub from any thread).
    "tern_sse_options_init_size": (None, [_P, c_size_t], "lib"),
    "tern_sse_start": (c_int, [_P, _P, POINTER(_P)], "lib"),
    "tern_sse_send": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t],
                      "lib"),
    "tern_sse_close": (c_int, [_P], "lib"),
    "tern_sse_last_event_id": (_P, [_P, _SZ], "fast"),
    "tern_sse_request": (_P, [_P], "fast"),
    "tern_sse_hub_new": (c_int, [_P, POINTER(_P)], "lib"),
    "tern_sse_hub_free": (None, [_P], "lib"),
    "tern_sse_publish": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t],
                         "lib"),
    "tern_sse_hub_subscribers": (c_size_t, [_P], "fast"),
    "tern_sse_format": (c_int, [_P, c_size_t, _SZ, c_char_p, c_char_p,
                                c_char_p, c_size_t], "fast"),
    "tern_ws_send": (c_int, [_P, c_int, _P, c_size_t], "lib"),
    "tern_ws_send_fragment": (c_int, [_P, c_int, _P, c_size_t, c_int], "lib"),
    "tern_ws_ping": (c_int, [_P, _P, c_size_t], "lib"),
    "tern_ws_close": (c_int, [_P, c_int, c_char_p, c_size_t], "lib"),
    "tern_ws_broadcast": (c_int, [POINTER(_P), c_size_t, c_int, _P, c_size_t],
                          "lib"),
    "tern_ws_buffered": (c_size_t, [_P], "lib"),
    "tern_ws_pause": (c_int, [_P], "lib"),
    "tern_ws_resume": (c_int, [_P], "lib"),
    "tern_ws_protocol": (c_int, [_P], "lib"),
    "tern_ws_ref": (None, [_P], "lib"),
    "tern_ws_unref": (None, [_P], "lib"),
    "tern_stats_init": (None, [_P], "lib"),
    "tern_stats_init_size": (None, [_P, c_size_t], "lib"),
    "tern_server_stats": (c_int, [_P, _P], "lib"),
    "tern_server_worker_stats": (c_int, [_P, c_uint, _P], "lib"),
    "tern_stats_bucket_le": (c_uint64, [c_uint], "lib"),
    "tern_server_time_requests": (c_int, [_P, c_int], "lib"),
    "tern_server_workers": (c_uint, [_P], "lib"),
    "tern_request_worker": (c_int, [_P], "fast"),
    "tern_worker_call": (c_int, [_P, c_uint, worker_fn, _P], "lib"),
    "tern_ws_worker": (c_int, [_P], "lib"),
    "tern_metrics_handler": (None, [_P, _P], "lib"),
    "tern_tls_set_ticket_key": (c_int, [_P, c_char_p, c_size_t], "lib"),
    "tern_tls_set_previous_ticket_key": (c_int, [_P, c_char_p, c_size_t],
                                         "lib"),
}

# Exported and deliberately not bound, with the reason.
LEFT_OUT = {
    # The C helpers for what Python's standard library already does, on a
    # request's own strings (headers, query, body) that the binding hands
    # over as str and bytes.
    "tern_form_next": "urllib.parse.parse_qsl on Request.query or body",
    "tern_multipart_new": "email.parser.BytesFeedParser fed the Content-Type "
                          "field and the body (streaming too)",
    "tern_multipart_next": "email.parser.BytesFeedParser.feed",
    "tern_multipart_finished": "email.parser.BytesFeedParser.close",
    "tern_multipart_free": "(nothing to free in Python)",
    "tern_form_decode": "urllib.parse.unquote_plus",
    "tern_form_get": "urllib.parse.parse_qs on Request.query or body",
    "tern_request_cookie": "http.cookies.SimpleCookie on the Cookie header",
    "tern_cookie_next": "http.cookies.SimpleCookie",
    "tern_cookie_format": "http.cookies.SimpleCookie's output, or a header",
    "tern_request_basic_auth": "base64.b64decode of the Authorization header",
    "tern_basic_auth_parse": "base64.b64decode and str.partition",
    "tern_equal_secret": "hmac.compare_digest",
    # 0.1's listener calls, still exported for programs built against 0.1
    # (lib/core/abi_legacy.c); tern_listen_with replaced them.
    "tern_set_default_handler": "0.1's name, kept for 0.1 programs: "
                                "tern_server_set_default_handler",
    "tern_listen_tls": "0.1's call, kept for 0.1 programs: tern_listen_with",
    "tern_listen_ex": "0.1's call, kept for 0.1 programs: tern_listen_with",
    "tern_listen_unix": "0.1's call, kept for 0.1 programs: tern_listen_with",
    "tern_listen_fd": "0.1's call, kept for 0.1 programs: tern_listen_with",
    "tern_listen_quic": "0.1's call, kept for 0.1 programs: tern_listen_with",
    "tern_listen_quic_fd": "0.1's call, kept for 0.1 programs: "
                           "tern_listen_with",
    "tern_attach": "needs a libuv loop (uv_loop_t *) that Python has no "
                   "handle on; Server.run/start run tern's own threads",
    "tern_server_fork": "forks the process: not yet bound (a Python "
                        "program forks before it starts threads; the "
                        "ASGI/WSGI server's --workers is to use it)",
    "tern_request_ref": "a Request drops its pointer at the finishing "
                        "call and refuses later calls itself "
                        "(RequestFinished)",
    "tern_request_unref": "see tern_request_ref",
    "tern_request_set_data": "the binding keeps its per-request state in "
                             "the Request object",
    "tern_request_data": "the binding keeps its per-request state in the "
                         "Request object",
    "tern_ws_set_data": "the binding keeps its per-socket state in the "
                        "WebSocket object",
    "tern_ws_data": "the binding keeps its per-socket state in the "
                    "WebSocket object",
    "tern_request_loop": "a uv_loop_t * that Python has no handle on; "
                         "async handlers run on the binding's asyncio loop",
    "tern_ws_loop": "a uv_loop_t * that Python has no handle on",
    "tern_server_on_workers": "hands each worker's uv_loop_t * to C "
                              "callbacks, for libuv-based clients",
    "tern_server_on_access": "not yet bound: the access hook runs on the "
                             "worker for every request (planned)",
    "tern_access_log_options_init_size": "not yet bound (the built-in access log writer has no Python API yet)",
    "tern_access_log_options_init": "not yet bound (the built-in access "
                                    "log writer has no Python API yet)",
    "tern_server_access_log": "not yet bound (no Python API yet)",
    "tern_server_access_log_reopen": "not yet bound (no Python API yet)",
    "tern_listen_options_init": "the binding calls the sized "
                                "tern_listen_options_init_size",
    "tern_listen_fds_from_env": "os.environ's LISTEN_FDS can be read in "
                                "Python; each descriptor goes to listen_fd",
    "tern_listen_fds_from_env_named": "os.environ's LISTEN_FDS and "
                                      "LISTEN_FDNAMES can be read in Python",
    "tern_static_options_init_size": "not yet bound (the static-file handler has no Python API yet)",
    "tern_static_options_init": "not yet bound: the static-file handler "
                                "has no Python API yet",
    "tern_static_new": "not yet bound (static files)",
    "tern_static_free": "not yet bound (static files)",
    "tern_static_handler": "not yet bound (static files)",
    "tern_static_mount": "not yet bound (static files)",
    "tern_compress_options_init_size": "not yet bound (routes of the binding do not compress)",
    "tern_compress_options_init": "not yet bound: routes of the binding "
                                  "do not compress (RouteOptions.compress "
                                  "stays NULL)",
}


def _native_from(path):
    spec = importlib.util.spec_from_file_location("tern._native", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["tern._native"] = mod
    return mod


def _installed_native():
    path = os.environ.get("TERN_NATIVE")
    if path:
        return _native_from(path)
    try:
        from . import _native
        return _native
    except ImportError:
        return None


def _candidates(native):
    env = os.environ.get("TERN_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # the library the native module was linked with, so that one process
    # never holds two copies
    if native is not None and native.library_path():
        out.append(native.library_path())
    out.append(os.path.normpath(os.path.join(here, "..", "..", "..", "build",
                                             "libtern.so")))
    # a checkout's build directory, from its root
    out.append(os.path.join(os.getcwd(), "build", "libtern.so"))
    found = ctypes.util.find_library("tern")
    out.append(found or "libtern.so.0")
    return out


def _load(native):
    errors = []
    for path in _candidates(native):
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            return path, ctypes.CDLL(path), ctypes.PyDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("tern: libtern not found (set TERN_LIBRARY to the "
                      "path of libtern.so): " + "; ".join(errors))


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _native_for(path, native):
    """The native module to use with the library at `path`."""
    if native is not None and native.library_path() and \
            _same_file(native.library_path(), path):
        return native
    # a meson build puts the module beside its library (not in place of
    # one $TERN_NATIVE names: that mismatch is an error below)
    d = os.path.dirname(os.path.abspath(path))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        beside = os.path.join(d, "_native" + suffix)
        if os.path.exists(beside) and not os.environ.get("TERN_NATIVE"):
            return _native_from(beside)
    if native is not None:
        raise ImportError(
            "tern: the native module %s runs on %s, not on %s (unset "
            "TERN_LIBRARY, or set TERN_NATIVE to a module built against "
            "it)" % (native.__file__, native.library_path(), path))
    raise ImportError(
        "tern: the native module tern._native is not built (pip install "
        "bindings/python, or a meson build of the checkout with "
        "python3-dev: build/_native*.so)")


_native0 = _installed_native()
path, lib, fast = _load(_native0)
native = _native_for(path, _native0)
del _native0
for _name, (_res, _args, _h) in FUNCTIONS.items():
    for _handle in (lib, fast) if _h == "fast" else (lib,):
        _f = getattr(_handle, _name)
        _f.restype = _res
        _f.argtypes = _args

version = lib.tern_version().decode()
_parts = version.split(".")
if int(_parts[0]) != SUPPORTED_MAJOR or int(_parts[1]) < MIN_MINOR:
    raise ImportError("tern: %s is libtern %s; this binding supports %d.x "
                      "from %d.%d" % (path, version, SUPPORTED_MAJOR,
                                      SUPPORTED_MAJOR, MIN_MINOR, ))


def strerror(rc):
    return lib.tern_strerror(rc).decode()
