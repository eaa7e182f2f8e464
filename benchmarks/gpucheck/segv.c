// segv.so: LD_PRELOAD it to get, when a process dies of SIGSEGV or SIGBUS,
// the faulting address, the library and nearest symbol of the faulting
// instruction, and a backtrace, on stderr; then the process dies of the
// signal as it would have. Go's runtime (libgohccl) forwards a fault in
// non-Go code to the handler installed before it, which is this one.
//   cc -shared -fPIC -O1 -o segv.so segv.c
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(void* p, const char* what) {
  char buf[768];
  Dl_info info;
  int n;
  if (dladdr(p, &info) && info.dli_fname) {
    n = snprintf(buf, sizeof buf, "  %s %p %s+%#lx (%s+%#lx)\n", what, p, info.dli_fname,
                 (unsigned long)((char*)p - (char*)info.dli_fbase), info.dli_sname ? info.dli_sname : "?",
                 info.dli_saddr ? (unsigned long)((char*)p - (char*)info.dli_saddr) : 0UL);
  } else {
    n = snprintf(buf, sizeof buf, "  %s %p\n", what, p);
  }
  if (n > 0) write(2, buf, n < (int)sizeof buf ? n : (int)sizeof buf - 1);
}

static void handler(int sig, siginfo_t* si, void* ctx) {
  ucontext_t* uc = ctx;
  char buf[256];
  int n = snprintf(buf, sizeof buf, "segv.so: signal %d at address %p, pid %d tid %d\n", sig, si->si_addr,
                   getpid(), gettid());
  write(2, buf, n);
  say((void*)uc->uc_mcontext.gregs[REG_RIP], "pc");
  void* frames[48];
  int k = backtrace(frames, 48);
  for (int i = 0; i < k; i++) say(frames[i], "frame");
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, NULL);
  sigaction(SIGBUS, &sa, NULL);
}
