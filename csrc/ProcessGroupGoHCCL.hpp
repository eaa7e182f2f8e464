// ProcessGroupGoHCCL: the c10d::Backend that serves torch.distributed's
// "gohccl" backend over the C ABI of libgohccl (capi/include/gohccl.h).
//
// The shim has no collective logic of its own. It checks what torch hands it
// (device, layout, dtype, sizes, ranks), refuses what it cannot serve before
// anything is sent, and queues each operation on one of three FIFO threads:
//
//   collectives  every rank runs the n-th collective of a group as its n-th,
//                so issue order is the only order; one thread runs them.
//   sends        gohccl_send never waits for the matching receive, so a
//                thread of their own keeps isend(x); irecv(y) from
//                deadlocking against the same pattern on the peer.
//   receives     posted with gohccl_recv_post on the caller's thread at issue
//                time (matching follows issue order); a completion thread
//                waits for them in order with gohccl_recv_wait, unless a
//                wait() on one comes first and waits for it on its own thread
//                (so waiting for a later receive never queues behind an
//                earlier one whose sender has not sent yet).
//
// A synchronous collective (async_op=False) finds its queue idle most of the
// time; it then runs on the caller's thread, which would only wait anyway,
// in the same order it would have had in the queue.
//
// All tensor data is read and written when the operation runs, never at
// issue time: an earlier queued operation may still be writing the tensor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include <ATen/ThreadLocalState.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "Collective.hpp"
#include "gohccl.h"

namespace gohccl {

// GoError is a failure reported by libgohccl: its message, kept verbatim (it
// names the op, its sequence number and the peer), and its status. Python
// sees it as torch.distributed.DistBackendError.
class GoError : public c10::DistBackendError {
 public:
  GoError(gohccl_status status, const std::string& msg);
  gohccl_status status() const {
    return status_;
  }

 private:
  gohccl_status status_;
};

// WorkGoHCCL is what torch gets back for one operation: its Work state
// (completed, exception, source rank) and a c10::ivalue::Future holding the
// operation's output tensors, completed together once the operation ends.
//
// The operation itself is the body, run exactly once by whoever claims the
// work first: its queue's thread, or for a receive the thread that calls
// wait() on it (so waiting for a later receive never queues behind an earlier
// one that has no sender yet).
class WorkGoHCCL : public c10d::Work {
 public:
  // Body runs the operation and returns the source rank for a receive, -1
  // otherwise; it throws on failure.
  using Body = std::function<int()>;

  // inputs is the operation's input tensors while torch's profiler is on
  // (profilerInputs): the work then opens a profiler range with their
  // shapes. Empty otherwise, and no range is made.
  WorkGoHCCL(
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
      bool runsHere = false);
  ~WorkGoHCCL() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  // wait blocks until the operation ends and rethrows its error. A non-zero
  // timeout bounds the wait only: on expiry it throws, and the operation
  // goes on under its own deadline.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;
  std::chrono::milliseconds getTimeout() const override;

  // run claims the work and runs its body, then completes the work and its
  // future. It returns false, doing nothing, if the work was already claimed.
  bool run();
  // fail claims the work and fails it with err without running the body.
  bool fail(std::exception_ptr err);

  // name is the operation and its sequence number, e.g. "allreduce #12".
  const std::string& name() const {
    return name_;
  }

 private:
  void complete(int source, std::exception_ptr err);
  // settle completes future with the outputs, or fails it with err; it runs
  // the future's callbacks inline.
  void settle(c10::ivalue::Future& future, const std::exception_ptr& err);

  std::atomic<bool> claimed_{false};
  Body body_;
  const bool waitRunsBody_;
  const std::vector<at::Tensor> outputs_;
  // The future is made on the first getFuture(), under mutex_: most
  // synchronous calls never ask for it, and making and completing one is a
  // good part of a small op's cost in the shim.
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  const std::string name_;
  const uint64_t seq_;
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<std::atomic<int>> errorState_;
  // The issuing thread's thread-local state (grad mode, inference mode,
  // dispatch keys), in force while the body runs on another thread; none
  // for a work the issuing thread runs itself (runsHere).
  const std::optional<at::ThreadLocalState> tls_;
  int source_ = -1;
};

// WorkQueue runs works one at a time, in the order they were pushed, on a
// thread of its own.
class WorkQueue {
 public:
  explicit WorkQueue(std::string threadName);
  ~WorkQueue();

  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void push(c10::intrusive_ptr<WorkGoHCCL> work);
  // claimIdle claims the queue for the caller when nothing is queued or
  // running and returns true: the caller then runs its work on its own
  // thread with runClaimed, instead of pushing it. For synchronous
  // operations this saves two thread hand-offs, and the order is the same
  // as through the queue (callers hold their issue lock across claimIdle and
  // push).
  bool claimIdle();
  void runClaimed(const c10::intrusive_ptr<WorkGoHCCL>& work);
  // stop ends the thread after the work it is running. With drain, it runs
  // everything queued first; without, it returns the works it never started.
  std::vector<c10::intrusive_ptr<WorkGoHCCL>> stop(bool drain);
  // busy reports whether a work is queued or running.
  bool busy();

  // liveThreads counts the queue threads of every WorkQueue in the process
  // that have not ended, for tests that check teardown leaves none behind.
  // (Threads the Go runtime starts from a queue thread inherit its name, so
  // names alone do not tell.)
  static int liveThreads();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkGoHCCL>> queue_;
  bool stopping_ = false;
  bool drain_ = false;
  // running_ is set while a work runs, on this queue's thread or a caller's.
  bool running_ = false;
  const std::string threadName_;
  std::thread thread_;
};

class ProcessGroupGoHCCL : public c10d::Backend {
 public:
  // The constructor rendezvouses with the other size-1 ranks through store
  // (a per-group prefix store) and connects to them; it throws
  // c10::DistBackendError with libgohccl's message if that fails.
  ProcessGroupGoHCCL(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      std::chrono::milliseconds timeout);
  ~ProcessGroupGoHCCL() override;

  const std::string getBackendName() const override {
    return "gohccl";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  uint64_t getSequenceNumberForGroup() override;
  c10d::ErrorType getError() override;

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts =
          c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // all_gather_single is _allgather_base under its canonical name; torch
  // forwards either name to this one.
  c10::intrusive_ptr<c10d::Work> all_gather_single(
      at::Tensor& output,
      at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  // all_gather_single_coalesced is allgather_into_tensor_coalesced.
  c10::intrusive_ptr<c10d::Work> all_gather_single_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  // gather_single is gather_into_tensor.
  c10::intrusive_ptr<c10d::Work> gather_single(
      at::Tensor& output,
      at::Tensor& input,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  // reduce_scatter_single is _reduce_scatter_base.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single(
      at::Tensor& output,
      at::Tensor& input,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  // reduce_scatter_single_coalesced is reduce_scatter_tensor_coalesced.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_single_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts =
          c10d::ReduceScatterOptions()) override;
  // all_to_all_single is alltoall_base.
  c10::intrusive_ptr<c10d::Work> all_to_all_single(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors,
      int dstRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors,
      int srcRank,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors,
      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // shutdown stops the threads, fails the works that never started with a
  // "process group destroyed" error and destroys the communicator. A
  // collective in progress is left to finish first. Idempotent.
  void shutdown() override;
  // abort fails every operation in progress at once, then shuts down.
  void abort() override;

  // describe is libgohccl's one-line description of the communicator.
  std::string describe() const;
  gohccl_comm comm() const {
    return comm_;
  }

 private:
  enum class Lane { kCollective, kSend };

  int64_t timeoutMs(std::chrono::milliseconds opTimeout) const;
  c10::intrusive_ptr<c10d::Work> enqueue(
      Lane lane,
      c10d::OpType opType,
      const char* opName,
      std::chrono::milliseconds timeout,
      bool asyncOp,
      std::vector<at::Tensor> outputs,
      std::optional<std::vector<at::Tensor>> inputs,
      WorkGoHCCL::Body body);
  // submit is the one way a collective or a send is issued: it derives the
  // timeout and async_op from the operation's options, finds the device
  // and stream of its tensors, and queues c.run.
  template <typename Opts>
  c10::intrusive_ptr<c10d::Work> submit(
      c10d::OpType opType,
      const char* opName,
      const Opts& opts,
      std::vector<at::Tensor> outputs,
      Collective c);
  c10::intrusive_ptr<c10d::Work> postDeviceRecv(
      c10d::OpType opType,
      const char* opName,
      at::Tensor& tensor,
      int peer,
      int tag,
      int64_t ms);
  c10::intrusive_ptr<c10d::Work> postRecv(
      c10d::OpType opType,
      const char* opName,
      at::Tensor& tensor,
      int peer,
      int tag);
  void checkPeer(int peer, const char* opName, const char* role) const;
  void checkRoot(int64_t root, const char* opName) const;

  // ownerPid_ is the process that created the communicator. A child forked
  // from it has neither its threads nor a working Go runtime, so it must
  // not touch either when the backend is destroyed there.
  const pid_t ownerPid_;
  gohccl_comm comm_ = 0;
  std::atomic<int64_t> timeoutMs_;
  c10::intrusive_ptr<Options> options_;
  std::shared_ptr<std::atomic<int>> errorState_;
  // closing_ is set once shutdown starts; receives that fail after it say
  // the process group was destroyed.
  std::shared_ptr<std::atomic<bool>> closing_;

  // issueMutex_ makes "assign a sequence number and queue" one step, so the
  // order of sequence numbers is the order of the queues.
  std::mutex issueMutex_;
  bool closed_ = false;
  uint64_t collectiveSeq_ = 0;
  uint64_t p2pSeq_ = 0;
  std::unique_ptr<WorkQueue> collectives_;
  std::unique_ptr<WorkQueue> sends_;
  std::unique_ptr<WorkQueue> recvs_;
  std::once_flag shutdownOnce_;
};

} // namespace gohccl
