package main

/*
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#define GOHCCL_TYPES_ONLY
#include "include/gohccl.h"

// The SIGUSR1 handler: it wakes the Go goroutine that writes the dumps by a
// byte on a pipe (write is async-signal-safe; nothing else here runs Go),
// then calls the handler that was installed before it, so that Python's
// signal module or faulthandler still see the signal. A handler installed
// later (signal.signal in Python) replaces this one instead.
static struct sigaction gohccl_prev_usr1;
static volatile int gohccl_usr1_fd = -1;

static void gohccl_usr1(int sig, siginfo_t* info, void* ctx) {
	int saved = errno;
	if (gohccl_usr1_fd >= 0) {
		char b = 1;
		ssize_t n = write(gohccl_usr1_fd, &b, 1); // a full pipe: a dump is pending anyway
		(void)n;
	}
	errno = saved;
	if (gohccl_prev_usr1.sa_flags & SA_SIGINFO) {
		if (gohccl_prev_usr1.sa_sigaction != NULL) {
			gohccl_prev_usr1.sa_sigaction(sig, info, ctx);
		}
	} else if (gohccl_prev_usr1.sa_handler != SIG_DFL && gohccl_prev_usr1.sa_handler != SIG_IGN) {
		gohccl_prev_usr1.sa_handler(sig);
	}
}

static int gohccl_install_usr1(int fd) {
	struct sigaction sa;
	if (sigaction(SIGUSR1, NULL, &gohccl_prev_usr1) != 0) {
		return errno;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = gohccl_usr1;
	// SA_ONSTACK: the signal may land on a Go thread (os/signal's rules
	// for non-Go handlers); SA_RESTART only if the previous handler asked.
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (gohccl_prev_usr1.sa_flags & SA_RESTART);
	sa.sa_mask = gohccl_prev_usr1.sa_mask;
	gohccl_usr1_fd = fd;
	if (sigaction(SIGUSR1, &sa, NULL) != 0) {
		gohccl_usr1_fd = -1;
		return errno;
	}
	return 0;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/gohccl/gohccl/goimpl/comm"
)

// dumpTraces writes the flight record of every live communicator into dir,
// or each one's GOHCCL_TRACE_DIR when dir is empty, and returns the paths
// written and the errors of the rest.
func dumpTraces(dir, reason string) ([]string, error) {
	handles.Lock()
	comms := make([]*comm.Comm, 0, len(handles.comms))
	for _, c := range handles.comms {
		comms = append(comms, c)
	}
	handles.Unlock()
	var paths []string
	var errs []error
	for _, c := range comms {
		target := dir
		if target == "" {
			target = c.TraceDir()
		}
		if target == "" {
			errs = append(errs, fmt.Errorf("%w: communicator %s (rank %d of %d) has no GOHCCL_TRACE_DIR and no directory was given",
				comm.ErrInvalid, c.ID(), c.Rank(), c.Size()))
			continue
		}
		p, err := c.DumpTrace(target, reason)
		if err != nil {
			errs = append(errs, fmt.Errorf("communicator %s rank %d: %v", c.ID(), c.Rank(), err))
			continue
		}
		paths = append(paths, p)
	}
	return paths, errors.Join(errs...)
}

//export gohccl_trace_dump
func gohccl_trace_dump(dir *C.char, paths *C.char, pathsN C.size_t, errBuf *C.char, errN C.size_t) (st C.gohccl_status) {
	defer guard(&st, errBuf, errN)
	d := ""
	if dir != nil {
		d = C.GoString(dir)
	}
	written, err := dumpTraces(d, "request")
	writeString(paths, pathsN, strings.Join(written, "\n"))
	return finish(err, errBuf, errN)
}

// traceSignal installs the SIGUSR1 handler once per process, when the first
// communicator with GOHCCL_TRACE_DIR is created; a failure to install is
// logged, never fatal.
var traceSignal = sync.OnceValue(func() error {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return fmt.Errorf("SIGUSR1 dump: pipe: %w", err)
	}
	r := os.NewFile(uintptr(fds[0]), "gohccl-sigusr1")
	if e := C.gohccl_install_usr1(C.int(fds[1])); e != 0 {
		r.Close()
		syscall.Close(fds[1])
		return fmt.Errorf("SIGUSR1 dump: sigaction: %w", syscall.Errno(e))
	}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := r.Read(buf); err != nil {
				return
			}
			paths, err := dumpTraces("", "signal SIGUSR1")
			for _, p := range paths {
				fmt.Fprintf(os.Stderr, "gohccl: SIGUSR1: flight record written to %s\n", p)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "gohccl: SIGUSR1: %v\n", err)
			}
		}
	}()
	return nil
})
