#include "src/planner/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/planner/lower.h"
#include "src/planner/program_validator.h"

namespace quilt {

absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(const Graph& g, const Topology& topo,
                                                     const CostModel& cost, const NamedStrategy& ns,
                                                     int64_t batch, double lower_bound,
                                                     quilt::v1::DistributedProgram* program,
                                                     SimResult* sim, bool trace) {
  quilt::v1::StrategyEstimate e;
  e.set_name(ns.name);
  if (!ns.infeasible_reason.empty()) {
    e.set_feasible(false);
    e.set_infeasible_reason(ns.infeasible_reason);
    return e;
  }
  *e.mutable_strategy() = ns.strategy;
  absl::StatusOr<quilt::v1::DistributedProgram> prog = Lower(g, ns.strategy, topo, &cost, batch);
  if (!prog.ok()) return Annotate(prog.status(), "lowering " + ns.name);
  RETURN_IF_ERROR(Annotate(ValidateProgram(*prog, g, topo), "validating " + ns.name));
  SimOptions so;
  so.trace = trace;
  ASSIGN_OR_RETURN(SimResult r, Simulate(*prog, g, topo, cost, so));
  e.set_step_time_s(r.step_time_s);
  e.set_samples_per_s(r.step_time_s > 0 ? batch / r.step_time_s : 0);
  e.set_communication_bytes(r.communication_bytes);
  e.set_ratio_to_lower_bound(lower_bound > 0 ? r.step_time_s / lower_bound : 0);
  e.set_compute_s(r.compute_s);
  e.set_exposed_communication_s(r.exposed_communication_s);
  e.set_idle_s(r.idle_s);
  for (const DeviceUsage& u : r.devices) {
    auto* m = e.add_memory();
    m->set_device(u.device);
    m->set_peak_bytes(u.peak_memory_bytes);
    m->set_capacity_bytes(u.capacity_bytes);
  }
  e.set_feasible(r.out_of_memory.empty());
  if (!r.out_of_memory.empty()) e.set_infeasible_reason("out of memory: " + r.out_of_memory);
  if (program != nullptr) *program = std::move(*prog);
  if (sim != nullptr) *sim = std::move(r);
  return e;
}

namespace {

// The proportional baseline's counterpart with the even split.
std::string EvenCounterpart(const std::string& name) {
  const std::string prefix = "dp-proportional-";
  if (name.rfind(prefix, 0) != 0) return "";
  return "dp-even-" + name.substr(prefix.size());
}

struct Evaluated {
  quilt::v1::StrategyEstimate estimate;
  quilt::v1::DistributedProgram program;
  SimResult sim;
};

}  // namespace

absl::StatusOr<PlanResult> Plan(const Graph& g, const Topology& topo, const PlanOptions& o) {
  const absl::Time start = absl::Now();
  if (!g.has_backward) return absl::InvalidArgumentError("planning needs a training graph");
  if (o.global_batch < 1) return absl::InvalidArgumentError("the batch must be at least 1");
  ASSIGN_OR_RETURN(CostModel cost, CostModel::Create(&g, &topo));
  PlanResult result;
  quilt::v1::PlanReport& rep = result.report;
  rep.set_model(g.name);
  rep.set_global_batch(o.global_batch);
  const double lb = ComputeLowerBound(g, cost, topo, o.global_batch);
  rep.set_lower_bound_s(lb);
  if (o.progress) o.progress("building the baselines (fitting memory and compute per device)");
  const std::vector<NamedStrategy> strategies = Baselines(g, topo, cost, o.global_batch);
  auto wanted = [&](const std::string& name) { return o.strategy == "all" || o.strategy == name; };
  std::map<std::string, Evaluated> done;
  auto evaluate = [&](const NamedStrategy& ns) -> absl::Status {
    if (done.count(ns.name)) return absl::OkStatus();
    if (o.progress) {
      o.progress(absl::StrFormat("simulating %s (%.1f s so far)", ns.name,
                                 absl::ToDoubleSeconds(absl::Now() - start)));
    }
    Evaluated e;
    ASSIGN_OR_RETURN(e.estimate,
                     Estimate(g, topo, cost, ns, o.global_batch, lb, &e.program, &e.sim, o.trace));
    done[ns.name] = std::move(e);
    return absl::OkStatus();
  };
  bool found = false;
  for (const NamedStrategy& ns : strategies) {
    if (!wanted(ns.name)) continue;
    found = true;
    RETURN_IF_ERROR(evaluate(ns));
    // The proportional split is meant to beat the even one; where the
    // simulation disagrees (communication-bound steps, or a split the memory
    // fit misjudged), the even split is the better proportional plan.
    const std::string even = EvenCounterpart(ns.name);
    if (even.empty()) continue;
    for (const NamedStrategy& other : strategies) {
      if (other.name == even) RETURN_IF_ERROR(evaluate(other));
    }
    auto it = done.find(even);
    if (it == done.end()) continue;
    Evaluated& prop = done[ns.name];
    const Evaluated& ev = it->second;
    const bool better =
        ev.estimate.feasible() &&
        (!prop.estimate.feasible() || ev.estimate.step_time_s() < prop.estimate.step_time_s());
    if (!better) continue;
    std::string note = prop.estimate.feasible()
                           ? absl::StrFormat(
                                 "the speed-proportional split simulated slower (%.4g s); "
                                 "the even split is kept",
                                 prop.estimate.step_time_s())
                           : "the speed-proportional split does not fit (" +
                                 prop.estimate.infeasible_reason() + "); the even split is kept";
    prop = ev;
    prop.estimate.set_name(ns.name);
    prop.estimate.mutable_strategy()->set_name(ns.name);
    prop.estimate.set_note(note);
    prop.program.mutable_strategy()->set_name(ns.name);
  }
  if (!found) {
    std::string names;
    for (const auto& ns : strategies) absl::StrAppend(&names, names.empty() ? "" : ", ", ns.name);
    return absl::InvalidArgumentError("unknown strategy '" + o.strategy + "'; known: all, " +
                                      names);
  }
  double best = -1;
  for (const NamedStrategy& ns : strategies) {
    if (!wanted(ns.name)) continue;
    Evaluated& e = done.at(ns.name);
    if (e.estimate.feasible() && (best < 0 || e.estimate.step_time_s() < best)) {
      best = e.estimate.step_time_s();
      rep.set_best(ns.name);
      result.best_program = std::move(e.program);
      result.best_sim = std::move(e.sim);
    }
    *rep.add_estimates() = e.estimate;
  }
  rep.set_planning_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
  return result;
}

}  // namespace quilt
