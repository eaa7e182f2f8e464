// ProcessGroupGoHCCL: the Store bridge, the argument checks, and each
// torch operation as a Collective (Collective.hpp: where its tensors lie in
// libgohccl's buffers) submitted through one path. See
// ProcessGroupGoHCCL.hpp for the threading model.
#include "ProcessGroupGoHCCL.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace gohccl {

namespace {

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

// ---- Argument checks ----

// isServedDevice says the shim can hand t's memory to libgohccl: host
// memory, or a CUDA or PrivateUse1 (Ascend NPU under torch_npu) device's,
// which libgohccl stages.
bool isServedDevice(const c10::Device& d) {
  return d.is_cpu() || d.is_cuda() || d.is_privateuseone();
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
      isServedDevice(t.device()),
      "gohccl ",
      op,
      ": ",
      role,
      " is on device ",
      t.device(),
      "; gohccl serves tensors on cpu, cuda and privateuseone (npu) devices");
  dtypeOf(t.scalar_type(), op, role);
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

// workName is a work's name in messages: the operation and its number
// ("broadcast #12"), made for every work. Built without an ostringstream
// (c10::str): constructing one cost 0.3-0.4 us of a 4.7 us broadcast
// through torch on a 1-rank group (a Xeon VM).
std::string workName(const char* opName, uint64_t seq) {
  std::string name(opName);
  name += " #";
  name += std::to_string(seq);
  return name;
}

// profilerInputs is what a work's profiler range records (WorkGoHCCL): ts
// while torch's profiler is on, else nothing, so that an issue copies no
// list for a range that is not made.
std::optional<std::vector<at::Tensor>> profilerInputs(
    const std::vector<at::Tensor>& ts) {
  if (!at::hasCallbacks()) {
    return std::nullopt;
  }
  return ts;
}

// ---- fork ----

// kLoadedPid is the process that loaded the shim, and with it libgohccl and
// the Go runtime, which starts its threads at load time.
const pid_t kLoadedPid = getpid();

// gForked is set in a child forked after the shim loaded, by a
// pthread_atfork handler registered at load, so that the check every call
// makes is a load instead of a getpid() system call, which took 0.15-0.2
// us of a 4.7 us broadcast through torch on a 1-rank group (a Xeon VM).
std::atomic<bool> gForked{false};
const bool kForkHandled = [] {
  return pthread_atfork(nullptr, nullptr, [] {
           gForked.store(true, std::memory_order_relaxed);
         }) == 0;
}();

// checkNotForked refuses to go on in a process forked from owner: the Go
// runtime's threads do not survive fork(), so any call into libgohccl there
// would hang.
void checkNotForked(pid_t owner, const char* what) {
  if (kForkHandled && !gForked.load(std::memory_order_relaxed)) {
    return;
  }
  const pid_t self = getpid();
  if (self == owner) {
    return;
  }
  C10_THROW_ERROR(
      DistBackendError,
      c10::str(
          "gohccl ",
          what,
          ": this process (pid ",
          self,
          ") was forked from pid ",
          owner,
          " after that one loaded gohccl. The Go runtime inside libgohccl "
          "does not survive fork(), so a forked child can neither use a "
          "gohccl process group it inherited nor create a new one; start "
          "worker processes with the 'spawn' start method or torchrun "
          "instead."));
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
  const uint64_t unit = dtypeOf(t.scalar_type(), op, role).lanes;
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
  // Before any call into Go: in a forked child it would hang.
  checkNotForked(kLoadedPid, "creating a process group");
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
    std::optional<std::vector<at::Tensor>> inputs,
    WorkGoHCCL::Body body) {
  checkNotForked(ownerPid_, opName);
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
        workName(opName, seq),
        seq,
        timeout,
        std::move(outputs),
        std::move(inputs),
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
  checkNotForked(ownerPid_, opName);
  const int64_t ms = timeoutMs(c10d::kUnsetTimeout);
  if (!tensor.device().is_cpu()) {
    return postDeviceRecv(opType, opName, tensor, peer, tag, ms);
  }
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
  std::string name = workName(opName, seq);
  std::vector<at::Tensor> outputs{tensor};
  std::optional<std::vector<at::Tensor>> inputs = profilerInputs(outputs);
  auto work = c10::make_intrusive<WorkGoHCCL>(
      rank_,
      opType,
      name,
      seq,
      std::chrono::milliseconds(ms),
      std::move(outputs),
      std::move(inputs),
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

// postDeviceRecv queues a receive into device memory. libgohccl stages it
// with gohccl_run, which blocks until the message has arrived, so it is not
// posted at issue time: it runs on the completion thread (or the thread that
// waits for it first), and so is matched with the sends in the order the
// receives run.
c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::postDeviceRecv(
    c10d::OpType opType,
    const char* opName,
    at::Tensor& tensor,
    int peer,
    int tag,
    int64_t ms) {
  Collective c = Collective::make(
      GOHCCL_CALL_RECV, Layout(), Layout::backToBack({tensor}), tensor, tensor.numel());
  c.peer = peer;
  c.tag = tag;
  c.place = placeOf({&c.out}, opName);
  std::lock_guard<std::mutex> lock(issueMutex_);
  TORCH_CHECK(
      !closed_,
      "gohccl ",
      opName,
      ": the process group has been destroyed");
  const uint64_t seq = ++p2pSeq_;
  std::vector<at::Tensor> outputs{tensor};
  std::optional<std::vector<at::Tensor>> inputs = profilerInputs(outputs);
  auto work = c10::make_intrusive<WorkGoHCCL>(
      rank_,
      opType,
      workName(opName, seq),
      seq,
      std::chrono::milliseconds(ms),
      std::move(outputs),
      std::move(inputs),
      [comm = comm_, c = std::move(c), ms]() { return c.run(comm, ms); },
      /*waitRunsBody=*/true,
      errorState_);
  recvs_->push(work);
  return work;
}

template <typename Opts>
c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::submit(
    c10d::OpType opType,
    const char* opName,
    const Opts& opts,
    std::vector<at::Tensor> outputs,
    Collective c) {
  const int64_t ms = timeoutMs(opts.timeout);
  c.rank = rank_;
  c.place = placeOf({&c.in, &c.out}, opName);
  const Lane lane =
      c.kind == GOHCCL_CALL_SEND ? Lane::kSend : Lane::kCollective;
  // Taken before c moves into the body.
  std::optional<std::vector<at::Tensor>> inputs =
      profilerInputs(c.in.tensors());
  return enqueue(
      lane,
      opType,
      opName,
      std::chrono::milliseconds(ms),
      opts.asyncOp,
      std::move(outputs),
      std::move(inputs),
      [comm = comm_, c = std::move(c), ms]() { return c.run(comm, ms); });
}

// ---- Collectives ----
//
// Each method checks its arguments, says where its tensors lie in
// libgohccl's buffers (Layout) and submits one Collective; Collective::run
// is the one body they share.

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allreduce(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceOptions& opts) {
  constexpr const char* kOp = "allreduce";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  Collective c = Collective::make(
      GOHCCL_CALL_ALLREDUCE, Layout::backToBack({t}), Layout(), t, t.numel());
  c.red = reductionOf(opts.reduceOp, t.scalar_type(), kOp);
  return submit(c10d::OpType::ALLREDUCE, kOp, opts, tensors, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* kOp = "allreduce_coalesced";
  TORCH_CHECK_VALUE(!tensors.empty(), "gohccl ", kOp, ": no tensors given");
  checkSameDtype(tensors, kOp, "tensor");
  Layout flat = Layout::backToBack(tensors);
  const int64_t n = flat.numel();
  Collective c = Collective::make(
      GOHCCL_CALL_ALLREDUCE, std::move(flat), Layout(), tensors[0], n);
  c.red = reductionOf(opts.reduceOp, tensors[0].scalar_type(), kOp);
  return submit(
      c10d::OpType::ALLREDUCE_COALESCED, kOp, opts, tensors, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::broadcast(
    std::vector<at::Tensor>& tensors,
    const c10d::BroadcastOptions& opts) {
  constexpr const char* kOp = "broadcast";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkRoot(opts.rootRank, kOp);
  checkRootTensor(opts.rootTensor, kOp);
  Collective c = Collective::make(
      GOHCCL_CALL_BROADCAST, Layout::backToBack({t}), Layout(), t, t.numel());
  c.root = static_cast<int>(opts.rootRank);
  c.readsIn = c.root == rank_;
  c.writesIn = c.root != rank_;
  return submit(c10d::OpType::BROADCAST, kOp, opts, tensors, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::reduce(
    std::vector<at::Tensor>& tensors,
    const c10d::ReduceOptions& opts) {
  constexpr const char* kOp = "reduce";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkRoot(opts.rootRank, kOp);
  checkRootTensor(opts.rootTensor, kOp);
  Collective c = Collective::make(
      GOHCCL_CALL_REDUCE, Layout::backToBack({t}), Layout(), t, t.numel());
  c.red = reductionOf(opts.reduceOp, t.scalar_type(), kOp);
  c.root = static_cast<int>(opts.rootRank);
  // Only the root's tensor is an output; the others stay as they were.
  c.writesIn = c.root == rank_;
  return submit(c10d::OpType::REDUCE, kOp, opts, tensors, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "allgather";
  at::Tensor in = onlyTensor(inputs, kOp, "input");
  checkTensor(in, kOp, "input");
  std::vector<at::Tensor> outs = rankList(outputs, in, size_, kOp, "output");
  Collective c = Collective::make(
      GOHCCL_CALL_ALLGATHER,
      Layout::backToBack({in}),
      Layout::backToBack(outs),
      in,
      in.numel());
  return submit(c10d::OpType::ALLGATHER, kOp, opts, outs, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::all_gather_single(
    at::Tensor& output,
    at::Tensor& input,
    const c10d::AllgatherOptions& opts) {
  constexpr const char* kOp = "all_gather_into_tensor";
  checkTensor(input, kOp, "input");
  checkLike(output, input, input.numel() * size_, kOp, "output");
  Collective c = Collective::make(
      GOHCCL_CALL_ALLGATHER,
      Layout::backToBack({input}),
      Layout::backToBack({output}),
      input,
      input.numel());
  return submit(
      c10d::OpType::_ALLGATHER_BASE, kOp, opts, {output}, std::move(c));
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
  // Rank r's inputs, back to back, are block r of the output.
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
  Layout in = Layout::backToBack(inputs);
  const int64_t n = in.numel();
  Collective c = Collective::make(
      GOHCCL_CALL_ALLGATHER, std::move(in), Layout::backToBack(outs), inputs[0], n);
  return submit(
      c10d::OpType::ALLGATHER_COALESCED, kOp, opts, outs, std::move(c));
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
  // Output j holds rank r's input j as its block r.
  Layout in = Layout::backToBack(inputs);
  const int64_t n = in.numel();
  Collective c = Collective::make(
      GOHCCL_CALL_ALLGATHER,
      std::move(in),
      Layout::interleaved(outputs, size_),
      inputs[0],
      n);
  return submit(
      c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED,
      kOp,
      opts,
      outputs,
      std::move(c));
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
  std::vector<at::Tensor> outs;
  if (root == rank_) {
    outs = rankList(outputs, in, size_, kOp, "output");
  } else {
    checkNoList(outputs, root, rank_, kOp, "output");
  }
  Collective c = Collective::make(
      GOHCCL_CALL_GATHER,
      Layout::backToBack({in}),
      Layout::backToBack(outs),
      in,
      in.numel());
  c.root = root;
  return submit(c10d::OpType::GATHER, kOp, opts, outs, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::gather_single(
    at::Tensor& output,
    at::Tensor& input,
    const c10d::GatherOptions& opts) {
  constexpr const char* kOp = "gather_into_tensor";
  checkTensor(input, kOp, "input");
  checkRoot(opts.rootRank, kOp);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (root == rank_) {
    checkLike(output, input, input.numel() * size_, kOp, "output");
    outs.push_back(output);
  }
  Collective c = Collective::make(
      GOHCCL_CALL_GATHER,
      Layout::backToBack({input}),
      Layout::backToBack(outs),
      input,
      input.numel());
  c.root = root;
  return submit(c10d::OpType::GATHER, kOp, opts, outs, std::move(c));
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
  std::vector<at::Tensor> ins;
  if (root == rank_) {
    ins = rankList(inputs, out, size_, kOp, "input");
  } else {
    checkNoList(inputs, root, rank_, kOp, "input");
  }
  Collective c = Collective::make(
      GOHCCL_CALL_SCATTER,
      Layout::backToBack(ins),
      Layout::backToBack({out}),
      out,
      out.numel());
  c.root = root;
  return submit(c10d::OpType::SCATTER, kOp, opts, outputs, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* kOp = "reduce_scatter";
  at::Tensor out = onlyTensor(outputs, kOp, "output");
  checkTensor(out, kOp, "output");
  std::vector<at::Tensor> ins = rankList(inputs, out, size_, kOp, "input");
  Collective c = Collective::make(
      GOHCCL_CALL_REDUCE_SCATTER,
      Layout::backToBack(ins),
      Layout::backToBack({out}),
      out,
      out.numel());
  c.red = reductionOf(opts.reduceOp, out.scalar_type(), kOp);
  return submit(
      c10d::OpType::REDUCE_SCATTER, kOp, opts, outputs, std::move(c));
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
  Collective c = Collective::make(
      GOHCCL_CALL_REDUCE_SCATTER,
      Layout::backToBack({input}),
      Layout::backToBack({output}),
      output,
      output.numel());
  c.red = reductionOf(opts.reduceOp, input.scalar_type(), kOp);
  return submit(
      c10d::OpType::_REDUCE_SCATTER_BASE, kOp, opts, {output}, std::move(c));
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
  // Block r of the flat input is every input's block r, back to back, so
  // that one reduce-scatter hands rank r all of its blocks.
  Layout out = Layout::backToBack(outputs);
  const int64_t n = out.numel();
  Collective c = Collective::make(
      GOHCCL_CALL_REDUCE_SCATTER,
      Layout::interleaved(inputs, size_),
      std::move(out),
      outputs[0],
      n);
  c.red = reductionOf(opts.reduceOp, outputs[0].scalar_type(), kOp);
  return submit(
      c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
      kOp,
      opts,
      outputs,
      std::move(c));
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
  Collective c = Collective::make(
      GOHCCL_CALL_ALLTOALLV,
      Layout::backToBack({input}),
      Layout::backToBack({output}),
      input,
      0);
  splitCounts(input, inputSplitSizes, size_, kOp, "input", &c.sendCounts, &c.sendOffsets);
  splitCounts(output, outputSplitSizes, size_, kOp, "output", &c.recvCounts, &c.recvOffsets);
  return submit(c10d::OpType::ALLTOALL_BASE, kOp, opts, {output}, std::move(c));
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
  Collective c = Collective::make(
      GOHCCL_CALL_ALLTOALLV,
      Layout::backToBack(inputs),
      Layout::backToBack(outputs),
      inputs[0],
      0);
  // Tensor p of either list is the block for (from) rank p.
  const uint64_t lanes = dtypeOf(inputs[0].scalar_type(), kOp, "input").lanes;
  for (int64_t off : c.in.offsets()) {
    c.sendOffsets.push_back(static_cast<uint64_t>(off) * lanes);
  }
  for (int64_t off : c.out.offsets()) {
    c.recvOffsets.push_back(static_cast<uint64_t>(off) * lanes);
  }
  for (int p = 0; p < size_; ++p) {
    c.sendCounts.push_back(countOf(inputs[p]));
    c.recvCounts.push_back(countOf(outputs[p]));
  }
  return submit(c10d::OpType::ALLTOALL, kOp, opts, outputs, std::move(c));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::barrier(
    const c10d::BarrierOptions& opts) {
  return submit(c10d::OpType::BARRIER, "barrier", opts, {}, Collective());
}

// ---- Point to point ----

namespace {
// P2POptions: sends take no options; they use the group's timeout and are
// always queued (a send never waits for its receive).
struct P2POptions {
  std::chrono::milliseconds timeout = c10d::kUnsetTimeout;
  bool asyncOp = true;
};
} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupGoHCCL::send(
    std::vector<at::Tensor>& tensors,
    int dstRank,
    int tag) {
  constexpr const char* kOp = "send";
  at::Tensor t = onlyTensor(tensors, kOp, "tensor");
  checkTensor(t, kOp, "tensor");
  checkPeer(dstRank, kOp, "destination");
  Collective c = Collective::make(
      GOHCCL_CALL_SEND, Layout::backToBack({t}), Layout(), t, t.numel());
  c.peer = dstRank;
  c.tag = tag;
  return submit(c10d::OpType::SEND, kOp, P2POptions(), tensors, std::move(c));
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
