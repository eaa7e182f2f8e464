//go:build ignore

// gen_asm writes kernels_amd64.s and kernels_amd64.go: the AVX2 and AVX-512 kernels
// of every (dtype, op) that has a vector form, and the table that maps each pair to
// its function.
//
// Every kernel has the same shape. A lane is one vector's worth of elements: one load
// from a, one from b, the operator, one store to dst. The main loop runs several lanes
// per iteration, as many as the registers allow (up to 4), so that the loads of one
// lane overlap the arithmetic of another; a second loop finishes one lane at a time.
// The kernel only ever sees whole lanes: the Go wrapper (paths_amd64.go) hands the
// last partial lane to the scalar kernel. Nothing here is aligned: VEX and EVEX loads
// and stores take any address at full speed unless they cross a cache line, and the
// buffers come from arbitrary tensor views.
//
// Half types are widened to float32 in registers: float16 by VCVTPH2PS and rounded
// back by VCVTPS2PH with rounding control 0 (nearest even), bfloat16 by zero-extending
// to 32 bits and shifting left 16, and rounded back by integer arithmetic (add 0x7fff
// plus the lowest kept bit, shift right 16; NaN replaced by 0x7fc0), as in half.go.
//
// Run with: go generate ./goimpl/reduce
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// isa describes one instruction set's registers.
type isa struct {
	name   string // path name, the prefix of every function
	reg    string // full-width vector register prefix: "Y" or "Z"
	half   string // half-width register prefix: "X" or "Y"
	width  int    // bytes per full-width vector
	nregs  int    // vector registers available
	avx512 bool
}

var avx2 = isa{name: "avx2", reg: "Y", half: "X", width: 32, nregs: 16}
var avx512 = isa{name: "avx512", reg: "Z", half: "Y", width: 64, nregs: 32, avx512: true}

// A constant is a vector register filled once, before the loops, with one 32-bit
// pattern in every lane.
type constant struct {
	name    string
	pattern uint32
}

var (
	cOnes8   = constant{"ones8", 0x01010101}   // a byte 1 in every byte: bool normalisation
	cLow16   = constant{"low16", 0x00ff00ff}   // the low byte of every word: int8 product
	cOne32   = constant{"one32", 1}            // bfloat16 rounding: the lowest kept bit
	cBias32  = constant{"bias32", 0x7fff}      // bfloat16 rounding: just under half an ulp
	cNaN32   = constant{"nan32", 0x7fc0}       // bfloat16 NaN, already shifted down
	cAllOnes = constant{"allones", 0xffffffff} // AVX-512 float min/max: the NaN result
)

// lane holds the registers of one lane and the byte offset of its vector.
type lane struct {
	r     []string // r[0] = x and the result, r[1] = y, the rest scratch
	off   int
	k     string // an opmask register for this lane (AVX-512 only)
	isa   isa
	konst map[string]string
	out   *strings.Builder
}

func (l *lane) emit(format string, args ...any) {
	fmt.Fprintf(l.out, "\t"+format+"\n", args...)
}

// h returns the half-width name of a lane register: X3 for Y3, Y3 for Z3.
func (l *lane) h(r string) string { return l.isa.half + r[1:] }

func (l *lane) mem(base string) string {
	if l.off == 0 {
		return fmt.Sprintf("(%s)(BX*1)", base)
	}
	return fmt.Sprintf("%d(%s)(BX*1)", l.off, base)
}

// elem is how a dtype moves between memory and registers.
type elem struct {
	dt     string // DType constant
	prefix string // function name part
	size   int
	// kind picks the operator forms: "ps", "pd" (float), "b", "w", "d", "q" (integer,
	// by lane width), "ub" (unsigned bytes), "bool".
	kind string
	// narrow: the element in memory is half the width of its register form, so a lane
	// reads width/2 bytes (float16, bfloat16).
	narrow bool
	load   func(l *lane, dst, base string)
	store  func(l *lane) // stores l.r[0], may use l.r[1], l.r[2]
	consts func(isa) []constant
	temps  int // registers the store needs, r[0] included
}

func plainLoad(l *lane, dst, base string) { l.emit("VMOVUPS %s, %s", l.mem(base), dst) }
func plainStore(l *lane)                  { l.emit("VMOVUPS %s, %s", l.r[0], l.mem("DI")) }

func f16Load(l *lane, dst, base string) { l.emit("VCVTPH2PS %s, %s", l.mem(base), dst) }
func f16Store(l *lane)                  { l.emit("VCVTPS2PH $0, %s, %s", l.r[0], l.mem("DI")) }

func bf16Load(l *lane, dst, base string) {
	l.emit("VPMOVZXWD %s, %s", l.mem(base), dst)
	l.emit("VPSLLD $16, %s, %s", dst, dst)
}

func bf16Store(l *lane) {
	x, t, u := l.r[0], l.r[1], l.r[2]
	and := "VPAND"
	if l.isa.avx512 {
		and = "VPANDD"
	}
	l.emit("VPSRLD $16, %s, %s", x, t)
	l.emit("%s %s, %s, %s", and, l.konst["one32"], t, t)
	l.emit("VPADDD %s, %s, %s", l.konst["bias32"], t, t)
	l.emit("VPADDD %s, %s, %s", x, t, t)
	l.emit("VPSRLD $16, %s, %s", t, t)
	if l.isa.avx512 {
		l.emit("VCMPPS $3, %s, %s, %s", x, x, l.k) // unordered: x is NaN
		l.emit("VMOVDQU32 %s, %s, %s", l.konst["nan32"], l.k, t)
		l.emit("VPMOVDW %s, %s", t, l.mem("DI"))
		return
	}
	l.emit("VCMPPS $3, %s, %s, %s", x, x, u)
	l.emit("VBLENDVPS %s, %s, %s, %s", u, l.konst["nan32"], t, t)
	// Every dword now holds a value below 0x10000, so unsigned saturation packs it
	// exactly; VPACKUSDW works within 128-bit halves, hence the extract.
	l.emit("VEXTRACTI128 $1, %s, %s", t, l.h(u))
	l.emit("VPACKUSDW %s, %s, %s", l.h(u), l.h(t), l.h(t))
	l.emit("VMOVDQU %s, %s", l.h(t), l.mem("DI"))
}

func none(isa) []constant { return nil }

var elems = []elem{
	{"Float32", "F32", 4, "ps", false, plainLoad, plainStore, none, 1},
	{"Float64", "F64", 8, "pd", false, plainLoad, plainStore, none, 1},
	{"Float16", "F16", 2, "ps", true, f16Load, f16Store, none, 1},
	{"BFloat16", "BF16", 2, "ps", true, bf16Load, bf16Store,
		func(isa) []constant { return []constant{cOne32, cBias32, cNaN32} }, 3},
	{"Int8", "I8", 1, "b", false, plainLoad, plainStore, none, 1},
	{"Uint8", "U8", 1, "ub", false, plainLoad, plainStore, none, 1},
	{"Int16", "I16", 2, "w", false, plainLoad, plainStore, none, 1},
	{"Int32", "I32", 4, "d", false, plainLoad, plainStore, none, 1},
	{"Int64", "I64", 8, "q", false, plainLoad, plainStore, none, 1},
	{"Bool", "Bool", 1, "bool", false, plainLoad, plainStore, none, 1},
}

// combine is one operator on one kind: it leaves x op y in r[0].
type combine struct {
	temps  int
	consts []constant
	emit   func(l *lane)
}

// combines returns the operator forms for a kind on an ISA; a missing op has no
// vector form and stays scalar.
func combines(in isa, kind string) map[string]combine {
	bitwise := func(op string) combine {
		if in.avx512 {
			op += "Q" // VPANDQ and friends: the EVEX forms carry a lane width
		}
		return combine{2, nil, func(l *lane) { l.emit("%s %s, %s, %s", op, l.r[1], l.r[0], l.r[0]) }}
	}
	simple := func(op string) combine {
		return combine{2, nil, func(l *lane) { l.emit("%s %s, %s, %s", op, l.r[1], l.r[0], l.r[0]) }}
	}
	m := map[string]combine{}
	switch kind {
	case "ps", "pd":
		s := strings.ToUpper(kind)
		m["Sum"] = simple("VADD" + s)
		m["Product"] = simple("VMUL" + s)
		// VMAXPS and VMINPS return their second source when the inputs are equal
		// (so for -0 and +0) or either is NaN. Taking both orders and combining them
		// bitwise orders the zeros (and keeps equal values), and OR-ing in the
		// unordered mask turns any NaN into the all-ones NaN.
		minmax := func(op, join string) combine {
			cs := []constant(nil)
			if in.avx512 {
				cs = []constant{cAllOnes}
			}
			return combine{4, cs, func(l *lane) {
				x, y, t, u := l.r[0], l.r[1], l.r[2], l.r[3]
				l.emit("%s%s %s, %s, %s", op, s, y, x, t)
				l.emit("%s%s %s, %s, %s", op, s, x, y, u)
				if in.avx512 {
					l.emit("VCMPP%s $3, %s, %s, %s", s[1:], y, x, l.k)
					l.emit("%s%s %s, %s, %s", join, s, u, t, x)
					mov := "VMOVDQU32"
					if kind == "pd" {
						mov = "VMOVDQU64"
					}
					l.emit("%s %s, %s, %s", mov, l.konst["allones"], l.k, x)
					return
				}
				l.emit("%s%s %s, %s, %s", join, s, u, t, t)
				l.emit("VCMPP%s $3, %s, %s, %s", s[1:], y, x, u)
				l.emit("VOR%s %s, %s, %s", s, u, t, x)
			}}
		}
		m["Max"] = minmax("VMAX", "VAND")
		m["Min"] = minmax("VMIN", "VOR")
	case "b", "ub", "w", "d", "q":
		w := strings.ToUpper(kind[len(kind)-1:])
		m["Sum"] = simple("VPADD" + w)
		m["BAnd"] = bitwise("VPAND")
		m["BOr"] = bitwise("VPOR")
		m["BXor"] = bitwise("VPXOR")
		sign := "S"
		if kind == "ub" {
			sign = "U"
		}
		if kind != "q" || in.avx512 {
			m["Min"] = simple("VPMIN" + sign + w)
			m["Max"] = simple("VPMAX" + sign + w)
		} else {
			// AVX2 has no 64-bit min/max: compare, then pick by the mask.
			pick := func(max bool) combine {
				return combine{3, nil, func(l *lane) {
					x, y, mask := l.r[0], l.r[1], l.r[2]
					l.emit("VPCMPGTQ %s, %s, %s", y, x, mask) // x > y
					if max {
						l.emit("VPBLENDVB %s, %s, %s, %s", mask, x, y, x)
					} else {
						l.emit("VPBLENDVB %s, %s, %s, %s", mask, y, x, x)
					}
				}}
			}
			m["Min"] = pick(false)
			m["Max"] = pick(true)
		}
		switch kind {
		case "w":
			m["Product"] = simple("VPMULLW")
		case "d":
			m["Product"] = simple("VPMULLD")
		case "q":
			if in.avx512 {
				m["Product"] = simple("VPMULLQ")
				break
			}
			// The low 64 bits of x*y are lo(x)*lo(y) + (hi(x)*lo(y) + lo(x)*hi(y)) << 32.
			m["Product"] = combine{4, nil, func(l *lane) {
				x, y, t, u := l.r[0], l.r[1], l.r[2], l.r[3]
				l.emit("VPSRLQ $32, %s, %s", x, t)
				l.emit("VPMULUDQ %s, %s, %s", y, t, t)
				l.emit("VPSRLQ $32, %s, %s", y, u)
				l.emit("VPMULUDQ %s, %s, %s", u, x, u)
				l.emit("VPADDQ %s, %s, %s", u, t, t)
				l.emit("VPSLLQ $32, %s, %s", t, t)
				l.emit("VPMULUDQ %s, %s, %s", y, x, x)
				l.emit("VPADDQ %s, %s, %s", t, x, x)
			}}
		case "b", "ub":
			// No byte multiply: multiply words twice. The low byte of a word product
			// is the product of the low bytes; shifting both words right by 8 first
			// gives the product of the high bytes.
			and, or := "VPAND", "VPOR"
			if in.avx512 {
				and, or = "VPANDQ", "VPORQ"
			}
			m["Product"] = combine{3, []constant{cLow16}, func(l *lane) {
				x, y, t := l.r[0], l.r[1], l.r[2]
				l.emit("VPMULLW %s, %s, %s", y, x, t)
				l.emit("%s %s, %s, %s", and, l.konst["low16"], t, t)
				l.emit("VPSRLW $8, %s, %s", x, x)
				l.emit("VPSRLW $8, %s, %s", y, y)
				l.emit("VPMULLW %s, %s, %s", y, x, x)
				l.emit("VPSLLW $8, %s, %s", x, x)
				l.emit("%s %s, %s, %s", or, t, x, x)
			}}
		}
	case "bool":
		// min(v, 1) over unsigned bytes maps any non-zero byte to 1.
		or, xor := "VPOR", "VPXOR"
		if in.avx512 {
			or, xor = "VPORQ", "VPXORQ"
		}
		c := []constant{cOnes8}
		anyTrue := combine{2, c, func(l *lane) {
			l.emit("%s %s, %s, %s", or, l.r[1], l.r[0], l.r[0])
			l.emit("VPMINUB %s, %s, %s", l.konst["ones8"], l.r[0], l.r[0])
		}}
		all := combine{2, c, func(l *lane) {
			l.emit("VPMINUB %s, %s, %s", l.r[1], l.r[0], l.r[0])
			l.emit("VPMINUB %s, %s, %s", l.konst["ones8"], l.r[0], l.r[0])
		}}
		one := combine{2, c, func(l *lane) {
			l.emit("VPMINUB %s, %s, %s", l.konst["ones8"], l.r[0], l.r[0])
			l.emit("VPMINUB %s, %s, %s", l.konst["ones8"], l.r[1], l.r[1])
			l.emit("%s %s, %s, %s", xor, l.r[1], l.r[0], l.r[0])
		}}
		m["Sum"], m["Max"], m["BOr"] = anyTrue, anyTrue, anyTrue
		m["Product"], m["Min"], m["BAnd"] = all, all, all
		m["BXor"] = one
	}
	return m
}

var opOrder = []string{"Sum", "Product", "Min", "Max", "BAnd", "BOr", "BXor"}

type gen struct {
	s       bytes.Buffer // assembly
	decl    bytes.Buffer // Go declarations
	table   map[string]*bytes.Buffer
	divides map[string]*bytes.Buffer
}

// fn describes one assembly function for emit.
type fn struct {
	name   string
	sig    string // the Go signature after the name, for the comment and the declaration
	frame  string // argument frame size
	args   string // instructions that load the arguments into DI, SI, DX, CX
	consts []constant
	temps  int // vector registers per lane
	step   int // bytes of each operand per lane
	lane   func(l *lane)
	// extra, if set, fills a vector register before the loops (the divisor).
	extra func(r string) string
}

// kernel emits the binary kernel dst = a op b for one (isa, dtype, op).
func (g *gen) kernel(in isa, e elem, op string, c combine) {
	f := fn{
		name:   fmt.Sprintf("%s%s%s", in.name, e.prefix, op),
		sig:    "(dst, a, b *byte, n int)",
		frame:  "$0-32",
		args:   "\tMOVQ dst+0(FP), DI\n\tMOVQ a+8(FP), SI\n\tMOVQ b+16(FP), DX\n\tMOVQ n+24(FP), CX\n",
		consts: append(append([]constant(nil), c.consts...), e.consts(in)...),
		temps:  max(c.temps, e.temps, 2),
		step:   laneBytes(in, e),
		lane: func(l *lane) {
			e.load(l, l.r[0], "SI")
			e.load(l, l.r[1], "DX")
			c.emit(l)
			e.store(l)
		},
	}
	g.emit(in, f)
	fmt.Fprintf(g.table[in.name], "\t\t%s: {%s, %d},\n", op, f.name, f.step)
}

// divide emits buf[i] /= d for one (isa, float dtype): the vector form of
// DivideInPlace. VDIVPS and VDIVPD round exactly as the scalar division does.
func (g *gen) divide(in isa, e elem) {
	wide := "float32"
	bcast, div, frame := "VBROADCASTSS", "VDIVPS", "$0-20"
	if e.kind == "pd" {
		wide, bcast, div, frame = "float64", "VBROADCASTSD", "VDIVPD", "$0-24"
	}
	f := fn{
		name:   fmt.Sprintf("%s%sDivide", in.name, e.prefix),
		sig:    fmt.Sprintf("(buf *byte, n int, d %s)", wide),
		frame:  frame,
		args:   "\tMOVQ buf+0(FP), DI\n\tMOVQ DI, SI\n\tMOVQ n+8(FP), CX\n",
		consts: e.consts(in),
		temps:  max(e.temps, 1),
		step:   laneBytes(in, e),
		extra:  func(r string) string { return fmt.Sprintf("\t%s d+16(FP), %s\n", bcast, r) },
	}
	f.lane = func(l *lane) {
		e.load(l, l.r[0], "SI")
		l.emit("%s %s, %s, %s", div, l.konst["divisor"], l.r[0], l.r[0])
		e.store(l)
	}
	g.emit(in, f)
	field := "f32"
	if e.kind == "pd" {
		field = "f64"
	}
	fmt.Fprintf(g.divides[in.name], "\t%s: {%s: %s, step: %d},\n", e.dt, field, f.name, f.step)
}

// laneBytes is the number of bytes of each operand one lane covers.
func laneBytes(in isa, e elem) int {
	if e.narrow {
		return in.width / 2
	}
	return in.width
}

// emit writes one function: constants, the unrolled loop, the one-lane loop.
func (g *gen) emit(in isa, f fn) {
	konst := map[string]string{}
	var setup strings.Builder
	next := in.nregs - 1
	if f.extra != nil {
		r := fmt.Sprintf("%s%d", in.reg, next)
		next--
		konst["divisor"] = r
		setup.WriteString(f.extra(r))
	}
	for _, k := range f.consts {
		if _, ok := konst[k.name]; ok {
			continue
		}
		r := fmt.Sprintf("%s%d", in.reg, next)
		next--
		konst[k.name] = r
		switch {
		case in.avx512 && k.pattern == 0xffffffff:
			fmt.Fprintf(&setup, "\tVPTERNLOGD $0xff, %s, %s, %s\n", r, r, r)
		case in.avx512:
			fmt.Fprintf(&setup, "\tMOVL $0x%x, AX\n\tVPBROADCASTD AX, %s\n", k.pattern, r)
		default:
			fmt.Fprintf(&setup, "\tMOVL $0x%x, AX\n\tMOVQ AX, X%d\n\tVPBROADCASTD X%d, %s\n", k.pattern, next+1, next+1, r)
		}
	}
	unroll := min(4, (next+1)/f.temps)
	step := f.step

	lanes := make([]*lane, unroll)
	var body strings.Builder
	for j := range lanes {
		l := &lane{off: j * step, isa: in, konst: konst, out: &body, k: fmt.Sprintf("K%d", j+1)}
		for t := range f.temps {
			l.r = append(l.r, fmt.Sprintf("%s%d", in.reg, j*f.temps+t))
		}
		lanes[j] = l
	}
	// One lane after another: the loads come first in each, so the out-of-order core
	// overlaps one lane's loads with the previous lane's arithmetic.
	emitLanes := func(ls []*lane) string {
		body.Reset()
		for _, l := range ls {
			f.lane(l)
		}
		return body.String()
	}
	main := emitLanes(lanes)
	one := emitLanes(lanes[:1])

	fmt.Fprintf(&g.s, "// func %s%s\n", f.name, f.sig)
	fmt.Fprintf(&g.s, "TEXT ·%s(SB), NOSPLIT, %s\n", f.name, f.frame)
	g.s.WriteString(f.args)
	g.s.WriteString(setup.String())
	fmt.Fprintf(&g.s, "\tMOVQ CX, R8\n\tSUBQ $%d, R8\n\tXORQ BX, BX\n\tCMPQ BX, R8\n\tJGT one\n", unroll*step)
	g.s.WriteString("loop:\n" + main)
	fmt.Fprintf(&g.s, "\tADDQ $%d, BX\n\tCMPQ BX, R8\n\tJLE loop\n", unroll*step)
	g.s.WriteString("one:\n\tCMPQ BX, CX\n\tJGE done\n")
	g.s.WriteString("oneloop:\n" + one)
	fmt.Fprintf(&g.s, "\tADDQ $%d, BX\n\tCMPQ BX, CX\n\tJLT oneloop\n", step)
	g.s.WriteString("done:\n\tVZEROUPPER\n\tRET\n\n")

	fmt.Fprintf(&g.decl, "//go:noescape\nfunc %s%s\n\n", f.name, f.sig)
}

func main() {
	out := flag.String("out", ".", "directory to write the generated files to (TestGeneratedFiles uses a temporary one)")
	flag.Parse()
	g := &gen{table: map[string]*bytes.Buffer{}, divides: map[string]*bytes.Buffer{}}
	g.s.WriteString("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build !purego\n\n#include \"textflag.h\"\n\n")
	for _, in := range []isa{avx2, avx512} {
		t := &bytes.Buffer{}
		g.table[in.name] = t
		for _, e := range elems {
			cs := combines(in, e.kind)
			fmt.Fprintf(t, "\t%s: {\n", e.dt)
			for _, op := range opOrder {
				if c, ok := cs[op]; ok {
					g.kernel(in, e, op, c)
				}
			}
			t.WriteString("\t},\n")
		}
		g.divides[in.name] = &bytes.Buffer{}
		for _, e := range elems {
			if e.kind == "ps" || e.kind == "pd" {
				g.divide(in, e)
			}
		}
	}
	var goSrc bytes.Buffer
	goSrc.WriteString("// Code generated by gen_asm.go; DO NOT EDIT.\n\n//go:build !purego\n\npackage reduce\n\n")
	goSrc.Write(g.decl.Bytes())
	for _, in := range []isa{avx2, avx512} {
		fmt.Fprintf(&goSrc, "// %sKernels are the %s kernels, by dtype and op.\nvar %sKernels = [numDTypes][numOps]asmKernel{\n", in.name, in.name, in.name)
		goSrc.Write(g.table[in.name].Bytes())
		goSrc.WriteString("}\n\n")
		fmt.Fprintf(&goSrc, "// %sDivides are the %s kernels of DivideInPlace for the float types.\nvar %sDivides = [numDTypes]asmDivide{\n", in.name, in.name, in.name)
		goSrc.Write(g.divides[in.name].Bytes())
		goSrc.WriteString("}\n\n")
	}
	src, err := format.Source(goSrc.Bytes())
	if err != nil {
		log.Fatalf("gofmt: %v\n%s", err, goSrc.Bytes())
	}
	if err := os.WriteFile(filepath.Join(*out, "kernels_amd64.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "kernels_amd64.s"), g.s.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
