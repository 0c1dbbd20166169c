// elastic.cpp — spmd_torch._C.Elastic: the C elastic API (spmd/elastic.h)
// over a process group of the spmd backend, for spmd_torch.elastic.  The
// replica's state is a list of contiguous CPU tensors (a state_dict's), whose
// memory spmd_elastic copies in place; a recovery or a grow hands back a new
// process group over the new spmd group.
//
// Ownership: the Elastic keeps the current group's GroupState (so the group
// lives as long as it does).  When a recovery replaces the group, the old
// state is marked retired (spmd_elastic destroys that group itself, after
// the reset callback) and its process group refuses further operations; the
// new state keeps the old one as parent, whose spmd store the new group uses.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <spmd/elastic.h>

#include "process_group.hpp"

namespace py = pybind11;

namespace spmd_torch {

namespace {

class Elastic {
 public:
  explicit Elastic(const c10::intrusive_ptr<BackendBase>& pg) {
    auto* spmdPg = dynamic_cast<ProcessGroupSpmd*>(pg.get());
    TORCH_CHECK(spmdPg, "spmd_torch.elastic: the process group is not of the spmd backend");
    state_ = spmdPg->state();
    timeout_ = spmdPg->timeout();
    TORCH_CHECK(!state_->retired, "spmd_torch.elastic: the process group was already replaced");
    char err[512] = "";
    spmd_status st = spmd_elastic_create(state_->group, &e_, err, sizeof err);
    TORCH_CHECK(st == SPMD_OK, "spmd_torch.elastic: ", err);
    spmd_elastic_set_reset(e_, &Elastic::onReset, this);
  }
  ~Elastic() { spmd_elastic_free(e_); }
  Elastic(const Elastic&) = delete;
  Elastic& operator=(const Elastic&) = delete;

  void addState(const std::string& name, const at::Tensor& t, bool keep) {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "spmd_torch.elastic: state \"", name,
                "\" must be a contiguous CPU tensor");
    check(spmd_elastic_add_state(e_, name.c_str(), t.data_ptr(), t.nbytes(),
                                 keep ? SPMD_ELASTIC_KEEP : 0));
    tensors_.push_back(t);  // the memory must stay valid while e_ uses it
  }
  void beginStep() { spmd_elastic_begin_step(e_); }
  void commit() { spmd_elastic_commit(e_); }
  int64_t commits() const { return spmd_elastic_commits(e_); }

  // The ranks of the current group known to have failed (empty while it is
  // healthy).
  std::vector<int> failedRanks() const {
    std::vector<int> ranks(spmd_group_size(state_->group));
    int n = spmd_group_failed_ranks(state_->group, ranks.data(), (int)ranks.size());
    ranks.resize(n < 0 ? 0 : std::min<size_t>((size_t)n, ranks.size()));
    return ranks;
  }
  std::string errmsg() const { return spmd_group_errmsg(state_->group); }

  c10::intrusive_ptr<BackendBase> recover() {
    check(spmd_elastic_recover(e_));
    return current();
  }
  // Collective at a step boundary: how many processes wait to join.
  int joinersWaiting() {
    int n = 0;
    check(spmd_elastic_joiners_waiting(e_, &n));
    return n;
  }
  // Admit n joiners, send them the state; the grown group.
  c10::intrusive_ptr<BackendBase> grow(int n) {
    check(spmd_elastic_grow(e_, n));
    return current();
  }
  // On a joiner (made over joinDefaultGroup's group): receive the state.
  void joinSync() { check(spmd_elastic_join_sync(e_)); }

  py::dict last() const {
    spmd_elastic_info i = spmd_elastic_last(e_);
    py::dict d;
    d["world_before"] = i.world_before;
    d["world_after"] = i.world_after;
    d["epoch"] = i.epoch;
    d["commits_here"] = i.commits_here;
    d["commits_agreed"] = i.commits_agreed;
    d["steps_lost"] = i.steps_lost;
    d["source_rank"] = i.source_rank;
    d["seconds"] = i.seconds;
    return d;
  }

 private:
  // Called by spmd_elastic inside recover with the new group, before
  // it destroys the old one.
  static spmd_status onReset(void* ctx, spmd_group* g, int, int) {
    auto* self = static_cast<Elastic*>(ctx);
    if (g == self->state_->group) return SPMD_OK;
    auto next = std::make_shared<GroupState>();
    next->group = g;
    next->parent = self->state_;
    self->state_->retired = true;
    self->state_ = std::move(next);
    self->pg_.reset();
    return SPMD_OK;
  }
  c10::intrusive_ptr<BackendBase> current() {
    if (!pg_) pg_ = c10::make_intrusive<ProcessGroupSpmd>(state_, timeout_);
    return pg_;
  }
  void check(spmd_status st) {
    TORCH_CHECK(st == SPMD_OK, "spmd_torch.elastic: rank ", spmd_group_rank(state_->group), ": ",
                spmd_elastic_errmsg(e_), " (", spmd_status_name(st), ")");
  }

  spmd_elastic* e_ = nullptr;
  std::shared_ptr<GroupState> state_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<ProcessGroupSpmd> pg_;  // over state_, made on demand
  std::vector<at::Tensor> tensors_;
};

}  // namespace

void defineElastic(py::module& m) {
  using G = py::call_guard<py::gil_scoped_release>;
  py::class_<Elastic>(m, "Elastic", "spmd/elastic.h over a process group of the spmd backend")
      .def(py::init<const c10::intrusive_ptr<BackendBase>&>(), py::arg("process_group"))
      .def("add_state", &Elastic::addState, py::arg("name"), py::arg("tensor"), py::arg("keep"))
      .def("begin_step", &Elastic::beginStep)
      .def("commit", &Elastic::commit)
      .def("commits", &Elastic::commits)
      .def("failed_ranks", &Elastic::failedRanks)
      .def("errmsg", &Elastic::errmsg)
      .def("recover", &Elastic::recover, G())
      .def("joiners_waiting", &Elastic::joinersWaiting, G())
      .def("grow", &Elastic::grow, py::arg("n"), G())
      .def("join_sync", &Elastic::joinSync, G())
      .def("last", &Elastic::last);
}

}  // namespace spmd_torch
