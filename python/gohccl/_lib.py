"""libgohccl's tool exports (capi/tools.go), called through ctypes: the
simulator's command line and the facts `python -m gohccl.info` reports. The
library is the one beside the extension (gohccl/lib/libgohccl.so), so these
work from an installed wheel without Go or the source tree."""

import ctypes
import json
import os

_lib = None


def library():
    """The loaded libgohccl with the tools' signatures declared."""
    global _lib
    if _lib is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libgohccl.so")
        lib = ctypes.CDLL(path)
        lib.gohccl_free.argtypes = [ctypes.c_void_p]
        lib.gohccl_free.restype = None
        lib.gohccl_sim_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.gohccl_sim_main.restype = ctypes.c_int
        lib.gohccl_info_json.argtypes = []
        lib.gohccl_info_json.restype = ctypes.c_void_p
        lib.gohccl_comm_info_json.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_void_p),
                                              ctypes.c_char_p, ctypes.c_size_t]
        lib.gohccl_comm_info_json.restype = ctypes.c_int
        _lib = lib
    return _lib


def _take(p):
    """The string at the library-allocated pointer p, which is then freed."""
    if not p:
        return ""
    try:
        return ctypes.string_at(p).decode("utf-8", "replace")
    finally:
        library().gohccl_free(p)


def sim_main(args):
    """Runs gohccl-sim with args; returns (exit status, stdout, stderr)."""
    argv = (ctypes.c_char_p * max(len(args), 1))(*[a.encode() for a in args])
    out, err = ctypes.c_void_p(), ctypes.c_void_p()
    rc = library().gohccl_sim_main(len(args), argv, ctypes.byref(out), ctypes.byref(err))
    return rc, _take(out.value), _take(err.value)


def host_info():
    """gohccl_info_json, decoded."""
    return json.loads(_take(library().gohccl_info_json()))


def comm_info(handle):
    """gohccl_comm_info_json for the communicator handle, decoded."""
    out = ctypes.c_void_p()
    msg = ctypes.create_string_buffer(1024)
    st = library().gohccl_comm_info_json(handle, ctypes.byref(out), msg, len(msg))
    if st != 0:
        raise RuntimeError(f"gohccl_comm_info_json: status {st}: {msg.value.decode(errors='replace')}")
    return json.loads(_take(out.value))
