#include "src/planner/plan.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/planner/lower.h"
#include "src/planner/program_validator.h"

namespace quilt {

absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(const Graph& g, const Topology& topo,
                                                     const CostModel& cost,
                                                     const NamedStrategy& ns, int64_t batch,
                                                     double lower_bound,
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
  std::vector<NamedStrategy> strategies = Baselines(g, topo, cost, o.global_batch);
  bool found = o.strategy == "all";
  double best = -1;
  for (const NamedStrategy& ns : strategies) {
    if (o.strategy != "all" && ns.name != o.strategy) continue;
    found = true;
    quilt::v1::DistributedProgram prog;
    SimResult sim;
    ASSIGN_OR_RETURN(quilt::v1::StrategyEstimate e,
                     Estimate(g, topo, cost, ns, o.global_batch, lb, &prog, &sim, o.trace));
    if (e.feasible() && (best < 0 || e.step_time_s() < best)) {
      best = e.step_time_s();
      rep.set_best(e.name());
      result.best_program = std::move(prog);
      result.best_sim = std::move(sim);
    }
    *rep.add_estimates() = std::move(e);
  }
  if (!found) {
    std::string names;
    for (const auto& ns : strategies) absl::StrAppend(&names, names.empty() ? "" : ", ", ns.name);
    return absl::InvalidArgumentError("unknown strategy '" + o.strategy + "'; known: all, " + names);
  }
  rep.set_planning_wall_s(absl::ToDoubleSeconds(absl::Now() - start));
  return result;
}

}  // namespace quilt
