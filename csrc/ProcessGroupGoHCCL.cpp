// ProcessGroupGoHCCL: argument checks, the Store bridge, and one body per
// torch operation, each a call into libgohccl between copies in and out of
// contiguous buffers. See ProcessGroupGoHCCL.hpp for the threading model.
#include "ProcessGroupGoHCCL.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <numeric>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace gohccl {

namespace {

// kErrLen is the size of the buffer libgohccl writes its message into; a
// message names op, sequence number, peer and cause, well under this.
constexpr size_t kErrLen = 4096;

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

// goCall runs one libgohccl call, f(err, err_len), and throws GoError with
// libgohccl's message, verbatim, if it fails.
template <typename F>
void goCall(F&& f) {
  char err[kErrLen];
  err[0] = '\0';
  const gohccl_status status = f(err, sizeof(err));
  if (status == GOHCCL_OK) {
    return;
  }
  err[kErrLen - 1] = '\0';
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

// ---- The Store bridge: gohccl_store_ops over a c10d::Store. ----
//
// libgohccl calls these only from the thread inside gohccl_comm_create. An
// exception must not cross into Go, so each one turns it into a message.

void writeErr(char* err, size_t errLen, const std::string& msg) {
  if (err == nullptr || errLen == 0) {
    return;
  }
  const size_t n = std::min(msg.size(), errLen - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// storeError is a store exception's message for libgohccl's error text:
// without the C++ backtrace torch appends to a c10::Error's what(), which
// would bury the reason (a store timeout, say) in a page of frames.
std::string storeError(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    return ce->what_without_backtrace();
  }
  return e.what();
}

int storeSet(
    void* ctx,
    const char* key,
    const uint8_t* value,
    size_t len,
    char* err,
    size_t errLen) {
  try {
    static_cast<c10d::Store*>(ctx)->set(
        key, std::vector<uint8_t>(value, value + len));
    return 0;
  } catch (const std::exception& e) {
    writeErr(err, errLen, c10::str("store set of ", key, ": ", storeError(e)));
    return 1;
  }
}

int storeGet(
    void* ctx,
    const char* key,
    int64_t timeoutMs,
    uint8_t** value,
    size_t* len,
    char* err,
    size_t errLen) {
  try {
    auto* store = static_cast<c10d::Store*>(ctx);
    if (timeoutMs > 0) {
      store->wait({key}, std::chrono::milliseconds(timeoutMs));
    } else {
      store->wait({key});
    }
    const std::vector<uint8_t> got = store->get(key);
    // malloc(0) may return NULL; libgohccl frees whatever it gets.
    auto* buf = static_cast<uint8_t*>(std::malloc(got.empty() ? 1 : got.size()));
    if (buf == nullptr) {
      writeErr(err, errLen, c10::str("store get of ", key, ": out of memory"));
      return 1;
    }
    if (!got.empty()) {
      std::memcpy(buf, got.data(), got.size());
    }
    *value = buf;
    *len = got.size();
    return 0;
  } catch (const std::exception& e) {
    writeErr(err, errLen, c10::str("store get of ", key, ": ", storeError(e)));
    return 1;
  }
}

int storeAdd(
    void* ctx,
    const char* key,
    int64_t delta,
    int64_t* out,
    char* err,
    size_t errLen) {
  try {
    *out = static_cast<c10d::Store*>(ctx)->add(key, delta);
    return 0;
  } catch (const std::exception& e) {
    writeErr(err, errLen, c10::str("store add to ", key, ": ", storeError(e)));
    return 1;
  }
}

const gohccl_store_ops kStoreOps = {storeSet, storeGet, storeAdd};

// ---- Tensors ----

// goDtype maps a torch dtype onto libgohccl's element types. A complex tensor
// travels as its real and imaginary parts (see countOf).
gohccl_dtype goDtype(at::ScalarType st, const char* op, const std::string& role) {
  switch (st) {
    case at::kFloat:
    case at::kComplexFloat:
      return GOHCCL_FLOAT32;
    case at::kDouble:
    case at::kComplexDouble:
      return GOHCCL_FLOAT64;
    case at::kHalf:
    case at::kComplexHalf:
      return GOHCCL_FLOAT16;
    case at::kBFloat16:
      return GOHCCL_BFLOAT16;
    case at::kChar:
      return GOHCCL_INT8;
    case at::kByte:
      return GOHCCL_UINT8;
    case at::kShort:
      return GOHCCL_INT16;
    case at::kInt:
      return GOHCCL_INT32;
    case at::kLong:
      return GOHCCL_INT64;
    case at::kBool:
      return GOHCCL_BOOL;
    default:
      TORCH_CHECK_TYPE(
          false,
          "gohccl ",
          op,
          ": ",
          role,
          " has dtype ",
          st,
          ", which gohccl does not support; it supports float32, float64, "
          "float16, bfloat16, int8, uint8, int16, int32, int64, bool and "
          "complex tensors");
  }
}

gohccl_dtype goDtype(const at::Tensor& t) {
  return goDtype(t.scalar_type(), "", "");
}

// countOf is t's element count in libgohccl's units.
uint64_t countOf(const at::Tensor& t) {
  return static_cast<uint64_t>(t.numel()) * (t.is_complex() ? 2 : 1);
}

void checkTensor(const at::Tensor& t, const char* op, const std::string& role) {
  TORCH_CHECK_VALUE(
      t.defined(), "gohccl ", op, ": ", role, " is an undefined tensor");
  TORCH_CHECK_NOT_IMPLEMENTED(
      t.layout() == at::kStrided && !t.is_nested(),
      "gohccl ",
      op,
      ": ",
      role,
      " is a ",
      t.is_nested() ? "nested" : c10::str(t.layout()),
      " tensor; gohccl serves dense (strided) tensors only");
  TORCH_CHECK_NOT_IMPLEMENTED(
      t.device().is_cpu(),
      "gohccl ",
      op,
      ": ",
      role,
      " is on device ",
      t.device(),
      "; gohccl serves CPU tensors only for now");
  goDtype(t.scalar_type(), op, role);
}

// checkLike checks that t is a tensor gohccl can serve with ref's dtype and
// n elements.
void checkLike(
    const at::Tensor& t,
    const at::Tensor& ref,
    int64_t n,
    const char* op,
    const std::string& role) {
  checkTensor(t, op, role);
  TORCH_CHECK_TYPE(
      t.scalar_type() == ref.scalar_type(),
      "gohccl ",
      op,
      ": ",
      role,
      " has dtype ",
      t.scalar_type(),
      ", expected ",
      ref.scalar_type());
  TORCH_CHECK_VALUE(
      t.numel() == n,
      "gohccl ",
      op,
      ": ",
      role,
      " has ",
      t.numel(),
      " elements, expected ",
      n);
}

void checkSameDtype(
    const std::vector<at::Tensor>& ts,
    const char* op,
    const char* role) {
  for (size_t i = 0; i < ts.size(); ++i) {
    checkTensor(ts[i], op, c10::str(role, " ", i));
    TORCH_CHECK_TYPE(
        ts[i].scalar_type() == ts[0].scalar_type(),
        "gohccl ",
        op,
        ": ",
        role,
        " ",
        i,
        " has dtype ",
        ts[i].scalar_type(),
        " but ",
        role,
        " 0 has dtype ",
        ts[0].scalar_type(),
        "; all must share one dtype");
  }
}

at::Tensor& onlyTensor(
    std::vector<at::Tensor>& ts,
    const char* op,
    const char* role) {
  TORCH_CHECK_VALUE(
      ts.size() == 1,
      "gohccl ",
      op,
      " takes exactly one ",
      role,
      " per call (one tensor per process), got ",
      ts.size());
  return ts[0];
}

// rankList checks that lists is one list of size tensors, each like ref
// with ref's element count, and returns that list.
std::vector<at::Tensor> rankList(
    const std::vector<std::vector<at::Tensor>>& lists,
    const at::Tensor& ref,
    int size,
    const char* op,
    const char* role) {
  TORCH_CHECK_VALUE(
      lists.size() == 1 && static_cast<int>(lists[0].size()) == size,
      "gohccl ",
      op,
      " needs one ",
      role,
      " list of ",
      size,
      " tensors (one per rank), got ",
      lists.size() == 1 ? c10::str(lists[0].size(), " tensors")
                        : c10::str(lists.size(), " lists"));
  for (int i = 0; i < size; ++i) {
    checkLike(lists[0][i], ref, ref.numel(), op, c10::str(role, " ", i));
  }
  return lists[0];
}

// checkNoList checks that a rank other than the root was given no list.
void checkNoList(
    const std::vector<std::vector<at::Tensor>>& lists,
    int root,
    int rank,
    const char* op,
    const char* role) {
  TORCH_CHECK_VALUE(
      lists.empty() || (lists.size() == 1 && lists[0].empty()),
      "gohccl ",
      op,
      ": only the root (rank ",
      root,
      ") takes ",
      role,
      " tensors; rank ",
      rank,
      " was given some");
}

// blockOffsets are the offsets of size blocks of n elements, back to back.
std::vector<int64_t> blockOffsets(int size, int64_t n) {
  std::vector<int64_t> offsets(size);
  for (int i = 0; i < size; ++i) {
    offsets[i] = i * n;
  }
  return offsets;
}

// checkRootTensor: with one tensor per process, the root's is tensor 0.
void checkRootTensor(int64_t rootTensor, const char* op) {
  TORCH_CHECK_VALUE(
      rootTensor == 0,
      "gohccl ",
      op,
      ": root tensor ",
      rootTensor,
      " given, but there is one tensor per process");
}

// isDirect says libgohccl can use t's memory as it is.
bool isDirect(const at::Tensor& t) {
  return t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

// dense returns t, or a contiguous copy of its values when it is not direct.
at::Tensor dense(const at::Tensor& t) {
  if (isDirect(t)) {
    return t;
  }
  return t.resolve_conj().resolve_neg().contiguous();
}

// scratchFor returns t, or an uninitialized contiguous tensor of its shape
// when it is not direct: an output buffer whose old values do not matter.
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

// offsetsOf lays ts out back to back; *total is the sum of their sizes.
std::vector<int64_t> offsetsOf(const std::vector<at::Tensor>& ts, int64_t* total) {
  std::vector<int64_t> offsets(ts.size());
  int64_t off = 0;
  for (size_t j = 0; j < ts.size(); ++j) {
    offsets[j] = off;
    off += ts[j].numel();
  }
  *total = off;
  return offsets;
}

// pack copies ts into flat at base + offsets[j].
void pack(
    const at::Tensor& flat,
    int64_t base,
    const std::vector<at::Tensor>& ts,
    const std::vector<int64_t>& offsets) {
  for (size_t j = 0; j < ts.size(); ++j) {
    flat.narrow(0, base + offsets[j], ts[j].numel())
        .view(ts[j].sizes())
        .copy_(ts[j]);
  }
}

// unpack copies flat at base + offsets[j] into ts.
void unpack(
    const at::Tensor& flat,
    int64_t base,
    const std::vector<at::Tensor>& ts,
    const std::vector<int64_t>& offsets) {
  for (size_t j = 0; j < ts.size(); ++j) {
    ts[j].copy_(
        flat.narrow(0, base + offsets[j], ts[j].numel()).view(ts[j].sizes()));
  }
}

at::Tensor flatLike(const at::Tensor& ref, int64_t n) {
  return at::empty({n}, ref.options());
}

// ---- Reduction operators ----

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

// Reduction is a torch ReduceOp as libgohccl runs it. PREMUL_SUM becomes SUM
// over inputs the shim has scaled by the factor first.
struct Reduction {
  gohccl_redop op = GOHCCL_SUM;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;

  void scaleInPlace(const at::Tensor& buf) const {
    if (!premul) {
      return;
    }
    if (tensorFactor.defined()) {
      buf.mul_(tensorFactor);
    } else {
      buf.mul_(factor);
    }
  }

  // input returns a direct buffer holding t's values, scaled for PREMUL_SUM.
  // With mayModify false, t itself is never written.
  at::Tensor input(const at::Tensor& t, bool mayModify) const {
    at::Tensor buf = dense(t);
    if (!premul) {
      return buf;
    }
    if (mayModify || !buf.is_same(t)) {
      scaleInPlace(buf);
      return buf;
    }
    return tensorFactor.defined() ? buf.mul(tensorFactor) : buf.mul(factor);
  }
};

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

// splitCounts turns split sizes along dim 0 (empty: equal splits) into
// per-peer element counts and offsets, in libgohccl's units.
void splitCounts(
    const at::Tensor& t,
    const std::vector<int64_t>& splits,
    int size,
    const char* op,
    const char* role,
    std::vector<uint64_t>* counts,
    std::vector<uint64_t>* offsets) {
  const uint64_t unit = t.is_complex() ? 2 : 1;
  counts->assign(size, 0);
  offsets->assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK_VALUE(
        t.numel() % size == 0,
        "gohccl ",
        op,
        ": ",
        role,
        " has ",
        t.numel(),
        " elements, which do not split equally among ",
        size,
        " ranks; pass split sizes");
    const uint64_t each = static_cast<uint64_t>(t.numel() / size) * unit;
    for (int p = 0; p < size; ++p) {
      (*counts)[p] = each;
      (*offsets)[p] = each * p;
    }
    return;
  }
  TORCH_CHECK_VALUE(
      static_cast<int64_t>(splits.size()) == size,
      "gohccl ",
      op,
      ": ",
      role,
      " split sizes have ",
      splits.size(),
      " entries, expected one per rank (",
      size,
      ")");
  TORCH_CHECK_VALUE(
      t.dim() >= 1,
      "gohccl ",
      op,
      ": ",
      role,
      " is a 0-dim tensor and cannot be split along dim 0");
  const int64_t rowElems = t.dim() == 1
      ? 1
      : std::accumulate(
            t.sizes().begin() + 1,
            t.sizes().end(),
            int64_t{1},
            std::multiplies<int64_t>());
  int64_t rows = 0;
  for (int p = 0; p < size; ++p) {
    TORCH_CHECK_VALUE(
        splits[p] >= 0,
        "gohccl ",
        op,
        ": ",
        role,
        " split size ",
        p,
        " is negative (",
        splits[p],
        ")");
    (*counts)[p] = static_cast<uint64_t>(splits[p] * rowElems) * unit;
    (*offsets)[p] = static_cast<uint64_t>(rows * rowElems) * unit;
    rows += splits[p];
  }
  TORCH_CHECK_VALUE(
      rows == t.size(0),
      "gohccl ",
      op,
      ": ",
      role,
      " split sizes add up to ",
      rows,
      " rows but the tensor has ",
      t.size(0));
}

} // namespace

// ---- Construction and teardown ----

ProcessGroupGoHCCL::ProcessGroupGoHCCL(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      ownerPid_(getpid()),
      timeoutMs_(timeout.count()),
      options_(c10::make_intrusive<Options>("gohccl", timeout)),
      errorState_(std::make_shared<std::atomic<int>>(
          static_cast<int>(c10d::ErrorType::SUCCESS))),
      closing_(std::make_shared<std::atomic<bool>>(false)) {
  TORCH_CHECK_VALUE(store, "gohccl: the process group needs a store");
  const int abi = gohccl_abi_version();
  if (abi != GOHCCL_ABI_VERSION) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gohccl: libgohccl ",
            gohccl_version(),
            " has C ABI version ",
            abi,
            " but this extension was built against version ",
            GOHCCL_ABI_VERSION,
            "; rebuild them together"));
  }
  char err[kErrLen];
  err[0] = '\0';
  const gohccl_status status = gohccl_comm_create(
      &kStoreOps,
      store.get(),
      rank,
      size,
      timeout.count(),
      &comm_,
      err,
      sizeof(err));
  if (status != GOHCCL_OK) {
    err[kErrLen - 1] = '\0';
    throw GoError(
        status,
        c10::str(
            "gohccl: creating the communicator of rank ",
            rank,
            " in a group of ",
            size,
            " failed (",
            statusName(status),
            "): ",
            err[0] != '\0' ? err : "libgohccl gave no message"));
  }
  collectives_ = std::make_unique<WorkQueue>("gohccl-coll");
  sends_ = std::make_unique<WorkQueue>("gohccl-send");
  recvs_ = std::make_unique<WorkQueue>("gohccl-recv");
  init();
}

ProcessGroupGoHCCL::~ProcessGroupGoHCCL() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    LOG(ERROR) << "gohccl: shutting down in the destructor failed: "
               << e.what();
  }
}

void ProcessGroupGoHCCL::shutdown() {
  std::call_once(shutdownOnce_, [this] {
    if (getpid() != ownerPid_) {
      // A forked child (a fork-started DataLoader worker, say): joining
      // threads that do not exist here would hang, and so would calling into
      // Go. The queues are left to the process's end on purpose.
      (void)collectives_.release();
      (void)sends_.release();
      (void)recvs_.release();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(issueMutex_);
      closed_ = true;
    }
    closing_->store(true);
    // A collective in progress finishes (every rank is shutting down at the
    // same point); queued ones never start. Sends do not wait for receivers,
    // so the one in progress ends soon.
    std::vector<c10::intrusive_ptr<WorkGoHCCL>> left = collectives_->stop(false);
    for (auto& work : sends_->stop(false)) {
      left.push_back(std::move(work));
    }
    // Every posted receive must reach gohccl_recv_wait, which releases its
    // handle and buffer. Receives still pending now have no sender left to
    // wait for: abort fails them at once instead of at their deadline.
    if (recvs_->busy()) {
      gohccl_comm_abort(comm_);
    }
    recvs_->stop(true);
    for (auto& work : left) {
      work->fail(std::make_exception_ptr(c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          "gohccl: process group destroyed before " + work->name() +
              " ran")));
    }
    gohccl_comm_destroy(comm_);
  });
}

void ProcessGroupGoHCCL::abort() {
  if (getpid() == ownerPid_) {
    gohccl_comm_abort(comm_);
  }
  shutdown();
}

std::string ProcessGroupGoHCCL::describe() const {
  char buf[kErrLen];
  buf[0] = '\0';
  const gohccl_status status = gohccl_comm_describe(comm_, buf, sizeof(buf));
  if (status != GOHCCL_OK) {
    return c10::str(
        "gohccl communicator ", comm_, " (", statusName(status), ")");
  }
  buf[kErrLen - 1] = '\0';
  return buf;
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupGoHCCL::
    getBackendOptions() {
  options_->timeout = std::chrono::milliseconds(timeoutMs_.load());
  return options_;
}

void ProcessGroupGoHCCL::setTimeout(std::chrono::milliseconds timeout) {
  timeoutMs_.store(timeout.count());
}

uint64_t ProcessGroupGoHCCL::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> lock(issueMutex_);
  return collectiveSeq_;
}

c10d::ErrorType ProcessGroupGoHCCL::getError() {
  return static_cast<c10d::ErrorType>(errorState_->load());
}

int64_t ProcessGroupGoHCCL::timeoutMs(
    std::chrono::milliseconds opTimeout) const {
  // Options carry kUnsetTimeout (-1) unless the caller gave one.
  return opTimeout.count() > 0 ? opTimeout.count() : timeoutMs_.load();
}

void ProcessGroupGoHCCL::checkPeer(
    int peer,
    const char* opName,
    const char* role) const {
  TORCH_CHECK_VALUE(
      peer >= 0 && peer < size_,
      "gohccl ",
      opName,
      ": ",
      role,
      " rank ",
      peer,
      " is out of range for a group of ",
      size_,
      " ranks");
}

void ProcessGroupGoHCCL::checkRoot(int64_t root, const char* opName) const {
  TORCH_CHECK_VALUE(
      root >= 0 && root < size_,
      "gohccl ",
      opName,
      ": root rank ",
      root,
      " is out of range for a group of ",
      size_,
      " ranks");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::enqueue(
    Lane lane,
    c10d::OpType opType,
    const char* opName,
    std::chrono::milliseconds timeout,
    bool asyncOp,
    std::vector<at::Tensor> outputs,
    WorkGoHCCL::Body body) {
  const bool collective = lane == Lane::kCollective;
  WorkQueue& queue = collective ? *collectives_ : *sends_;
  c10::intrusive_ptr<WorkGoHCCL> work;
  bool runHere = false;
  {
    std::lock_guard<std::mutex> lock(issueMutex_);
    TORCH_CHECK(
        !closed_,
        "gohccl ",
        opName,
        ": the process group has been destroyed");
    // 1-based, as libgohccl numbers collectives in its messages.
    const uint64_t seq = collective ? ++collectiveSeq_ : ++p2pSeq_;
    runHere = !asyncOp && queue.claimIdle();
    work = c10::make_intrusive<WorkGoHCCL>(
        rank_,
        opType,
        c10::str(opName, " #", seq),
        seq,
        timeout,
        std::move(outputs),
        std::move(body),
        /*waitRunsBody=*/false,
        errorState_,
        runHere);
    if (!runHere) {
      queue.push(work);
    }
  }
  // A synchronous op (async_op=False) whose queue is idle runs here: the
  // caller is about to wait for it anyway. Not under issueMutex_, which
  // other threads need to issue meanwhile.
  if (runHere) {
    queue.runClaimed(work);
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::postRecv(
    c10d::OpType opType,
    const char* opName,
    at::Tensor& tensor,
    int peer,
    int tag) {
  checkTensor(tensor, opName, "tensor");
  if (peer != GOHCCL_ANY_SOURCE) {
    checkPeer(peer, opName, "source");
  }
  const int64_t ms = timeoutMs(c10d::kUnsetTimeout);
  // The receive's buffer must exist now: libgohccl matches it at post time.
  at::Tensor buf = scratchFor(tensor);
  std::lock_guard<std::mutex> lock(issueMutex_);
  TORCH_CHECK(
      !closed_,
      "gohccl ",
      opName,
      ": the process group has been destroyed");
  gohccl_req req = 0;
  const gohccl_comm comm = comm_;
  goCall([&](char* e, size_t n) {
    return gohccl_recv_post(
        comm, peer, tag, buf.data_ptr(), countOf(buf), goDtype(buf), &req, e, n);
  });
  const uint64_t seq = ++p2pSeq_;
  std::string name = c10::str(opName, " #", seq);
  auto work = c10::make_intrusive<WorkGoHCCL>(
      rank_,
      opType,
      name,
      seq,
      std::chrono::milliseconds(ms),
      std::vector<at::Tensor>{tensor},
      [comm, req, ms, buf, tensor, name, closing = closing_]() {
        int source = -1;
        try {
          goCall([&](char* e, size_t n) {
            return gohccl_recv_wait(comm, req, ms, &source, e, n);
          });
        } catch (const GoError& e) {
          if (!closing->load()) {
            throw;
          }
          // Shutdown aborted it, or the peer's shutdown closed the link.
          throw GoError(
              e.status(),
              c10::str(
                  "gohccl: process group destroyed before ",
                  name,
                  " completed: ",
                  e.what_without_backtrace()));
        }
        copyBack(tensor, buf);
        return source;
      },
      /*waitRunsBody=*/true,
      errorState_);
  recvs_->push(work);
  return work;
}

// ---- Collectives ----

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  constexpr const char* kOp = "allreduce";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  const Reduction red = reductionOf(opts.reduceOp, t.scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLREDUCE,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      tensors,
      [comm = comm_, t, red, ms]() {
        // The op overwrites t, so scaling it in place is allowed.
        at::Tensor buf = red.input(t, /*mayModify=*/true);
        goCall([&](char* e, size_t n) {
          return gohccl_allreduce(
              comm, buf.data_ptr(), countOf(buf), goDtype(buf), red.op, ms, e, n);
        });
        copyBack(t, buf);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* kOp = "allreduce_coalesced";
  TORCH_CHECK_VALUE(!tensors.empty(), "gohccl ", kOp, ": no tensors given");
  checkSameDtype(tensors, kOp, "tensor");
  const Reduction red =
      reductionOf(opts.reduceOp, tensors[0].scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLREDUCE_COALESCED,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      tensors,
      [comm = comm_, tensors, red, ms]() {
        int64_t total = 0;
        const auto offsets = offsetsOf(tensors, &total);
        at::Tensor flat = flatLike(tensors[0], total);
        pack(flat, 0, tensors, offsets);
        red.scaleInPlace(flat);
        goCall([&](char* e, size_t n) {
          return gohccl_allreduce(
              comm, flat.data_ptr(), countOf(flat), goDtype(flat), red.op, ms, e, n);
        });
        unpack(flat, 0, tensors, offsets);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  constexpr const char* kOp = "broadcast";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkRoot(opts.rootRank, kOp);
  checkRootTensor(opts.rootTensor, kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::BROADCAST,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      tensors,
      [comm = comm_, t, root, isRoot, ms]() {
        at::Tensor buf = isRoot ? dense(t) : scratchFor(t);
        goCall([&](char* e, size_t n) {
          return gohccl_broadcast(
              comm, buf.data_ptr(), countOf(buf), goDtype(buf), root, ms, e, n);
        });
        if (!isRoot) {
          copyBack(t, buf);
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  constexpr const char* kOp = "reduce";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkRoot(opts.rootRank, kOp);
  checkRootTensor(opts.rootTensor, kOp);
  const Reduction red = reductionOf(opts.reduceOp, t.scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::REDUCE,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      tensors,
      [comm = comm_, t, red, root, isRoot, ms]() {
        // Only the root's tensor is an output; the others stay as they were.
        at::Tensor buf = red.input(t, /*mayModify=*/isRoot);
        goCall([&](char* e, size_t n) {
          return gohccl_reduce(
              comm, buf.data_ptr(), countOf(buf), goDtype(buf), red.op, root, ms, e, n);
        });
        if (isRoot) {
          copyBack(t, buf);
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "allgather";
  at::Tensor in = onlyTensor(inputs, kOp, "input");
  checkTensor(in, kOp, "input");
  const std::vector<at::Tensor> outs = rankList(outputs, in, size_, kOp, "output");
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLGATHER,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outs,
      [comm = comm_, in, outs, size, ms]() {
        at::Tensor src = dense(in);
        const int64_t n = in.numel();
        at::Tensor flat = flatLike(in, n * size);
        goCall([&](char* e, size_t len) {
          return gohccl_allgather(
              comm, src.data_ptr(), flat.data_ptr(), countOf(src), goDtype(src), ms, e, len);
        });
        unpack(flat, 0, outs, blockOffsets(size, n));
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::all_gather_single(
    at::Tensor& output,
    at::Tensor& input,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "all_gather_into_tensor";
  checkTensor(input, kOp, "input");
  checkLike(output, input, input.numel() * size_, kOp, "output");
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::_ALLGATHER_BASE,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      {output},
      [comm = comm_, in = input, out = output, ms]() {
        at::Tensor src = dense(in);
        at::Tensor dst = scratchFor(out);
        goCall([&](char* e, size_t n) {
          return gohccl_allgather(
              comm, src.data_ptr(), dst.data_ptr(), countOf(src), goDtype(src), ms, e, n);
        });
        copyBack(out, dst);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "allgather_coalesced";
  TORCH_CHECK_VALUE(!inputs.empty(), "gohccl ", kOp, ": no input tensors given");
  checkSameDtype(inputs, kOp, "input");
  TORCH_CHECK_VALUE(
      static_cast<int>(outputLists.size()) == size_,
      "gohccl ",
      kOp,
      ": ",
      outputLists.size(),
      " output lists given, expected one per rank (",
      size_,
      ")");
  std::vector<at::Tensor> outs;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK_VALUE(
        outputLists[r].size() == inputs.size(),
        "gohccl ",
        kOp,
        ": output list ",
        r,
        " has ",
        outputLists[r].size(),
        " tensors, expected one per input (",
        inputs.size(),
        ")");
    for (size_t j = 0; j < inputs.size(); ++j) {
      checkLike(
          outputLists[r][j],
          inputs[j],
          inputs[j].numel(),
          kOp,
          c10::str("output ", r, "/", j));
      outs.push_back(outputLists[r][j]);
    }
  }
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLGATHER_COALESCED,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outs,
      [comm = comm_, inputs, lists = outputLists, size, ms]() {
        int64_t total = 0;
        const auto offsets = offsetsOf(inputs, &total);
        at::Tensor src = flatLike(inputs[0], total);
        pack(src, 0, inputs, offsets);
        at::Tensor flat = flatLike(inputs[0], total * size);
        goCall([&](char* e, size_t n) {
          return gohccl_allgather(
              comm, src.data_ptr(), flat.data_ptr(), countOf(src), goDtype(src), ms, e, n);
        });
        for (int r = 0; r < size; ++r) {
          unpack(flat, r * total, lists[r], offsets);
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::all_gather_single_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "all_gather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(!inputs.empty(), "gohccl ", kOp, ": no input tensors given");
  TORCH_CHECK_VALUE(
      outputs.size() == inputs.size(),
      "gohccl ",
      kOp,
      ": ",
      outputs.size(),
      " outputs given for ",
      inputs.size(),
      " inputs");
  checkSameDtype(inputs, kOp, "input");
  for (size_t j = 0; j < inputs.size(); ++j) {
    checkLike(
        outputs[j],
        inputs[j],
        inputs[j].numel() * size_,
        kOp,
        c10::str("output ", j));
  }
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outputs,
      [comm = comm_, inputs, outputs, size, ms]() {
        int64_t total = 0;
        const auto offsets = offsetsOf(inputs, &total);
        at::Tensor src = flatLike(inputs[0], total);
        pack(src, 0, inputs, offsets);
        at::Tensor flat = flatLike(inputs[0], total * size);
        goCall([&](char* e, size_t n) {
          return gohccl_allgather(
              comm, src.data_ptr(), flat.data_ptr(), countOf(src), goDtype(src), ms, e, n);
        });
        // Output j holds rank r's input j as its r-th block.
        for (size_t j = 0; j < outputs.size(); ++j) {
          const int64_t nj = inputs[j].numel();
          at::Tensor buf = scratchFor(outputs[j]);
          at::Tensor dst = buf.view(-1);
          for (int r = 0; r < size; ++r) {
            dst.narrow(0, r * nj, nj)
                .copy_(flat.narrow(0, r * total + offsets[j], nj));
          }
          copyBack(outputs[j], buf);
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  constexpr const char* kOp = "gather";
  at::Tensor in = onlyTensor(inputs, kOp, "input");
  checkTensor(in, kOp, "input");
  checkRoot(opts.rootRank, kOp);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  std::vector<at::Tensor> outs;
  if (isRoot) {
    outs = rankList(outputs, in, size_, kOp, "output");
  } else {
    checkNoList(outputs, root, rank_, kOp, "output");
  }
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::GATHER,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outs,
      [comm = comm_, in, outs, root, isRoot, size, ms]() {
        at::Tensor src = dense(in);
        const int64_t n = in.numel();
        at::Tensor flat = isRoot ? flatLike(in, n * size) : at::Tensor();
        goCall([&](char* e, size_t len) {
          return gohccl_gather(
              comm,
              src.data_ptr(),
              isRoot ? flat.data_ptr() : nullptr,
              countOf(src),
              goDtype(src),
              root,
              ms,
              e,
              len);
        });
        if (isRoot) {
          unpack(flat, 0, outs, blockOffsets(size, n));
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::gather_single(
    at::Tensor& output,
    at::Tensor& input,
    const c10d::GatherOptions& opts) {
  constexpr const char* kOp = "gather_into_tensor";
  checkTensor(input, kOp, "input");
  checkRoot(opts.rootRank, kOp);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  if (isRoot) {
    checkLike(output, input, input.numel() * size_, kOp, "output");
  }
  const int64_t ms = timeoutMs(opts.timeout);
  std::vector<at::Tensor> outs;
  if (isRoot) {
    outs.push_back(output);
  }
  return enqueue(
      Lane::kCollective,
      c10d::OpType::GATHER,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outs,
      [comm = comm_, in = input, out = isRoot ? output : at::Tensor(), root, isRoot, ms]() {
        at::Tensor src = dense(in);
        at::Tensor dst = isRoot ? scratchFor(out) : at::Tensor();
        goCall([&](char* e, size_t n) {
          return gohccl_gather(
              comm,
              src.data_ptr(),
              isRoot ? dst.data_ptr() : nullptr,
              countOf(src),
              goDtype(src),
              root,
              ms,
              e,
              n);
        });
        if (isRoot) {
          copyBack(out, dst);
        }
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  constexpr const char* kOp = "scatter";
  at::Tensor out = onlyTensor(outputs, kOp, "output");
  checkTensor(out, kOp, "output");
  checkRoot(opts.rootRank, kOp);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = root == rank_;
  std::vector<at::Tensor> ins;
  if (isRoot) {
    ins = rankList(inputs, out, size_, kOp, "input");
  } else {
    checkNoList(inputs, root, rank_, kOp, "input");
  }
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::SCATTER,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outputs,
      [comm = comm_, out, ins, root, isRoot, size, ms]() {
        const int64_t n = out.numel();
        at::Tensor flat;
        if (isRoot) {
          flat = flatLike(out, n * size);
          pack(flat, 0, ins, blockOffsets(size, n));
        }
        at::Tensor dst = scratchFor(out);
        goCall([&](char* e, size_t len) {
          return gohccl_scatter(
              comm,
              isRoot ? flat.data_ptr() : nullptr,
              dst.data_ptr(),
              countOf(dst),
              goDtype(dst),
              root,
              ms,
              e,
              len);
        });
        copyBack(out, dst);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "reduce_scatter";
  at::Tensor out = onlyTensor(outputs, kOp, "output");
  checkTensor(out, kOp, "output");
  const std::vector<at::Tensor> ins = rankList(inputs, out, size_, kOp, "input");
  const Reduction red = reductionOf(opts.reduceOp, out.scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::REDUCE_SCATTER,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outputs,
      [comm = comm_, out, ins, red, size, ms]() {
        const int64_t n = out.numel();
        at::Tensor flat = flatLike(out, n * size);
        pack(flat, 0, ins, blockOffsets(size, n));
        red.scaleInPlace(flat);
        at::Tensor dst = scratchFor(out);
        goCall([&](char* e, size_t len) {
          return gohccl_reduce_scatter(
              comm, flat.data_ptr(), dst.data_ptr(), countOf(dst), goDtype(dst), red.op, ms, e, len);
        });
        copyBack(out, dst);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::reduce_scatter_single(
    at::Tensor& output,
    at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "reduce_scatter_tensor";
  checkTensor(output, kOp, "output");
  checkTensor(input, kOp, "input");
  TORCH_CHECK_TYPE(
      input.scalar_type() == output.scalar_type(),
      "gohccl ",
      kOp,
      ": input has dtype ",
      input.scalar_type(),
      " but output has dtype ",
      output.scalar_type());
  TORCH_CHECK_VALUE(
      input.numel() == output.numel() * size_,
      "gohccl ",
      kOp,
      ": input has ",
      input.numel(),
      " elements, expected the output's ",
      output.numel(),
      " times ",
      size_,
      " ranks");
  const Reduction red = reductionOf(opts.reduceOp, input.scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::_REDUCE_SCATTER_BASE,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      {output},
      [comm = comm_, in = input, out = output, red, ms]() {
        // The input is not an output: it is never written.
        at::Tensor src = red.input(in, /*mayModify=*/false);
        at::Tensor dst = scratchFor(out);
        goCall([&](char* e, size_t n) {
          return gohccl_reduce_scatter(
              comm, src.data_ptr(), dst.data_ptr(), countOf(dst), goDtype(dst), red.op, ms, e, n);
        });
        copyBack(out, dst);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::
    reduce_scatter_single_coalesced(
        std::vector<at::Tensor>& outputs,
        std::vector<at::Tensor>& inputs,
        const c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(!outputs.empty(), "gohccl ", kOp, ": no output tensors given");
  TORCH_CHECK_VALUE(
      outputs.size() == inputs.size(),
      "gohccl ",
      kOp,
      ": ",
      inputs.size(),
      " inputs given for ",
      outputs.size(),
      " outputs");
  checkSameDtype(outputs, kOp, "output");
  for (size_t j = 0; j < outputs.size(); ++j) {
    checkLike(
        inputs[j],
        outputs[j],
        outputs[j].numel() * size_,
        kOp,
        c10::str("input ", j));
  }
  const Reduction red =
      reductionOf(opts.reduceOp, outputs[0].scalar_type(), kOp);
  const int64_t ms = timeoutMs(opts.timeout);
  const int size = size_;
  return enqueue(
      Lane::kCollective,
      c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outputs,
      [comm = comm_, inputs, outputs, red, size, ms]() {
        // Block r of the flat input is every input's r-th block, back to
        // back, so that one reduce-scatter hands rank r all of its blocks.
        int64_t total = 0;
        const auto offsets = offsetsOf(outputs, &total);
        at::Tensor flat = flatLike(outputs[0], total * size);
        for (size_t j = 0; j < inputs.size(); ++j) {
          const int64_t nj = outputs[j].numel();
          const at::Tensor src = inputs[j].reshape({-1});
          for (int r = 0; r < size; ++r) {
            flat.narrow(0, r * total + offsets[j], nj)
                .copy_(src.narrow(0, r * nj, nj));
          }
        }
        red.scaleInPlace(flat);
        at::Tensor mine = flatLike(outputs[0], total);
        goCall([&](char* e, size_t n) {
          return gohccl_reduce_scatter(
              comm, flat.data_ptr(), mine.data_ptr(), countOf(mine), goDtype(mine), red.op, ms, e, n);
        });
        unpack(mine, 0, outputs, offsets);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::all_to_all_single(
    at::Tensor& output,
    at::Tensor& input,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  constexpr const char* kOp = "all_to_all_single";
  checkTensor(input, kOp, "input");
  checkTensor(output, kOp, "output");
  TORCH_CHECK_TYPE(
      input.scalar_type() == output.scalar_type(),
      "gohccl ",
      kOp,
      ": input has dtype ",
      input.scalar_type(),
      " but output has dtype ",
      output.scalar_type());
  // With equal splits on both sides, every rank sends what it receives.
  TORCH_CHECK_VALUE(
      !(inputSplitSizes.empty() && outputSplitSizes.empty()) ||
          input.numel() == output.numel(),
      "gohccl ",
      kOp,
      ": without split sizes the input and output must have the same number "
      "of elements, got ",
      input.numel(),
      " and ",
      output.numel());
  std::vector<uint64_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
  splitCounts(input, inputSplitSizes, size_, kOp, "input", &sendCounts, &sendOffsets);
  splitCounts(output, outputSplitSizes, size_, kOp, "output", &recvCounts, &recvOffsets);
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLTOALL_BASE,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      {output},
      [comm = comm_, in = input, out = output, sendCounts, sendOffsets,
       recvCounts, recvOffsets, ms]() {
        at::Tensor src = dense(in);
        at::Tensor dst = scratchFor(out);
        goCall([&](char* e, size_t n) {
          return gohccl_alltoallv(
              comm,
              src.data_ptr(),
              sendCounts.data(),
              sendOffsets.data(),
              dst.data_ptr(),
              recvCounts.data(),
              recvOffsets.data(),
              goDtype(src),
              ms,
              e,
              n);
        });
        copyBack(out, dst);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::alltoall(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  constexpr const char* kOp = "alltoall";
  TORCH_CHECK_VALUE(
      static_cast<int>(inputs.size()) == size_ &&
          static_cast<int>(outputs.size()) == size_,
      "gohccl ",
      kOp,
      ": needs one input and one output tensor per rank (",
      size_,
      "), got ",
      inputs.size(),
      " inputs and ",
      outputs.size(),
      " outputs");
  checkSameDtype(inputs, kOp, "input");
  for (int p = 0; p < size_; ++p) {
    checkLike(outputs[p], inputs[0], outputs[p].numel(), kOp, c10::str("output ", p));
  }
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::ALLTOALL,
      kOp,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      outputs,
      [comm = comm_, inputs, outputs, ms]() {
        int64_t sendTotal = 0, recvTotal = 0;
        const auto sendOff = offsetsOf(inputs, &sendTotal);
        const auto recvOff = offsetsOf(outputs, &recvTotal);
        at::Tensor src = flatLike(inputs[0], sendTotal);
        at::Tensor dst = flatLike(inputs[0], recvTotal);
        pack(src, 0, inputs, sendOff);
        const uint64_t unit = src.is_complex() ? 2 : 1;
        const size_t size = inputs.size();
        std::vector<uint64_t> sc(size), so(size), rc(size), ro(size);
        for (size_t p = 0; p < size; ++p) {
          sc[p] = countOf(inputs[p]);
          so[p] = static_cast<uint64_t>(sendOff[p]) * unit;
          rc[p] = countOf(outputs[p]);
          ro[p] = static_cast<uint64_t>(recvOff[p]) * unit;
        }
        goCall([&](char* e, size_t n) {
          return gohccl_alltoallv(
              comm, src.data_ptr(), sc.data(), so.data(), dst.data_ptr(),
              rc.data(), ro.data(), goDtype(src), ms, e, n);
        });
        unpack(dst, 0, outputs, recvOff);
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::barrier(
    const c10d::BarrierOptions& opts) {
  const int64_t ms = timeoutMs(opts.timeout);
  return enqueue(
      Lane::kCollective,
      c10d::OpType::BARRIER,
      "barrier",
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      {},
      [comm = comm_, ms]() {
        goCall([&](char* e, size_t n) {
          return gohccl_barrier(comm, ms, e, n);
        });
        return -1;
      });
}

// ---- Point to point ----

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  constexpr const char* kOp = "send";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkPeer(dstRank, kOp, "destination");
  const int64_t ms = timeoutMs(c10d::kUnsetTimeout);
  return enqueue(
      Lane::kSend,
      c10d::OpType::SEND,
      kOp,
      std::chrono::milliseconds(ms),
      /*asyncOp=*/true,
      tensors,
      [comm = comm_, t, dstRank, tag, ms]() {
        at::Tensor src = dense(t);
        goCall([&](char* e, size_t n) {
          return gohccl_send(
              comm, dstRank, tag, src.data_ptr(), countOf(src), goDtype(src), ms, e, n);
        });
        return -1;
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::recv(
    std::vector<at::Tensor>& tensors,
    int srcRank,
    int tag) {
  return postRecv(
      c10d::OpType::RECV,
      "recv",
      onlyTensor(tensors, "recv", "tensor"),
      srcRank,
      tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::recvAnysource(
    std::vector<at::Tensor>& tensors,
    int tag) {
  return postRecv(
      c10d::OpType::RECVANYSOURCE,
      "recv_anysource",
      onlyTensor(tensors, "recv_anysource", "tensor"),
      GOHCCL_ANY_SOURCE,
      tag);
}

} // namespace gohccl
