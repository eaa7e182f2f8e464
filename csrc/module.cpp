// gohccl._C: the Python face of the shim. It exposes the backend class and
// the creator torch.distributed calls for "gohccl" (registered by
// python/gohccl/__init__.py), plus the library's version.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "ProcessGroupGoHCCL.hpp"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<gohccl::ProcessGroupGoHCCL> createBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout) {
  return c10::make_intrusive<gohccl::ProcessGroupGoHCCL>(
      store, rank, size, timeout);
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gohccl's torch.distributed backend over libgohccl";

  // c10d's Backend and Store must be registered with pybind11 before a class
  // can name Backend as its base or a function take a Store.
  py::module_::import("torch.distributed");

  py::class_<
      gohccl::ProcessGroupGoHCCL,
      c10d::Backend,
      c10::intrusive_ptr<gohccl::ProcessGroupGoHCCL>>(m, "ProcessGroupGoHCCL")
      .def(
          "describe",
          &gohccl::ProcessGroupGoHCCL::describe,
          "libgohccl's one-line description of the communicator: ranks, "
          "transports, buffer size.")
      .def_property_readonly(
          "comm",
          &gohccl::ProcessGroupGoHCCL::comm,
          "The libgohccl communicator handle.");

  // Communicator creation rendezvouses through the store and may block for
  // the whole timeout: the GIL is released so Python-implemented stores and
  // other threads keep running.
  m.def(
      "create_backend",
      &createBackend,
      py::arg("store"),
      py::arg("rank"),
      py::arg("size"),
      py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "Creates the gohccl backend of `rank` in a group of `size` ranks. This "
      "is the creator torch.distributed calls with (store, group rank, group "
      "size, timeout).");

  m.def(
      "version",
      [] { return std::string(gohccl_version()); },
      "The version of libgohccl, e.g. '0.1.0'.");
  m.def(
      "abi_version",
      [] { return gohccl_abi_version(); },
      "The C ABI version built into libgohccl.");
  m.attr("ABI_VERSION") = GOHCCL_ABI_VERSION;
  m.def(
      "_dtype_table",
      [] {
        std::vector<std::tuple<at::ScalarType, int, int>> rows;
        for (const gohccl::DtypeInfo& row : gohccl::dtypeTable()) {
          rows.emplace_back(row.torch, static_cast<int>(row.go), row.lanes);
        }
        return rows;
      },
      "The shim's list of served dtypes: (torch dtype, libgohccl element "
      "type code, elements of that type per torch element).");
  m.def(
      "_live_threads",
      &gohccl::WorkQueue::liveThreads,
      "How many of the backends' queue threads are running in this process; "
      "0 once every gohccl process group is destroyed.");
}
