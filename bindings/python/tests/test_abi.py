"""The binding covers the C ABI: every symbol libtern exports is declared
(tern/_ffi.py FUNCTIONS) or listed as left out with a reason, and the
library takes what an older client lays out."""
import ctypes
import re
import shutil
import subprocess

import pytest

import tern
from tern import _ffi


def exported():
    out = subprocess.run(["nm", "-D", "--defined-only", _ffi.path],
                         capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r" T (tern_\w+)", out)}


@pytest.mark.skipif(not shutil.which("nm"), reason="nm (binutils) missing")
def test_every_export_bound_or_left_out():
    syms = exported()
    assert len(syms) > 50
    declared = set(_ffi.FUNCTIONS)
    left = set(_ffi.LEFT_OUT)
    assert not declared & left
    assert syms - declared - left == set(), "exported but not bound"
    assert (declared | left) - syms == set(), "bound but not exported"


def test_version_checked():
    v = _ffi.lib.tern_version().decode()
    assert v == tern.version
    major, minor = map(int, v.split(".")[:2])
    assert major == _ffi.SUPPORTED_MAJOR and minor >= _ffi.MIN_MINOR


def test_structs_match_the_header_sizes():
    for cls, init in ((_ffi.Settings, "tern_settings_init"),
                      (_ffi.RouteOptions, "tern_route_options_init"),
                      (_ffi.WsOptions, "tern_ws_options_init"),
                      (_ffi.QuicOptions, "tern_quic_options_init"),
                      (_ffi.Stats, "tern_stats_init")):
        # the sized _init with room to spare: the library's own layout,
        # nothing written past it but zeros within the size given
        scratch = (ctypes.c_ubyte * 16384)()
        ctypes.memset(scratch, 0xAB, len(scratch))
        getattr(_ffi.lib, init + "_size")(ctypes.byref(scratch), 8192)
        lib_version = ctypes.c_int.from_buffer(scratch, 0).value
        assert lib_version == _ffi.VERSIONS[cls.__name__], cls.__name__
        assert ctypes.c_uint32.from_buffer(scratch, 4).value == 8192
        assert bytes(scratch[8192:]) == b"\xab" * 8192, cls.__name__
        # exactly the binding's size: the same version
        obj = _ffi.init_struct(cls, init)
        assert (obj.version, obj.size) == (lib_version, ctypes.sizeof(cls))


def test_unsized_init_writes_version_1_only():
    """X_init without a size, as a program built against a 0.1 header
    calls it: version 1's fields and nothing past them, whatever the
    struct has grown to since (it once wrote 872 bytes of tern_stats into
    a program's 112)."""
    for cls, init in ((_ffi.SettingsV1, "tern_settings_init"),
                      (_ffi.StatsV1, "tern_stats_init")):
        buf = (ctypes.c_ubyte * 16384)()
        ctypes.memset(buf, 0xAB, len(buf))
        getattr(_ffi.lib, init)(ctypes.byref(buf))
        end = ctypes.c_uint32.from_buffer(buf, 4).value
        assert ctypes.c_int.from_buffer(buf, 0).value == 1
        assert end <= ctypes.sizeof(cls)
        assert bytes(buf[end:]) == b"\xab" * (len(buf) - end), cls.__name__


def test_init_struct_keeps_the_binding_layout():
    """A binding older than the library gets the library's defaults for
    the fields it knows, with its own version and size, and the library
    takes that (here: a version-2 tern_stats from a newer library)."""
    class StatsV2(ctypes.Structure):
        _fields_ = _ffi.StatsV2._fields_
    st = _ffi.init_struct(StatsV2, "tern_stats_init")
    assert (st.version, st.size) == (2, ctypes.sizeof(StatsV2))
    app = tern.Server(workers=1)
    try:
        assert _ffi.lib.tern_server_stats(app._srv, ctypes.byref(st)) == 0
        assert st.version == 2
    finally:
        app.stop()


def test_older_settings_layout_accepted():
    """A client built against version 1 of tern_settings (no window
    fields: a smaller struct) is served with the defaults for what it
    lacks; a struct smaller than its version's layout is refused."""
    full = _ffi.init_struct(_ffi.Settings, "tern_settings_init")
    old = _ffi.SettingsV1()
    ctypes.memmove(ctypes.byref(old), ctypes.byref(full),
                   ctypes.sizeof(_ffi.SettingsV1))
    old.version = 1
    old.size = ctypes.sizeof(_ffi.SettingsV1)
    old.workers = 1
    assert old.size < ctypes.sizeof(_ffi.Settings)
    srv = ctypes.c_void_p()
    assert _ffi.lib.tern_server_new(ctypes.byref(old), ctypes.byref(srv)) == 0
    _ffi.lib.tern_server_free(srv)
    # a size that cuts version 1's last field: not filled by its _init
    old.size = _ffi.SettingsV1.log_level.offset
    assert _ffi.lib.tern_server_new(ctypes.byref(old),
                                    ctypes.byref(srv)) == _ffi.EINVAL


def test_older_stats_layout_written_only_up_to_its_end():
    app = tern.Server(workers=1)
    try:
        buf = (ctypes.c_ubyte * (ctypes.sizeof(_ffi.Stats) + 16))()
        ctypes.memset(buf, 0xAB, len(buf))
        st = _ffi.StatsV1.from_buffer(buf)
        st.version = 1
        st.size = ctypes.sizeof(_ffi.StatsV1)
        assert _ffi.lib.tern_server_stats(app._srv, ctypes.byref(st)) == 0
        assert st.version == 1 and st.requests == 0
        assert bytes(buf[ctypes.sizeof(_ffi.StatsV1):]) == \
            b"\xab" * (len(buf) - ctypes.sizeof(_ffi.StatsV1))
    finally:
        app.stop()
