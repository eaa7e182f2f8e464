package reduce

import (
	"fmt"
	"strconv"
)

// DType is the element type of a reduced buffer. The values are part of the C ABI
// (capi passes them through unchanged), so they never change meaning.
type DType uint8

// The element types a buffer can hold. Every one is stored little-endian.
const (
	Float32  DType = 0
	Float64  DType = 1
	Float16  DType = 2 // IEEE 754 binary16
	BFloat16 DType = 3 // the upper half of a float32
	Int8     DType = 4
	Uint8    DType = 5
	Int16    DType = 6
	Int32    DType = 7
	Int64    DType = 8
	Bool     DType = 9 // one byte, 0 or 1
)

var dtypeNames = [...]string{
	Float32:  "float32",
	Float64:  "float64",
	Float16:  "float16",
	BFloat16: "bfloat16",
	Int8:     "int8",
	Uint8:    "uint8",
	Int16:    "int16",
	Int32:    "int32",
	Int64:    "int64",
	Bool:     "bool",
}

var dtypeSizes = [...]int{
	Float32:  4,
	Float64:  8,
	Float16:  2,
	BFloat16: 2,
	Int8:     1,
	Uint8:    1,
	Int16:    2,
	Int32:    4,
	Int64:    8,
	Bool:     1,
}

// Size returns the number of bytes of one element, or 0 for an invalid DType.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// String returns torch's name for the type without the "torch." prefix ("float32",
// "bfloat16", "bool"), or "dtype(N)" for an invalid one.
func (d DType) String() string {
	if !d.Valid() {
		return "dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypeNames[d]
}

// Valid reports whether d is one of the declared element types.
func (d DType) Valid() bool { return int(d) < len(dtypeNames) }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case Float32, Float64, Float16, BFloat16:
		return true
	}
	return false
}

// Op is a reduction operator. Like DType, the values are part of the C ABI.
type Op uint8

// The reduction operators, in the order of torch.distributed.ReduceOp.
const (
	Sum     Op = 0
	Product Op = 1
	Min     Op = 2
	Max     Op = 3
	BAnd    Op = 4
	BOr     Op = 5
	BXor    Op = 6
	Avg     Op = 7 // reduces as Sum; the caller divides once at the end with DivideInPlace
)

var opNames = [...]string{
	Sum:     "sum",
	Product: "product",
	Min:     "min",
	Max:     "max",
	BAnd:    "band",
	BOr:     "bor",
	BXor:    "bxor",
	Avg:     "avg",
}

// String returns the operator's lower-case name ("sum", "band", ...), or "op(N)" for an
// invalid one.
func (o Op) String() string {
	if !o.Valid() {
		return "op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// Valid reports whether o is one of the declared operators.
func (o Op) Valid() bool { return int(o) < len(opNames) }

func (o Op) isBitwise() bool { return o == BAnd || o == BOr || o == BXor }

// Check reports whether (dt, op) is supported. The error is a sentence that names both,
// so the shim can hand it to the user as it is.
func Check(dt DType, op Op) error {
	switch {
	case !dt.Valid():
		return fmt.Errorf("reduce: unknown dtype %s (op %s)", dt, op)
	case !op.Valid():
		return fmt.Errorf("reduce: unknown op %s (dtype %s)", op, dt)
	case op.isBitwise() && dt.IsFloat():
		return fmt.Errorf("reduce: op %s is not defined for %s (bitwise ops take integer or bool tensors)", op, dt)
	case op == Avg && dt == Bool:
		return fmt.Errorf("reduce: op avg is not defined for bool (an average of truth values is not a bool)")
	}
	return nil
}
