package main

// The tools of a pip install, which has neither Go nor the source tree:
// gohccl-sim's command line (`python -m gohccl.sim`) and the facts
// `python -m gohccl.info` reports. Strings handed to the caller are
// malloc'd; the caller frees them with gohccl_free.

/*
#include <stdlib.h>
#define GOHCCL_TYPES_ONLY
#include "include/gohccl.h"
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/sim/cli"
)

//export gohccl_free
func gohccl_free(p unsafe.Pointer) { C.free(p) }

//export gohccl_sim_main
func gohccl_sim_main(argc C.int, argv **C.char, out, errOut **C.char) (rc C.int) {
	var stdout, stderr bytes.Buffer
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(&stderr, "gohccl-sim: internal error (please report): %v\n%s", p, debug.Stack())
			rc = 2
		}
		if out != nil {
			*out = C.CString(stdout.String())
		}
		if errOut != nil {
			*errOut = C.CString(stderr.String())
		}
	}()
	args := make([]string, int(argc))
	for i, a := range unsafe.Slice(argv, int(argc)) {
		args[i] = C.GoString(a)
	}
	return C.int(cli.Main("gohccl-sim", args, &stdout, &stderr))
}

// varInfo is one GOHCCL_* variable as info reports it.
type varInfo struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	Default string `json:"default"`
	// Source is "environment" or "default".
	Source string `json:"source"`
	// Error, when set, says why the value is refused (init would fail).
	Error string `json:"error,omitempty"`
}

type hostInfo struct {
	Version     string    `json:"version"`
	ABIVersion  int       `json:"abi_version"`
	GoVersion   string    `json:"go_version"`
	GOARCH      string    `json:"goarch"`
	CPUModel    string    `json:"cpu_model"`
	CPUVendor   string    `json:"cpu_vendor"`
	LogicalCPUs int       `json:"logical_cpus"`
	CPUFeatures []string  `json:"cpu_features"`
	ReducePaths []string  `json:"reduce_paths"` // the ones this CPU runs, best last
	ReducePath  string    `json:"reduce_path"`  // what GOHCCL_SIMD picks here
	PathError   string    `json:"reduce_path_error,omitempty"`
	Vars        []varInfo `json:"vars"`
}

// hostFacts gathers what info reports without a communicator, reading the
// variables through lookup.
func hostFacts(lookup func(string) (string, bool)) hostInfo {
	h := hostInfo{Version: version, ABIVersion: int(C.GOHCCL_ABI_VERSION), GoVersion: runtime.Version(),
		GOARCH: runtime.GOARCH, CPUModel: cpuid.CPU.BrandName, CPUVendor: cpuid.CPU.VendorString,
		LogicalCPUs: runtime.NumCPU(), CPUFeatures: cpuid.CPU.FeatureSet(), ReducePaths: reduce.Paths()}
	simd := ""
	for _, v := range config.Vars {
		vi := varInfo{Name: v.Name, Value: v.Default, Default: v.Default, Source: "default"}
		if s, ok := lookup(v.Name); ok && strings.TrimSpace(s) != "" {
			vi.Value, vi.Source = s, "environment"
			// Each variable alone over the defaults: an error is this one's.
			if _, err := config.Load(func(n string) (string, bool) {
				if n == v.Name {
					return s, true
				}
				return "", false
			}); err != nil {
				vi.Error = err.Error()
			}
		}
		if v.Name == "GOHCCL_SIMD" {
			simd = strings.ToLower(strings.TrimSpace(vi.Value))
		}
		h.Vars = append(h.Vars, vi)
	}
	if p, err := reduce.PathNamed(simd); err != nil {
		h.PathError = err.Error()
		for i := range h.Vars {
			if h.Vars[i].Name == "GOHCCL_SIMD" && h.Vars[i].Error == "" {
				h.Vars[i].Error = err.Error()
			}
		}
	} else {
		h.ReducePath = p.Name()
	}
	return h
}

//export gohccl_info_json
func gohccl_info_json() *C.char {
	b, err := json.Marshal(hostFacts(cEnv))
	if err != nil {
		b = []byte(fmt.Sprintf(`{"error":%q}`, err.Error()))
	}
	return C.CString(string(b))
}

//export gohccl_comm_info_json
func gohccl_comm_info_json(h C.gohccl_comm, out **C.char, errBuf *C.char, errN C.size_t) (st C.gohccl_status) {
	defer guard(&st, errBuf, errN)
	c, err := lookupComm(h)
	if err != nil {
		return finish(err, errBuf, errN)
	}
	if out == nil {
		return finish(fmt.Errorf("%w: gohccl_comm_info_json needs an output pointer", comm.ErrInvalid), errBuf, errN)
	}
	b, err := json.Marshal(c.Info())
	if err != nil {
		return finish(err, errBuf, errN)
	}
	*out = C.CString(string(b))
	return C.GOHCCL_OK
}
