// Collective: one torch operation as one call of libgohccl's gohccl_run.
//
// libgohccl reads one flat buffer and writes one (the same one, for the
// operations that work in place: all-reduce, broadcast, reduce). torch hands
// the shim tensors in lists, coalesced groups and blocks of single tensors.
// A Layout says where each of those tensors lies in a flat buffer; a
// Collective is the call with a Layout on either side, and Collective::run
// is the one body every operation shares: pack the input (Layout::read), a
// buffer for the output (Layout::scratch), gohccl_run, unpack
// (Layout::write). A layout of one whole tensor whose memory libgohccl can
// use as it is costs no copy: the tensor is the flat buffer.
//
// Device tensors (cuda, privateuseone) take the same path: the flat buffers
// are device memory, the packing copies and libgohccl's staging run on the
// caller's current stream at issue time (Place), and libgohccl stages the
// call through pinned host memory (docs/devices.md).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "gohccl.h"

namespace gohccl {

// kErrLen is the size of the buffer libgohccl writes its message into; a
// message names op, sequence number, peer and cause, well under this.
constexpr size_t kErrLen = 4096;

const char* statusName(gohccl_status status);

// throwGoError throws GoError for a failed call, with libgohccl's message
// err (verbatim) or, when it gave none, a sentence naming the status.
[[noreturn]] void throwGoError(gohccl_status status, const char* err);

// goCall runs one libgohccl call, f(err, err_len), and throws GoError with
// libgohccl's message if it fails.
template <typename F>
void goCall(F&& f) {
  char err[kErrLen];
  err[0] = '\0';
  const gohccl_status status = f(err, sizeof(err));
  if (status != GOHCCL_OK) {
    err[kErrLen - 1] = '\0';
    throwGoError(status, err);
  }
}

// ---- Element types ----

// DtypeInfo is one torch dtype the shim serves: the libgohccl element type
// it travels as, and how many of those make one torch element (2 for a
// complex number: its real and imaginary parts).
struct DtypeInfo {
  at::ScalarType torch;
  gohccl_dtype go;
  int lanes;
};

// dtypeTable is the shim's list of served dtypes, declared once in
// Collective.cpp; tests/test_dtypes.py compares it with Go's and Python's.
std::vector<DtypeInfo> dtypeTable();

// dtypeOf is st's row of the table; it throws a TypeError naming op and
// role (and the served dtypes) for a dtype the shim does not serve.
const DtypeInfo& dtypeOf(at::ScalarType st, const char* op, const std::string& role);

// countOf is t's element count in libgohccl's units.
uint64_t countOf(const at::Tensor& t);
gohccl_dtype goDtype(const at::Tensor& t);

// ---- Buffers ----

// isDirect says libgohccl can use t's memory as it is.
bool isDirect(const at::Tensor& t);
// scratchFor returns t, or an uninitialized contiguous tensor of its shape
// when it is not direct: an output buffer whose old values do not matter.
at::Tensor scratchFor(const at::Tensor& t);
// copyBack copies buf into dst unless they are the same tensor.
void copyBack(const at::Tensor& dst, const at::Tensor& buf);

// ---- Reduction operators ----

// Reduction is a torch ReduceOp as libgohccl runs it. PREMUL_SUM becomes SUM
// over inputs the shim has scaled by the factor first.
struct Reduction {
  gohccl_redop op = GOHCCL_SUM;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;

  void scaleInPlace(const at::Tensor& buf) const;
  // scaled returns a new tensor holding t's values times the factor.
  at::Tensor scaled(const at::Tensor& t) const;
};

// reductionOf maps rop onto libgohccl's operators for dtype st, refusing
// what is undefined for it (bitwise on floats, MIN on complex).
Reduction reductionOf(const c10d::ReduceOp& rop, at::ScalarType st, const char* op);

// ---- Layouts ----

// Layout: where torch's tensors lie in one flat buffer, as pieces: elements
// [start, start + n) of tensor i, in its own row-major order, at element
// `at` of the flat buffer.
class Layout {
 public:
  Layout() = default;

  // backToBack lays ts out one after the other, whole.
  static Layout backToBack(std::vector<at::Tensor> ts);
  // interleaved cuts each of ts into size equal blocks and lays out block r
  // of every tensor, in order, before the blocks r+1: the layout of the
  // coalesced single-tensor collectives, in which rank r's share of all the
  // tensors is one contiguous block.
  static Layout interleaved(std::vector<at::Tensor> ts, int size);

  // defined is false for the side of a call a rank has no buffer for (the
  // input of scatter off the root, the output of gather).
  bool defined() const {
    return !tensors_.empty();
  }
  int64_t numel() const {
    return numel_;
  }
  const std::vector<at::Tensor>& tensors() const {
    return tensors_;
  }
  // offsets are where the pieces start in the flat buffer: for a
  // backToBack layout, each tensor's offset.
  std::vector<int64_t> offsets() const;

  // read returns a flat buffer holding the tensors' values, scaled for
  // PREMUL_SUM. With mayModify false no tensor of the layout is written.
  at::Tensor read(const Reduction& red, bool mayModify) const;
  // scratch returns a flat buffer whose old contents do not matter: the
  // tensor itself when the layout is one direct tensor.
  at::Tensor scratch() const;
  // write copies flat, a buffer from read or scratch, into the tensors.
  void write(const at::Tensor& flat) const;

 private:
  struct Piece {
    size_t tensor;
    int64_t start;
    int64_t n;
    int64_t at;
  };

  // single: the layout is one whole tensor, so its flat buffer can have the
  // tensor's shape, and be the tensor itself when that is direct.
  bool single() const;
  bool direct() const;

  std::vector<at::Tensor> tensors_;
  std::vector<Piece> pieces_;
  int64_t numel_ = 0;
};

// ---- Where a call's memory lives ----

// Place is where a call's tensors live: host memory, or one device and the
// caller's current stream on it at issue time. Every copy of the call and
// libgohccl's staging run on that stream, so the call sees the work queued
// there before it, as a collective on NCCL's or Gloo's streams does.
struct Place {
  gohccl_memory memory = GOHCCL_MEMORY_HOST;
  int device = 0;
  std::optional<c10::Stream> stream;
  // handle is the stream's cudaStream_t / aclrtStream, taken at issue time.
  void* handle = nullptr;
};

// placeOf checks that every tensor of the layouts is on one device and
// returns its place. For a device it also records each tensor's memory as
// in use on the caller's stream, so the caching allocator does not hand it
// out again before the call's copies on that stream are done.
Place placeOf(std::initializer_list<const Layout*> layouts, const char* op);

// ---- The call ----

// Collective is one operation as libgohccl's gohccl_run takes it, with the
// layouts of torch's tensors on either side. The operations that work in
// place have an input only.
struct Collective {
  gohccl_call_kind kind = GOHCCL_CALL_BARRIER;
  Layout in;
  Layout out;
  // readsIn: the input's values are sent (not so off the root of a
  // broadcast, where the input is only written). writesIn: an in-place
  // result is written back (not so on the root of a broadcast, or off the
  // root of a reduce).
  bool readsIn = true;
  bool writesIn = true;
  gohccl_dtype dtype = GOHCCL_FLOAT32;
  // count is libgohccl's count: elements per rank, in its units.
  uint64_t count = 0;
  Reduction red;
  int rank = 0;
  int root = 0;
  int peer = 0;
  int64_t tag = 0;
  std::vector<uint64_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
  Place place;

  // make is a collective of kind moving perRank elements of ref's dtype
  // per rank from in to out.
  static Collective make(
      gohccl_call_kind kind,
      Layout in,
      Layout out,
      const at::Tensor& ref,
      int64_t perRank);

  // run packs the input, makes the call and unpacks the output. It returns
  // the sender's rank for a receive, -1 otherwise; it throws on failure.
  int run(gohccl_comm comm, int64_t ms) const;

 private:
  // aliased says src and dst share memory in a way libgohccl does not
  // serve.
  bool aliased(const at::Tensor& src, const at::Tensor& dst) const;
};

} // namespace gohccl
