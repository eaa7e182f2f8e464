// Collective: see Collective.hpp.
#include "Collective.hpp"

#include <ATen/MemoryOverlap.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include "ProcessGroupGoHCCL.hpp"

namespace gohccl {

const char* statusName(gohccl_status status) {
  switch (status) {
    case GOHCCL_OK:
      return "GOHCCL_OK";
    case GOHCCL_ERR_INVALID:
      return "GOHCCL_ERR_INVALID";
    case GOHCCL_ERR_TIMEOUT:
      return "GOHCCL_ERR_TIMEOUT";
    case GOHCCL_ERR_PEER:
      return "GOHCCL_ERR_PEER";
    case GOHCCL_ERR_MISMATCH:
      return "GOHCCL_ERR_MISMATCH";
    case GOHCCL_ERR_BROKEN:
      return "GOHCCL_ERR_BROKEN";
    case GOHCCL_ERR_BOOTSTRAP:
      return "GOHCCL_ERR_BOOTSTRAP";
    case GOHCCL_ERR_CONFIG:
      return "GOHCCL_ERR_CONFIG";
    case GOHCCL_ERR_CLOSED:
      return "GOHCCL_ERR_CLOSED";
    case GOHCCL_ERR_INTERNAL:
      return "GOHCCL_ERR_INTERNAL";
    default:
      return "an unknown status";
  }
}

void throwGoError(gohccl_status status, const char* err) {
  if (err[0] != '\0') {
    throw GoError(status, err);
  }
  throw GoError(
      status,
      c10::str(
          "gohccl: libgohccl failed with ",
          statusName(status),
          " (",
          status,
          ") and gave no message"));
}

// ---- Element types ----

namespace {

// kDtypes is every torch dtype the shim serves: the libgohccl element type
// it travels as, and how many of those one torch element is (a complex
// number travels as its real and imaginary parts). This is the C++ list of
// dtypes; tests/test_dtypes.py checks it against Go's (reduce.DType, through
// the C ABI) and Python's (gohccl.dtypes).
constexpr DtypeInfo kDtypes[] = {
    {at::kFloat, GOHCCL_FLOAT32, 1},
    {at::kDouble, GOHCCL_FLOAT64, 1},
    {at::kHalf, GOHCCL_FLOAT16, 1},
    {at::kBFloat16, GOHCCL_BFLOAT16, 1},
    {at::kChar, GOHCCL_INT8, 1},
    {at::kByte, GOHCCL_UINT8, 1},
    {at::kShort, GOHCCL_INT16, 1},
    {at::kInt, GOHCCL_INT32, 1},
    {at::kLong, GOHCCL_INT64, 1},
    {at::kBool, GOHCCL_BOOL, 1},
    {at::kComplexHalf, GOHCCL_FLOAT16, 2},
    {at::kComplexFloat, GOHCCL_FLOAT32, 2},
    {at::kComplexDouble, GOHCCL_FLOAT64, 2},
};

const DtypeInfo* dtypeInfo(at::ScalarType st) {
  for (const DtypeInfo& row : kDtypes) {
    if (row.torch == st) {
      return &row;
    }
  }
  return nullptr;
}

std::string servedDtypes() {
  std::string names;
  for (const DtypeInfo& row : kDtypes) {
    names += (names.empty() ? "" : ", ");
    names += c10::getDtypeNames(row.torch).first;
  }
  return names;
}

} // namespace

std::vector<DtypeInfo> dtypeTable() {
  return std::vector<DtypeInfo>(std::begin(kDtypes), std::end(kDtypes));
}

const DtypeInfo& dtypeOf(
    at::ScalarType st,
    const char* op,
    const std::string& role) {
  const DtypeInfo* row = dtypeInfo(st);
  TORCH_CHECK_TYPE(
      row != nullptr,
      "gohccl ",
      op,
      ": ",
      role,
      " has dtype ",
      st,
      ", which gohccl does not support; it supports ",
      servedDtypes());
  return *row;
}

gohccl_dtype goDtype(const at::Tensor& t) {
  return dtypeOf(t.scalar_type(), "", "").go;
}

// countOf is t's element count in libgohccl's units.
uint64_t countOf(const at::Tensor& t) {
  return static_cast<uint64_t>(t.numel()) *
      dtypeOf(t.scalar_type(), "", "").lanes;
}

// ---- Buffers ----

bool isDirect(const at::Tensor& t) {
  return t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

at::Tensor scratchFor(const at::Tensor& t) {
  if (isDirect(t)) {
    return t;
  }
  return at::empty(t.sizes(), t.options());
}

void copyBack(const at::Tensor& dst, const at::Tensor& buf) {
  if (!dst.is_same(buf)) {
    dst.copy_(buf);
  }
}

// ---- Reduction operators ----

namespace {

const char* redOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

} // namespace

void Reduction::scaleInPlace(const at::Tensor& buf) const {
  if (!premul) {
    return;
  }
  if (tensorFactor.defined()) {
    buf.mul_(tensorFactor);
  } else {
    buf.mul_(factor);
  }
}

at::Tensor Reduction::scaled(const at::Tensor& t) const {
  return tensorFactor.defined() ? t.mul(tensorFactor) : t.mul(factor);
}

Reduction reductionOf(
    const c10d::ReduceOp& rop,
    at::ScalarType st,
    const char* op) {
  const bool floating = at::isFloatingType(st);
  const bool complex = at::isComplexType(st);
  const c10d::ReduceOp::RedOpType type = rop.op_;
  Reduction r;
  switch (type) {
    case c10d::ReduceOp::SUM:
      r.op = GOHCCL_SUM;
      break;
    case c10d::ReduceOp::AVG:
      r.op = GOHCCL_AVG;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = GOHCCL_PRODUCT;
      break;
    case c10d::ReduceOp::MIN:
      r.op = GOHCCL_MIN;
      break;
    case c10d::ReduceOp::MAX:
      r.op = GOHCCL_MAX;
      break;
    case c10d::ReduceOp::BAND:
      r.op = GOHCCL_BAND;
      break;
    case c10d::ReduceOp::BOR:
      r.op = GOHCCL_BOR;
      break;
    case c10d::ReduceOp::BXOR:
      r.op = GOHCCL_BXOR;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK_TYPE(
          floating || complex,
          "gohccl ",
          op,
          ": PREMUL_SUM needs a floating-point tensor, got ",
          st);
      const auto* sup =
          dynamic_cast<const c10d::PreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK_VALUE(
          sup != nullptr,
          "gohccl ",
          op,
          ": PREMUL_SUM came without its factor; make it with "
          "torch.distributed._make_nccl_premul_sum");
      r.op = GOHCCL_SUM;
      r.premul = true;
      if (sup->tensor_factor.defined()) {
        // The factor is one element; read it on the CPU as a 0-dim tensor so
        // it broadcasts without changing the buffer's dtype.
        r.tensorFactor = sup->tensor_factor.to(at::kCPU).reshape({});
      } else {
        r.factor = sup->double_factor;
      }
      break;
    }
    default:
      TORCH_CHECK_VALUE(
          false,
          "gohccl ",
          op,
          ": unsupported reduction operator ",
          static_cast<int>(type));
  }
  const bool bitwise = type == c10d::ReduceOp::BAND ||
      type == c10d::ReduceOp::BOR || type == c10d::ReduceOp::BXOR;
  TORCH_CHECK_TYPE(
      !(bitwise && (floating || complex)),
      "gohccl ",
      op,
      ": bitwise ",
      redOpName(type),
      " needs an integer or bool tensor, got ",
      st);
  const bool ordered = type == c10d::ReduceOp::MIN ||
      type == c10d::ReduceOp::MAX || type == c10d::ReduceOp::PRODUCT;
  // A complex number travels as two reals: only reductions that act on each
  // part alone (SUM, AVG, PREMUL_SUM) are right for it.
  TORCH_CHECK_TYPE(
      !(complex && (ordered || bitwise)),
      "gohccl ",
      op,
      ": ",
      redOpName(type),
      " is not defined for complex tensors (",
      st,
      ")");
  return r;
}

// ---- Layouts ----

Layout Layout::backToBack(std::vector<at::Tensor> ts) {
  Layout l;
  for (size_t i = 0; i < ts.size(); ++i) {
    l.pieces_.push_back({i, 0, ts[i].numel(), l.numel_});
    l.numel_ += ts[i].numel();
  }
  l.tensors_ = std::move(ts);
  return l;
}

Layout Layout::interleaved(std::vector<at::Tensor> ts, int size) {
  Layout l;
  int64_t total = 0;
  for (const at::Tensor& t : ts) {
    total += t.numel() / size;
  }
  for (int r = 0; r < size; ++r) {
    int64_t at = r * total;
    for (size_t i = 0; i < ts.size(); ++i) {
      const int64_t n = ts[i].numel() / size;
      l.pieces_.push_back({i, r * n, n, at});
      at += n;
    }
  }
  l.numel_ = total * size;
  l.tensors_ = std::move(ts);
  return l;
}

std::vector<int64_t> Layout::offsets() const {
  std::vector<int64_t> out;
  for (const Piece& p : pieces_) {
    out.push_back(p.at);
  }
  return out;
}

at::Tensor Layout::read(const Reduction& red, bool mayModify) const {
  if (direct()) {
    const at::Tensor& t = tensors_[0];
    if (!red.premul) {
      return t;
    }
    if (mayModify) {
      red.scaleInPlace(t);
      return t;
    }
    return red.scaled(t);
  }
  at::Tensor flat = scratch();
  if (single()) {
    flat.copy_(tensors_[0]);
  } else {
    for (const Piece& p : pieces_) {
      const at::Tensor& t = tensors_[p.tensor];
      if (p.n == t.numel()) {
        flat.narrow(0, p.at, p.n).view(t.sizes()).copy_(t);
      } else {
        flat.narrow(0, p.at, p.n).copy_(t.reshape({-1}).narrow(0, p.start, p.n));
      }
    }
  }
  red.scaleInPlace(flat);
  return flat;
}

at::Tensor Layout::scratch() const {
  if (single()) {
    return scratchFor(tensors_[0]);
  }
  return at::empty({numel_}, tensors_[0].options());
}

void Layout::write(const at::Tensor& flat) const {
  if (single()) {
    copyBack(tensors_[0], flat);
    return;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const at::Tensor& t = tensors_[i];
    at::Tensor buf;
    for (const Piece& p : pieces_) {
      if (p.tensor != i) {
        continue;
      }
      if (p.n == t.numel()) {
        t.copy_(flat.narrow(0, p.at, p.n).view(t.sizes()));
        continue;
      }
      if (!buf.defined()) {
        buf = scratchFor(t);
      }
      buf.view({-1}).narrow(0, p.start, p.n).copy_(flat.narrow(0, p.at, p.n));
    }
    if (buf.defined()) {
      copyBack(t, buf);
    }
  }
}

bool Layout::single() const {
  return pieces_.size() == 1 && pieces_[0].n == tensors_[0].numel();
}

bool Layout::direct() const {
  return single() && isDirect(tensors_[0]);
}

// ---- Where a call's memory lives ----

Place placeOf(std::initializer_list<const Layout*> layouts, const char* op) {
  const at::Tensor* first = nullptr;
  for (const Layout* l : layouts) {
    for (const at::Tensor& t : l->tensors()) {
      if (first == nullptr) {
        first = &t;
        continue;
      }
      TORCH_CHECK_VALUE(
          t.device() == first->device(),
          "gohccl ",
          op,
          ": its tensors are on ",
          first->device(),
          " and ",
          t.device(),
          "; all tensors of one call must be on one device");
    }
  }
  Place place;
  if (first == nullptr || first->device().is_cpu()) {
    return place;
  }
  const c10::Device device = first->device();
  place.memory =
      device.is_cuda() ? GOHCCL_MEMORY_CUDA : GOHCCL_MEMORY_ACL;
  // The guard and the stream come from the runtime's own torch library
  // (libtorch_cuda, torch_npu) through the device-generic interface: the
  // shim links neither. Without a usable runtime this throws torch's own
  // reason, which the message carries.
  try {
    const c10::impl::VirtualGuardImpl impl(device.type());
    place.device = device.index();
    place.stream = impl.getStream(device);
    place.handle = place.stream->native_handle();
    for (const Layout* l : layouts) {
      for (const at::Tensor& t : l->tensors()) {
        impl.recordDataPtrOnStream(t.storage().data_ptr(), *place.stream);
      }
    }
  } catch (const c10::Error& e) {
    TORCH_CHECK(
        false,
        "gohccl ",
        op,
        ": cannot use the current stream of ",
        device,
        " for its tensors: ",
        e.what_without_backtrace());
  }
  return place;
}

// ---- The call ----

namespace {

bool worksInPlace(gohccl_call_kind kind) {
  return kind == GOHCCL_CALL_ALLREDUCE || kind == GOHCCL_CALL_BROADCAST ||
      kind == GOHCCL_CALL_REDUCE;
}

void* dataOf(const at::Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

} // namespace

Collective Collective::make(
    gohccl_call_kind kind,
    Layout in,
    Layout out,
    const at::Tensor& ref,
    int64_t perRank) {
  Collective c;
  c.kind = kind;
  c.in = std::move(in);
  c.out = std::move(out);
  const DtypeInfo& info = dtypeOf(ref.scalar_type(), "", "");
  c.dtype = info.go;
  c.count = static_cast<uint64_t>(perRank) * info.lanes;
  return c;
}

// run packs the input, makes the call and unpacks the output. It returns
// the sender's rank for a receive, -1 otherwise.
int Collective::run(gohccl_comm comm, int64_t ms) const {
  std::optional<c10::StreamGuard> onStream;
  if (place.stream) {
    onStream.emplace(*place.stream);
  }
  const bool inPlace = worksInPlace(kind);
  at::Tensor src;
  if (in.defined()) {
    src = readsIn ? in.read(red, /*mayModify=*/inPlace && writesIn)
                  : in.scratch();
  }
  at::Tensor dst = inPlace ? src : (out.defined() ? out.scratch() : at::Tensor());
  if (!inPlace && src.defined() && dst.defined() && aliased(src, dst)) {
    // The input would be overwritten while it is read (in-place
    // all_to_all_single, say): send a copy of it.
    src = src.clone();
  }
  gohccl_call call{};
  call.kind = kind;
  call.memory = place.memory;
  call.device = place.device;
  call.stream = place.handle;
  call.sendbuf = inPlace ? nullptr : dataOf(src);
  call.recvbuf = inPlace ? dataOf(src) : dataOf(dst);
  call.count = count;
  call.dtype = dtype;
  call.op = red.op;
  call.root = root;
  call.peer = peer;
  call.tag = tag;
  if (kind == GOHCCL_CALL_ALLTOALLV) {
    call.send_counts = sendCounts.data();
    call.send_offsets = sendOffsets.data();
    call.recv_counts = recvCounts.data();
    call.recv_offsets = recvOffsets.data();
  }
  call.timeout_ms = ms;
  goCall([&](char* e, size_t n) { return gohccl_run(comm, &call, e, n); });
  if (inPlace) {
    if (writesIn) {
      in.write(src);
    }
  } else if (dst.defined()) {
    out.write(dst);
  }
  if (place.stream) {
    // The results are in the tensors once the work completes: the caller
    // may read them on any stream, and the staged buffers are free.
    c10::impl::VirtualGuardImpl(place.stream->device_type())
        .synchronizeStream(*place.stream);
  }
  return kind == GOHCCL_CALL_RECV ? call.peer : -1;
}

// aliased says src and dst share memory in a way libgohccl does not
// serve. The one sharing it serves is allgather's in-place form: the
// input is this rank's block of the output.
bool Collective::aliased(const at::Tensor& src, const at::Tensor& dst) const {
  if (src.numel() == 0 || dst.numel() == 0 ||
      at::get_overlap_status(src, dst) == at::MemOverlapStatus::No) {
    return false;
  }
  if (kind == GOHCCL_CALL_ALLGATHER) {
    const auto* base = static_cast<const char*>(dst.const_data_ptr());
    return src.const_data_ptr() !=
        base + static_cast<int64_t>(rank) * src.nbytes();
  }
  return true;
}

} // namespace gohccl
