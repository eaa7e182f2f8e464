// shim_test: ProcessGroupGoHCCL from C++, without Python or a launcher.
//
// A group of kRanks backends runs as threads of this process around one
// c10d::HashStore. Each rank issues collectives and point-to-point
// operations through the c10d::Backend interface, checks the results and
// the futures, checks that bad arguments are refused with the right c10
// error type before anything is sent (the next collective still works),
// then shuts down and checks no queue thread is left.
//
// Ends with "shim_test: N passed, M failed"; exit status 0 only if none
// failed.
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ProcessGroupGoHCCL.hpp"

namespace {

constexpr int kRanks = 3;
std::mutex reportMu;
int passed = 0;
int failed = 0;

void check(bool ok, int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(reportMu);
  if (ok) {
    ++passed;
  } else {
    ++failed;
    std::printf("FAIL rank %d: %s\n", rank, what.c_str());
    std::fflush(stdout);
  }
}

bool allEqual(const at::Tensor& t, double v) {
  return t.eq(v).all().item<bool>();
}

// refused runs f and checks it throws E whose message contains fragment.
template <typename E, typename F>
void refused(int rank, const std::string& what, const std::string& fragment, F&& f) {
  try {
    f();
    check(false, rank, what + ": not refused");
  } catch (const E& e) {
    const std::string msg = e.what_without_backtrace();
    check(msg.find(fragment) != std::string::npos, rank,
          what + ": message lacks '" + fragment + "': " + msg);
  } catch (const std::exception& e) {
    check(false, rank, what + ": wrong exception type: " + e.what());
  }
}

void runRank(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
  auto pg = c10::make_intrusive<gohccl::ProcessGroupGoHCCL>(
      store, rank, kRanks, std::chrono::seconds(60));
  const double sum = kRanks * (kRanks + 1) / 2.0;
  check(pg->getBackendName() == "gohccl", rank, "backend name");

  {
    // Non-contiguous, through the queue, with its future.
    std::vector<at::Tensor> ts{at::full({4, 3}, rank + 1.0).t()};
    auto work = pg->allreduce(ts);
    work->wait();
    check(allEqual(ts[0], sum), rank, "allreduce of a transposed tensor");
    auto value = work->getFuture()->value().toTensorVector();
    check(value.size() == 1 && value[0].is_same(ts[0]), rank,
          "allreduce future holds the tensor");
  }
  {
    std::vector<at::Tensor> ts{at::full({5}, rank + 1.0)};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::makePreMulSum(2.0);
    opts.asyncOp = false;
    pg->allreduce(ts, opts)->wait();
    check(allEqual(ts[0], 2 * sum), rank, "PREMUL_SUM allreduce");
  }
  {
    std::vector<at::Tensor> ts{at::full({3}, static_cast<double>(rank))};
    c10d::BroadcastOptions opts;
    opts.rootRank = 1;
    pg->broadcast(ts, opts)->wait();
    check(allEqual(ts[0], 1), rank, "broadcast from rank 1");
  }
  {
    at::Tensor in = at::full({2}, static_cast<double>(rank));
    at::Tensor out = at::zeros({2 * kRanks});
    pg->_allgather_base(out, in)->wait();
    bool ok = true;
    for (int i = 0; i < kRanks; ++i) {
      ok = ok && allEqual(out.narrow(0, 2 * i, 2), i);
    }
    check(ok, rank, "all_gather_single");
  }
  {
    at::Tensor in = at::arange(2 * kRanks, at::kFloat);
    at::Tensor out = at::zeros({2});
    pg->_reduce_scatter_base(out, in)->wait();
    check(out[0].item<float>() == kRanks * 2.0f * rank &&
              out[1].item<float>() == kRanks * (2.0f * rank + 1),
          rank, "reduce_scatter_single");
  }
  {
    // Rank r sends p+1 rows to peer p and receives r+1 rows from each.
    std::vector<int64_t> inSplits, outSplits;
    int64_t inRows = 0;
    for (int p = 0; p < kRanks; ++p) {
      inSplits.push_back(p + 1);
      outSplits.push_back(rank + 1);
      inRows += p + 1;
    }
    at::Tensor in = at::full({inRows, 2}, static_cast<double>(rank));
    at::Tensor out = at::zeros({kRanks * (rank + 1), 2});
    pg->alltoall_base(out, in, outSplits, inSplits)->wait();
    bool ok = true;
    for (int s = 0; s < kRanks; ++s) {
      ok = ok && allEqual(out.narrow(0, s * (rank + 1), rank + 1), s);
    }
    check(ok, rank, "all_to_all_single with uneven splits");
  }
  {
    // Ring: everyone posts its receive first, then sends.
    const int next = (rank + 1) % kRanks;
    const int prev = (rank + kRanks - 1) % kRanks;
    std::vector<at::Tensor> rx{at::zeros({4})};
    std::vector<at::Tensor> tx{at::full({4}, static_cast<double>(rank))};
    auto r = pg->recv(rx, prev, 7);
    auto s = pg->send(tx, next, 7);
    s->wait();
    r->wait();
    check(allEqual(rx[0], prev), rank, "ring of irecv then isend");
  }
  {
    if (rank == 0) {
      int seen = 0;
      for (int i = 1; i < kRanks; ++i) {
        std::vector<at::Tensor> rx{at::zeros({1})};
        auto r = pg->recvAnysource(rx, 9);
        r->wait();
        const int src = r->sourceRank();
        check(rx[0].item<float>() == src, rank, "recv_anysource value");
        seen |= 1 << src;
      }
      check(seen == ((1 << kRanks) - 2), rank, "recv_anysource sources");
    } else {
      std::vector<at::Tensor> tx{at::full({1}, static_cast<double>(rank))};
      pg->send(tx, 0, 9)->wait();
    }
  }

  // Refused before anything is sent: the communicator stays usable.
  refused<c10::TypeError>(rank, "bitwise on float", "bitwise BAND", [&] {
    std::vector<at::Tensor> ts{at::ones({2})};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::BAND;
    pg->allreduce(ts, opts);
  });
  refused<c10::TypeError>(rank, "unsupported dtype", "does not support", [&] {
    std::vector<at::Tensor> ts{at::ones({2}, at::kUInt32)};
    pg->allreduce(ts);
  });
  refused<c10::NotImplementedError>(rank, "sparse", "dense", [&] {
    std::vector<at::Tensor> ts{at::ones({2}).to_sparse()};
    pg->allreduce(ts);
  });
  refused<c10::ValueError>(rank, "root out of range", "out of range", [&] {
    std::vector<at::Tensor> ts{at::ones({2})};
    c10d::BroadcastOptions opts;
    opts.rootRank = kRanks;
    pg->broadcast(ts, opts);
  });
  refused<c10::ValueError>(rank, "output size", "elements, expected", [&] {
    at::Tensor in = at::ones({2});
    at::Tensor out = at::ones({3});
    pg->_allgather_base(out, in);
  });
  refused<c10::ValueError>(rank, "two tensors", "exactly one", [&] {
    std::vector<at::Tensor> ts{at::ones({2}), at::ones({2})};
    pg->allreduce(ts);
  });
  {
    std::vector<at::Tensor> ts{at::ones({2}, at::kInt)};
    pg->allreduce(ts)->wait();
    check(allEqual(ts[0], kRanks), rank, "allreduce after refusals");
  }

  pg->barrier()->wait();
  pg->shutdown();
  refused<c10::Error>(rank, "op after shutdown", "destroyed", [&] {
    std::vector<at::Tensor> ts{at::ones({2})};
    pg->allreduce(ts);
  });
}

} // namespace

int main() {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&store, r] {
      try {
        runRank(store, r);
      } catch (const std::exception& e) {
        check(false, r, std::string("threw: ") + e.what());
      }
    });
  }
  for (auto& t : ranks) {
    t.join();
  }
  check(gohccl::WorkQueue::liveThreads() == 0, -1,
        "queue threads left after shutdown: " +
            std::to_string(gohccl::WorkQueue::liveThreads()));
  std::printf("shim_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
