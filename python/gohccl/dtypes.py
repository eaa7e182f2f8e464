"""The torch dtypes gohccl serves, declared once for Python.

ELEMENT_TYPES maps libgohccl's element type names to their codes in the C ABI
(gohccl_dtype in capi/include/gohccl.h). SERVED maps each torch dtype name the
backend accepts to the element type it travels as and how many of those make
one of its elements (a complex number travels as its real and imaginary
parts). The C++ shim (csrc/Collective.cpp) and Go (goimpl/reduce/dtype.go)
declare the same lists; tests/test_dtypes.py checks the three against each
other.
"""

ELEMENT_TYPES = {
    "float32": 0,
    "float64": 1,
    "float16": 2,
    "bfloat16": 3,
    "int8": 4,
    "uint8": 5,
    "int16": 6,
    "int32": 7,
    "int64": 8,
    "bool": 9,
}

# torch dtype name -> (element type name, elements per torch element)
SERVED = {name: (name, 1) for name in ELEMENT_TYPES}
SERVED.update({
    "complex32": ("float16", 2),
    "complex64": ("float32", 2),
    "complex128": ("float64", 2),
})

__all__ = ["ELEMENT_TYPES", "SERVED"]
