// WorkGoHCCL and WorkQueue: how one operation is run, completed and waited
// for. See ProcessGroupGoHCCL.hpp for the threading model.
#include "ProcessGroupGoHCCL.hpp"

#include <pthread.h>

#include <algorithm>

#include <ATen/record_function.h>

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

namespace gohccl {

namespace {

// profilingTitle is the name an operation has in torch.profiler traces,
// after Gloo's and NCCL's ("gloo:all_reduce", "nccl:all_reduce").
const char* profilingTitle(c10d::OpType type) {
  switch (type) {
    case c10d::OpType::BROADCAST:
      return "gohccl:broadcast";
    case c10d::OpType::ALLREDUCE:
      return "gohccl:all_reduce";
    case c10d::OpType::ALLREDUCE_COALESCED:
      return "gohccl:all_reduce_coalesced";
    case c10d::OpType::REDUCE:
      return "gohccl:reduce";
    case c10d::OpType::ALLGATHER:
      return "gohccl:all_gather";
    case c10d::OpType::_ALLGATHER_BASE:
      return "gohccl:_all_gather_base";
    case c10d::OpType::ALLGATHER_COALESCED:
      return "gohccl:all_gather_coalesced";
    case c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED:
      return "gohccl:all_gather_into_tensor_coalesced";
    case c10d::OpType::GATHER:
      return "gohccl:gather";
    case c10d::OpType::SCATTER:
      return "gohccl:scatter";
    case c10d::OpType::REDUCE_SCATTER:
      return "gohccl:reduce_scatter";
    case c10d::OpType::_REDUCE_SCATTER_BASE:
      return "gohccl:_reduce_scatter_base";
    case c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED:
      return "gohccl:reduce_scatter_tensor_coalesced";
    case c10d::OpType::ALLTOALL_BASE:
      return "gohccl:all_to_all_single";
    case c10d::OpType::ALLTOALL:
      return "gohccl:all_to_all";
    case c10d::OpType::BARRIER:
      return "gohccl:barrier";
    case c10d::OpType::SEND:
      return "gohccl:send";
    case c10d::OpType::RECV:
      return "gohccl:recv";
    case c10d::OpType::RECVANYSOURCE:
      return "gohccl:recv_anysource";
    default:
      return "gohccl:unknown";
  }
}

} // namespace

GoError::GoError(gohccl_status status, const std::string& msg)
    : c10::DistBackendError(
          {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
          msg),
      status_(status) {}

WorkGoHCCL::WorkGoHCCL(
    int rank,
    c10d::OpType opType,
    std::string name,
    uint64_t seq,
    std::chrono::milliseconds timeout,
    std::vector<at::Tensor> outputs,
    std::optional<std::vector<at::Tensor>> inputs,
    Body body,
    bool waitRunsBody,
    std::shared_ptr<std::atomic<int>> errorState,
    bool runsHere)
    // With the profiler on (the issuer passes the inputs), Work opens a
    // range named by the title, with the inputs' shapes, as Gloo's and
    // NCCL's works do; complete() closes it. Without it nothing is made.
    : c10d::Work(
          rank,
          opType,
          inputs ? profilingTitle(opType) : nullptr,
          inputs),
      body_(std::move(body)),
      waitRunsBody_(waitRunsBody),
      outputs_(std::move(outputs)),
      name_(std::move(name)),
      seq_(seq),
      timeout_(timeout),
      errorState_(std::move(errorState)),
      tls_(
          runsHere ? std::nullopt
                   : std::optional<at::ThreadLocalState>(std::in_place)) {}

WorkGoHCCL::~WorkGoHCCL() = default;

bool WorkGoHCCL::isCompleted() {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool WorkGoHCCL::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkGoHCCL::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

int WorkGoHCCL::sourceRank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(
      completed_,
      "gohccl: sourceRank() of ",
      name_,
      " was asked before the receive completed; wait() for it first");
  TORCH_CHECK(
      !exception_, "gohccl: ", name_, " failed, so it has no source rank");
  return source_;
}

std::vector<at::Tensor> WorkGoHCCL::result() {
  return outputs_;
}

bool WorkGoHCCL::wait(std::chrono::milliseconds timeout) {
  // A receive nobody has started yet is finished here rather than behind
  // earlier receives on the completion thread. Not under a wait timeout:
  // gohccl_recv_wait's own deadline is the receive's, and a receive that
  // times out breaks the communicator.
  if (waitRunsBody_ && timeout == kNoTimeout) {
    run();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [this] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
    lock.unlock();
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gohccl: ",
            name_,
            " did not complete within the ",
            timeout.count(),
            " ms given to wait(); it is still in progress under its own ",
            timeout_.count(),
            " ms deadline"));
  }
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkGoHCCL::getFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!future_) {
    // A future of device tensors names their devices: torch's future then
    // records an event on the completing thread's current stream and makes
    // whoever waits on it (or chains a callback) wait for that event on
    // their own stream. Without the devices, completing it with cuda
    // tensors throws ("not among the expected devices").
    std::vector<c10::Device> devices;
    for (const at::Tensor& t : outputs_) {
      if (t.defined() && !t.device().is_cpu() &&
          std::find(devices.begin(), devices.end(), t.device()) ==
              devices.end()) {
        devices.push_back(t.device());
      }
    }
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::ofTensors(), std::move(devices));
    // Made after the work ended: complete it now. It is new, so no callback
    // runs under the lock.
    if (completed_) {
      settle(*future_, exception_);
    }
  }
  return future_;
}

void WorkGoHCCL::settle(
    c10::ivalue::Future& future,
    const std::exception_ptr& err) {
  if (err) {
    future.setError(err);
  } else {
    future.markCompleted(c10::IValue(outputs_));
  }
}

uint64_t WorkGoHCCL::getSequencenumber() const {
  return seq_;
}

std::chrono::milliseconds WorkGoHCCL::getTimeout() const {
  return timeout_;
}

bool WorkGoHCCL::run() {
  if (claimed_.exchange(true)) {
    return false;
  }
  Body body = std::move(body_);
  int source = -1;
  std::exception_ptr err;
  try {
    std::optional<at::ThreadLocalStateGuard> tlsGuard;
    if (tls_) {
      tlsGuard.emplace(*tls_);
    }
    // The body only moves data into place; nothing in it is differentiable.
    at::NoGradGuard noGrad;
    source = body();
  } catch (const GoError& e) {
    if (errorState_) {
      errorState_->store(static_cast<int>(
          e.status() == GOHCCL_ERR_TIMEOUT ? c10d::ErrorType::TIMEOUT
                                           : c10d::ErrorType::COMM_ERROR));
    }
    err = std::current_exception();
  } catch (...) {
    err = std::current_exception();
  }
  // Drop the body's references (scratch buffers, caller tensors) before
  // callbacks run, so the outputs are all that stays alive.
  body = nullptr;
  complete(source, err);
  return true;
}

bool WorkGoHCCL::fail(std::exception_ptr err) {
  if (claimed_.exchange(true)) {
    return false;
  }
  body_ = nullptr;
  complete(-1, std::move(err));
  return true;
}

void WorkGoHCCL::complete(int source, std::exception_ptr err) {
  // The profiler's range of this work ends here, on whichever thread.
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
  // With a future, the future first: wait() must not return while
  // get_future() still looks pending. markCompleted and setError run the
  // future's callbacks (DDP's among them) inline, so no lock is held then.
  // Without one, the work completes under the same lock that getFuture()
  // takes, so a future made later sees it complete.
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (c10::intrusive_ptr<c10::ivalue::Future> future = future_) {
      lock.unlock();
      try {
        settle(*future, err);
      } catch (const std::exception& e) {
        // A callback threw past the future; the work itself still completes.
        LOG(ERROR) << "gohccl: a callback on the future of " << name_
                   << " threw: " << e.what();
      }
      lock.lock();
    }
    source_ = source;
    exception_ = std::move(err);
    completed_ = true;
  }
  cv_.notify_all();
}

namespace {
std::atomic<int> liveQueueThreads{0};
} // namespace

int WorkQueue::liveThreads() {
  return liveQueueThreads.load();
}

WorkQueue::WorkQueue(std::string threadName)
    : threadName_(std::move(threadName)) {
  liveQueueThreads.fetch_add(1);
  thread_ = std::thread([this] {
    loop();
    liveQueueThreads.fetch_sub(1);
  });
  // Linux limits thread names to 15 characters.
  pthread_setname_np(
      thread_.native_handle(), threadName_.substr(0, 15).c_str());
}

WorkQueue::~WorkQueue() {
  for (auto& work : stop(false)) {
    work->fail(std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
        "gohccl: process group destroyed before " + work->name() + " ran")));
  }
}

void WorkQueue::push(c10::intrusive_ptr<WorkGoHCCL> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(
        !stopping_,
        "gohccl: process group destroyed; ",
        work->name(),
        " was issued after shutdown");
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
}

bool WorkQueue::claimIdle() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_ || !queue_.empty() || running_) {
    return false;
  }
  running_ = true;
  return true;
}

void WorkQueue::runClaimed(const c10::intrusive_ptr<WorkGoHCCL>& work) {
  work->run();
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    wake = stopping_ || !queue_.empty();
  }
  // Works queued meanwhile, and a stop, wait for running_ to clear. Waking
  // the worker for nothing would cost two context switches per synchronous
  // op, several microseconds of a small op's latency.
  if (wake) {
    cv_.notify_one();
  }
}

std::vector<c10::intrusive_ptr<WorkGoHCCL>> WorkQueue::stop(bool drain) {
  std::vector<c10::intrusive_ptr<WorkGoHCCL>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    drain_ = drain;
    if (!drain) {
      left.assign(queue_.begin(), queue_.end());
      queue_.clear();
    }
  }
  cv_.notify_one();
  if (thread_.joinable()) {
    thread_.join();
  }
  return left;
}

bool WorkQueue::busy() {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ || !queue_.empty();
}

void WorkQueue::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] {
      return !running_ && (stopping_ || !queue_.empty());
    });
    if (queue_.empty() || (stopping_ && !drain_)) {
      return;
    }
    auto work = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    work->run();
    work.reset();
    lock.lock();
    running_ = false;
  }
}

} // namespace gohccl
