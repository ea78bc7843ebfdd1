// Replay of a prepared program (sim_state.h): the event loop, memory
// accounting and the result summary (the link queues: link_waits.cc).
#include "src/sim/simulator.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/common/units.h"
#include "src/common/work_clock.h"
#include "src/sim/sim_state.h"

namespace quilt {
namespace sim_internal {

using quilt::v1::Instruction;

const std::vector<int>& Sim::Links(int n) const {
  const Node& node = nodes_[n];
  if (node.kind == Kind::kAllReduce) return collectives_[node.collective].resources;
  static const std::vector<int> kNone;
  if (node.path_from < 0) return kNone;
  return topo_.PathBetween(node.path_from, node.path_to).resources;
}

std::string Sim::Label(int n) const {
  const Instruction& ins = *nodes_[n].ins;
  switch (ins.kind_case()) {
    case Instruction::kCompute:
      return ins.compute().op();
    case Instruction::kSend:
    case Instruction::kRecv:
      return "transfer " +
             (ins.has_send() ? ins.send().range().tensor() : ins.recv().range().tensor());
    case Instruction::kAllReduce:
      return absl::StrCat("all-reduce ", ins.all_reduce().tensors_size(), " tensor(s)");
    case Instruction::kPsPush:
      return "push " + ins.ps_push().gradient().tensor();
    case Instruction::kPsPull:
      return "pull " + ins.ps_pull().parameter().tensor();
    case Instruction::kPsAccumulate:
      return "accumulate " + ins.ps_accumulate().gradient().tensor();
    case Instruction::kConcat:
      return "concat " + ins.concat().target().tensor();
    default:
      return "instruction";
  }
}

void Sim::Alloc(int i) {
  Instance& inst = instances_[i];
  if (inst.allocated) return;
  inst.allocated = true;
  live_[inst.device] += inst.bytes;
  peak_[inst.device] = std::max(peak_[inst.device], live_[inst.device]);
}

void Sim::Release(int i) {
  Instance& inst = instances_[i];
  if (inst.persistent || inst.freed || !inst.allocated || inst.readers > 0) return;
  inst.freed = true;
  live_[inst.device] -= inst.bytes;
}

void Sim::HoldScratch(int n) {
  Node& node = nodes_[n];
  if (node.scratch_held || node.scratch == 0) return;
  node.scratch_held = true;
  live_[node.device] += node.scratch;
  peak_[node.device] = std::max(peak_[node.device], live_[node.device]);
}

void Sim::DropScratch(int n) {
  Node& node = nodes_[n];
  if (!node.scratch_held) return;
  node.scratch_held = false;
  live_[node.device] -= node.scratch;
}

void Sim::Ready(int n) {
  Node& node = nodes_[n];
  switch (node.kind) {
    case Kind::kCompute:
    case Kind::kLocal:
      ready_.Push(node.device, n);
      if (!dirty_[node.device]) {
        dirty_[node.device] = true;
        dirty_list_.push_back(node.device);
      }
      break;
    case Kind::kSend:
      // The transfer belongs to the receiver; tell it the data is ready.
      if (--nodes_[node.partner].pending == 0) Ready(node.partner);
      break;
    case Kind::kAllReduce: {
      HoldScratch(n);
      Collective& c = collectives_[node.collective];
      if (++c.ready == static_cast<int>(c.members.size())) TryStartComm(c.members[0]);
      break;
    }
    default:
      TryStartComm(n);
  }
}

void Sim::Start(int n) {
  Node& node = nodes_[n];
  double duration = node.duration;
  if (node.kind == Kind::kAllReduce) duration = collectives_[node.collective].duration;
  const double start = now_;
  auto involved = [&](auto&& fn) {
    if (node.kind == Kind::kAllReduce) {
      for (int m : collectives_[node.collective].members) fn(m);
    } else {
      fn(n);
      if (node.kind == Kind::kRecv) fn(node.partner);
    }
  };
  // The devices whose transports a transfer uses (one transport per node:
  // one process drives all of a node's devices).
  auto transports = [&](auto&& fn) {
    involved([&](int m) { fn(nodes_[m].device); });
    if (node.kind == Kind::kPush) fn(node.path_to);
    if (node.kind == Kind::kPull) fn(node.path_from);
  };
  if (node.comm()) {
    // A transport that has been idle past its spin window sleeps: the
    // transfer waits for it to wake.
    double wake = 0;
    transports([&](int d) {
      const DeviceSpeed& s = cost_.speed(d);
      if (s.transport_wakeup_s > 0 &&
          comm_end_[topo_.device(d).node] < start - s.transport_spin_s) {
        wake = std::max(wake, s.transport_wakeup_s);
      }
    });
    duration += wake;
  }
  const double end = start + duration;
  if (node.comm()) {
    transports([&](int d) {
      double& last = comm_end_[topo_.device(d).node];
      last = std::max(last, end);
    });
  }
  if (node.comm()) {
    for (int r : Links(n)) {
      link_busy_[r] = true;
      link_busy_s_[r] += duration;
      for (const LinkEntry& e : link_classes_[r]) ++class_state_[e.cls].busy;
      for (const LinkEntry& e : link_trunks_[r]) ++trunks_[e.cls].busy;
    }
  }
  // Writers allocate their outputs when they start.
  involved([&](int m) {
    for (const int* w = writes_.b(m); w != writes_.e(m); ++w) Alloc(*w);
  });
  if (!node.comm()) {
    busy_[node.device] = true;
    busy_s_[node.device] += duration;
    compute_iv_[node.device].push_back({start, end});
  } else {
    involved([&](int m) { comm_iv_[nodes_[m].device].push_back({start, end}); });
    if (node.kind == Kind::kPush) comm_iv_[node.path_to].push_back({start, end});
    if (node.kind == Kind::kPull) comm_iv_[node.path_from].push_back({start, end});
  }
  if (opt_.trace) {
    const std::string label = Label(n);
    if (!node.comm()) {
      trace_.push_back({label, "compute", node.device, start, duration});
    } else {
      involved([&](int m) {
        trace_.push_back({label, node.kind == Kind::kAllReduce ? "collective" : "comm",
                          nodes_[m].device, start, duration});
      });
      for (int r : Links(n))
        trace_.push_back({label, "link", topo_.num_devices() + r, start, duration});
    }
  }
  events_.push({end, seq_++, n});
}

void Sim::Complete(int n) {
  Node& node = nodes_[n];
  auto finished = [&](auto&& fn) {
    if (node.kind == Kind::kAllReduce) {
      for (int m : collectives_[node.collective].members) fn(m);
    } else {
      fn(n);
      if (node.kind == Kind::kRecv) fn(node.partner);
    }
  };
  if (!node.comm()) {
    busy_[node.device] = false;
    if (!dirty_[node.device]) {
      dirty_[node.device] = true;
      dirty_list_.push_back(node.device);
    }
  }
  finished([&](int m) {
    nodes_[m].done = true;
    DropScratch(m);
    for (const int* r = reads_.b(m); r != reads_.e(m); ++r) {
      --instances_[*r].readers;
      Release(*r);
    }
    for (const int* w = writes_.b(m); w != writes_.e(m); ++w) Release(*w);  // unread outputs
  });
  if (node.comm()) FreeLinks(n);
  finished([&](int m) {
    for (const int* s = succ_.b(m); s != succ_.e(m); ++s) {
      Node& next = nodes_[*s];
      if (next.kind == Kind::kLocal && nodes_[m].kind != Kind::kPush && next.local_deps > 0 &&
          --next.local_deps == 0) {
        HoldScratch(*s);  // an accumulate posts its receives
      }
      if (--next.pending == 0) Ready(*s);
    }
  });
}

void Sim::Dispatch(int d) {
  if (busy_[d] || ready_.Empty(d)) return;
  Start(ready_.Pop(d));
}

absl::StatusOr<SimResult> Sim::Run() {
  const absl::Time build_start = absl::Now();
  RETURN_IF_ERROR(Build());
  return Replay(absl::ToDoubleSeconds(absl::Now() - build_start));
}

absl::StatusOr<SimResult> Sim::Replay(double prepare_wall_s) {
  const absl::Time replay_start = absl::Now();
  const int nd = topo_.num_devices();
  ready_.Rank(nd, priority_, [&](int n) {
    const Node& node = nodes_[n];
    return node.kind == Kind::kCompute || node.kind == Kind::kLocal ? node.device : -1;
  });
  busy_.assign(nd, false);
  dirty_.assign(nd, false);
  link_busy_.assign(topo_.num_resources(), false);
  link_classes_.assign(topo_.num_resources(), {});
  // (The pair buckets stay, empty: the classes keep their places.)
  if (link_pairs_.size() != static_cast<size_t>(topo_.num_resources())) {
    link_pairs_.assign(topo_.num_resources(), {});
  }
  for (std::vector<PairBucket>& buckets : link_pairs_) {
    for (PairBucket& b : buckets) b.entries.clear();
  }
  link_trunks_.assign(topo_.num_resources(), {});
  link_busy_s_.assign(topo_.num_resources(), 0.0);
  live_.assign(nd, 0);
  peak_.assign(nd, 0);
  busy_s_.assign(nd, 0.0);
  comm_end_.assign(topo_.num_nodes(), -std::numeric_limits<double>::infinity());
  compute_iv_.resize(nd);
  comm_iv_.resize(nd);
  {
    std::vector<int> computes(nd, 0);
    for (const Node& node : nodes_) {
      if (!node.comm()) ++computes[node.device];
    }
    for (int d = 0; d < nd; ++d) compute_iv_[d].reserve(computes[d]);
  }
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].persistent) Alloc(static_cast<int>(i));
  }
  for (int f : feeds_) Alloc(f);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    if (node.accumulate && node.local_deps == 0) {
      HoldScratch(static_cast<int>(n));
    }
  }
  // Collect first: readying a send can ready its receive, which must not be
  // readied a second time by this loop.
  std::vector<int> initially_ready;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (nodes_[n].pending == 0) initially_ready.push_back(static_cast<int>(n));
  }
  for (int n : initially_ready) Ready(n);
  double end_time = 0;
  for (;;) {
    // Devices whose state changed pick their next instruction once every
    // event of this instant is processed (so priorities decide, not order).
    for (int d : dirty_list_) {
      dirty_[d] = false;
      Dispatch(d);
    }
    dirty_list_.clear();
    if (events_.empty()) break;
    now_ = events_.top().time;
    while (!events_.empty() && events_.top().time == now_) {
      const int n = events_.top().node;
      events_.pop();
      ++event_count_;
      Complete(n);
    }
    end_time = now_;
  }
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (!nodes_[n].done) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction ", nodes_[n].ins->id(), " (", Label(static_cast<int>(n)),
                       ") never ran: a dependency cycle or a collective missing members"));
    }
  }
  SimResult r;
  r.prepare_wall_s = prepare_wall_s;
  r.replay_wall_s = absl::ToDoubleSeconds(absl::Now() - replay_start);
  r.step_time_s = end_time;
  r.communication_bytes = comm_bytes_;
  r.instructions = static_cast<int64_t>(nodes_.size());
  r.events = event_count_;
  ChargeWork(ReplayWork(r));
  std::vector<bool> used(nd, false);
  for (const Node& node : nodes_) used[node.device] = true;
  for (const Instance& inst : instances_) used[inst.device] = true;
  for (int d = 0; d < nd; ++d) {
    if (used[d]) r.host_overhead_s = std::max(r.host_overhead_s, cost_.speed(d).step_overhead_s);
  }
  r.step_time_s += r.host_overhead_s;
  int critical = -1;
  double critical_busy = -1, critical_end = -1;
  int64_t worst_over = 0;
  for (int d = 0; d < nd; ++d) {
    if (!used[d]) continue;
    DeviceUsage u;
    u.device = topo_.device(d).id;
    u.busy_s = busy_s_[d];
    u.idle_s = std::max(0.0, end_time - busy_s_[d]);
    auto& comm = comm_iv_[d];
    if (!std::is_sorted(comm.begin(), comm.end())) std::sort(comm.begin(), comm.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& iv : comm) {
      if (!merged.empty() && iv.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, iv.second);
      } else {
        merged.push_back(iv);
      }
    }
    // (In order already where a device computes one op at a time.)
    auto& compute = compute_iv_[d];
    if (!std::is_sorted(compute.begin(), compute.end())) std::sort(compute.begin(), compute.end());
    double exposed = 0;
    size_t ci = 0;
    for (const auto& [a, b] : merged) {
      double covered = 0;
      while (ci < compute.size() && compute[ci].second <= a) ++ci;
      for (size_t k = ci; k < compute.size() && compute[k].first < b; ++k) {
        covered += std::min(b, compute[k].second) - std::max(a, compute[k].first);
      }
      exposed += (b - a) - covered;
    }
    u.exposed_communication_s = exposed;
    u.peak_memory_bytes = peak_[d];
    u.capacity_bytes = topo_.device(d).proto.memory_bytes();
    u.out_of_memory = u.capacity_bytes > 0 && u.peak_memory_bytes > u.capacity_bytes;
    if (u.out_of_memory && u.peak_memory_bytes - u.capacity_bytes > worst_over) {
      worst_over = u.peak_memory_bytes - u.capacity_bytes;
      r.out_of_memory = absl::StrCat(u.device, " needs ", HumanBytes(u.peak_memory_bytes),
                                     " at its peak, has ", HumanBytes(u.capacity_bytes));
    }
    const double last = std::max(compute.empty() ? 0 : compute.back().second,
                                 merged.empty() ? 0 : merged.back().second);
    const double busy = u.busy_s + u.exposed_communication_s;
    if (busy > critical_busy * (1 + 1e-9) ||
        (busy >= critical_busy * (1 - 1e-9) && last > critical_end)) {
      critical_busy = busy;
      critical_end = last;
      critical = static_cast<int>(r.devices.size());
    }
    r.devices.push_back(u);
  }
  if (critical >= 0) {
    const DeviceUsage& c = r.devices[critical];
    r.critical_device = c.device;
    r.compute_s = c.busy_s;
    r.exposed_communication_s = c.exposed_communication_s;
    r.idle_s = std::max(0.0, end_time - c.busy_s - c.exposed_communication_s);
  }
  for (int k = 0; k < topo_.num_resources(); ++k) {
    if (link_busy_s_[k] <= 0) continue;
    r.links.push_back({topo_.resource(k).name, link_busy_s_[k],
                       end_time > 0 ? std::min(1.0, link_busy_s_[k] / end_time) : 0});
  }
  r.trace = std::move(trace_);
  return r;
}

}  // namespace sim_internal

absl::StatusOr<SimResult> Simulate(const quilt::v1::DistributedProgram& program, const Graph& graph,
                                   const Topology& topology, const CostModel& cost,
                                   const SimOptions& options) {
  sim_internal::Sim sim(program, graph, topology, cost, options);
  return sim.Run();
}

PreparedProgram::PreparedProgram() = default;
PreparedProgram::PreparedProgram(PreparedProgram&&) noexcept = default;
PreparedProgram& PreparedProgram::operator=(PreparedProgram&&) noexcept = default;
PreparedProgram::~PreparedProgram() = default;

absl::StatusOr<PreparedProgram> PreparedProgram::Prepare(
    const quilt::v1::DistributedProgram& program, const Graph& graph, const Topology& topology,
    const CostModel& cost, const SimOptions& options) {
  PreparedProgram p;
  p.options_ = std::make_unique<SimOptions>(options);
  // The index lives here, not in the simulator: each replay copies the
  // simulator.
  if (options.index == nullptr || &options.index->graph() != &graph) {
    ASSIGN_OR_RETURN(GraphIndex ix, GraphIndex::Build(graph));
    p.index_ = std::make_unique<GraphIndex>(std::move(ix));
    p.options_->index = p.index_.get();
  }
  p.sim_ = std::make_unique<sim_internal::Sim>(program, graph, topology, cost, *p.options_);
  RETURN_IF_ERROR(p.sim_->Build());
  return p;
}

namespace {

absl::StatusOr<SimResult> ReplayUnder(sim_internal::Sim* sim, const std::vector<double>* priorities,
                                      absl::Time start) {
  if (priorities != nullptr) {
    if (priorities->size() != sim->priorities().size()) {
      return absl::InvalidArgumentError(absl::StrCat(priorities->size(), " priorities given for ",
                                                     sim->priorities().size(), " instructions"));
    }
    sim->priorities() = *priorities;
  }
  return sim->Replay(absl::ToDoubleSeconds(absl::Now() - start));
}

}  // namespace

absl::StatusOr<SimResult> PreparedProgram::Replay(const std::vector<double>* priorities) const {
  if (sim_ == nullptr) return absl::FailedPreconditionError("the program was replayed last");
  const absl::Time start = absl::Now();
  sim_internal::Sim sim(*sim_);
  return ReplayUnder(&sim, priorities, start);
}

absl::StatusOr<SimResult> PreparedProgram::ReplayLast(const std::vector<double>* priorities) {
  if (sim_ == nullptr) return absl::FailedPreconditionError("the program was replayed last");
  const std::unique_ptr<sim_internal::Sim> sim = std::move(sim_);
  return ReplayUnder(sim.get(), priorities, absl::Now());
}

}  // namespace quilt
