"""The dtype lists of the three languages agree.

Go's table (goimpl/reduce/dtype.go, read through the C ABI's
gohccl_dtype_info), the C++ shim's (csrc/Collective.cpp, through
gohccl._C._dtype_table, whose codes are the C header's gohccl_dtype values)
and Python's (gohccl.dtypes) must name the same element types with the same
codes and sizes, and the shim must serve exactly the torch dtypes Python
lists. A dtype added in one place and not the others fails here, naming the
place that lacks it."""

import ctypes
import os

import pytest
import torch

import gohccl
from gohccl import _C, dtypes

pytestmark = pytest.mark.timeout(60)

# Codes far past the last one, to catch a gap or a stray entry in Go's table.
MAX_CODE = 256


def go_table():
    """name -> (code, size in bytes), from libgohccl's own table."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(gohccl.__file__), "lib", "libgohccl.so"))
    info = lib.gohccl_dtype_info
    info.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]
    info.restype = ctypes.c_int
    table = {}
    for code in range(-1, MAX_CODE):
        name = ctypes.create_string_buffer(64)
        size = ctypes.c_int(0)
        if info(code, name, len(name), ctypes.byref(size)):
            table[name.value.decode()] = (code, size.value)
    return table


def torch_name(dtype):
    return str(dtype).removeprefix("torch.")


def test_go_and_python_element_types_agree():
    go = go_table()
    py = dtypes.ELEMENT_TYPES
    assert set(go) - set(py) == set(), "element types in Go (goimpl/reduce/dtype.go) missing from python/gohccl/dtypes.py"
    assert set(py) - set(go) == set(), "element types in python/gohccl/dtypes.py missing from Go (goimpl/reduce/dtype.go)"
    for name, (code, size) in go.items():
        assert py[name] == code, f"{name}: Go's code {code}, Python's {py[name]}"
        want = torch.empty((), dtype=getattr(torch, name)).element_size()
        assert size == want, f"{name}: Go says {size} bytes, torch {want}"


def test_shim_and_python_served_dtypes_agree():
    shim = {torch_name(dt): (code, lanes) for dt, code, lanes in _C._dtype_table()}
    py = {name: (dtypes.ELEMENT_TYPES[elem], lanes) for name, (elem, lanes) in dtypes.SERVED.items()}
    assert set(shim) - set(py) == set(), "dtypes the C++ shim serves missing from python/gohccl/dtypes.py"
    assert set(py) - set(shim) == set(), "dtypes in python/gohccl/dtypes.py the C++ shim (csrc/Collective.cpp) does not serve"
    assert shim == py
    # Every served dtype is its element type times lanes, byte for byte.
    go = go_table()
    for name, (elem, lanes) in dtypes.SERVED.items():
        size = torch.empty((), dtype=getattr(torch, name)).element_size()
        assert go[elem][1] * lanes == size, f"{name}: {lanes} x {elem} is not {size} bytes"

