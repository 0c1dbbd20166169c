// module.cpp — the Python module spmd_torch._C: the backend's creator
// function (what torch.distributed.Backend.register_backend expects) and the
// c10d store over spmdrun's agent store.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include "process_group.hpp"
#include "spmd_store.hpp"

namespace py = pybind11;

namespace spmd_torch {
void defineElastic(py::module& m);  // elastic.cpp
}

namespace {

// torch 1.x: the process group itself; 2.x: the CPU backend torch wraps in
// its ProcessGroup.
c10::intrusive_ptr<spmd_torch::BackendBase> createProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, bool defaultGroup) {
  return c10::make_intrusive<spmd_torch::ProcessGroupSpmd>(store, rank, size, timeout, defaultGroup);
}

c10::intrusive_ptr<c10d::Store> createStore(const std::string& host, int port,
                                            std::chrono::milliseconds timeout) {
  return c10::make_intrusive<spmd_torch::SpmdStore>(host, port, timeout);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  py::module::import("torch.distributed");  // registers c10d's Store and ProcessGroup types
  m.doc() = "spmd as a torch.distributed backend (import spmd_torch registers \"spmd\")";
  m.def("create_process_group", &createProcessGroup, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("timeout"), py::arg("default_group") = false,
        py::call_guard<py::gil_scoped_release>(),
        "A process group of the spmd backend (torch calls this through register_backend); "
        "default_group: the default group, which under spmdrun forms on the agent's store.");
  m.def("join_default_group", &spmd_torch::joinDefaultGroup, py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "Under spmdrun: join the running default group when its ranks next grow.");
  m.attr("backend_api") = py::bool_(SPMD_TORCH_BACKEND_API);
  m.def("spmd_store", &createStore, py::arg("host"), py::arg("port"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "A torch Store over an spmd store server (spmdrun's agent store).");
  spmd_torch::defineElastic(m);
}
