#include "src/planner/estimate.h"

#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "src/common/status.h"
#include "src/planner/lower.h"
#include "src/planner/program_validator.h"

namespace quilt {

namespace {

void Fill(const SimResult& r, int64_t batch, double lower_bound, quilt::v1::StrategyEstimate* e) {
  e->set_step_time_s(r.step_time_s);
  e->set_samples_per_s(r.step_time_s > 0 ? batch / r.step_time_s : 0);
  e->set_communication_bytes(r.communication_bytes);
  e->set_ratio_to_lower_bound(lower_bound > 0 ? r.step_time_s / lower_bound : 0);
  e->set_compute_s(r.compute_s);
  e->set_exposed_communication_s(r.exposed_communication_s);
  e->set_idle_s(r.idle_s);
  e->set_critical_device(r.critical_device);
  for (const DeviceUsage& u : r.devices) {
    auto* m = e->add_memory();
    m->set_device(u.device);
    m->set_peak_bytes(u.peak_memory_bytes);
    m->set_capacity_bytes(u.capacity_bytes);
  }
  e->set_feasible(r.out_of_memory.empty());
  if (!r.out_of_memory.empty()) e->set_infeasible_reason("out of memory: " + r.out_of_memory);
  if (!std::isfinite(r.step_time_s)) {
    e->set_feasible(false);
    e->set_infeasible_reason("its simulated step time is not finite (check the devices' figures)");
  }
}

}  // namespace

absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(const Graph& g, const Topology& topo,
                                                     const CostModel& cost, const NamedStrategy& ns,
                                                     int64_t batch, double lower_bound,
                                                     quilt::v1::DistributedProgram* program,
                                                     SimResult* sim, bool trace, bool both_orders) {
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(g));
  return Estimate(ix, topo, cost, ns, batch, lower_bound, program, sim, trace, both_orders);
}

namespace {

// Validates (with `validate`) and simulates a lowered program into an
// estimate of `ns`; with `both_orders`, reranked for the other execution
// order too, and kept in the faster.
absl::StatusOr<quilt::v1::StrategyEstimate> EstimateLowered(
    const GraphIndex& ix, const Topology& topo, const CostModel& cost, const NamedStrategy& ns,
    int64_t batch, double lower_bound, quilt::v1::DistributedProgram* prog, SimResult* sim,
    bool trace, bool both_orders, bool validate) {
  const Graph& g = ix.graph();
  quilt::v1::StrategyEstimate e;
  e.set_name(ns.name);
  if (validate) {
    RETURN_IF_ERROR(Annotate(ValidateProgram(*prog, ix, topo), "validating " + ns.name));
  }
  SimOptions so;
  so.trace = trace;
  so.index = &ix;
  ASSIGN_OR_RETURN(PreparedProgram prepared, PreparedProgram::Prepare(*prog, g, topo, cost, so));
  ASSIGN_OR_RETURN(SimResult r, both_orders ? prepared.Replay() : prepared.ReplayLast());
  if (both_orders) {
    // Priorities do not change what the program does: the same program
    // reranked, replayed, and kept if faster (else its priorities and
    // order are put back: cheaper than copying the program).
    const std::vector<double> priorities = Priorities(*prog);
    const quilt::v1::ExecutionOrder order = prog->strategy().order();
    RETURN_IF_ERROR(Reprioritize(ix, topo, &cost, OtherOrder(order), prog));
    const std::vector<double> reranked = Priorities(*prog);
    ASSIGN_OR_RETURN(SimResult ro, prepared.ReplayLast(&reranked));
    const bool fits = r.out_of_memory.empty(), other_fits = ro.out_of_memory.empty();
    if (other_fits && (!fits || ro.step_time_s < r.step_time_s)) {
      r = std::move(ro);
    } else {
      SetPriorities(priorities, prog);
      prog->mutable_strategy()->set_order(order);
    }
  }
  *e.mutable_strategy() = prog->strategy();
  e.mutable_strategy()->set_name(ns.name);
  e.mutable_strategy()->set_global_batch(batch);  // (the baselines' builders leave it out)
  Fill(r, batch, lower_bound, &e);
  if (sim != nullptr) *sim = std::move(r);
  return e;
}

// An estimate of a strategy that is infeasible before lowering, or none.
std::optional<quilt::v1::StrategyEstimate> Unlowerable(const NamedStrategy& ns) {
  if (ns.infeasible_reason.empty()) return std::nullopt;
  quilt::v1::StrategyEstimate e;
  e.set_name(ns.name);
  e.set_feasible(false);
  e.set_infeasible_reason(ns.infeasible_reason);
  return e;
}

}  // namespace

absl::StatusOr<quilt::v1::StrategyEstimate> Estimate(const GraphIndex& ix, const Topology& topo,
                                                     const CostModel& cost, const NamedStrategy& ns,
                                                     int64_t batch, double lower_bound,
                                                     quilt::v1::DistributedProgram* program,
                                                     SimResult* sim, bool trace, bool both_orders) {
  if (auto e = Unlowerable(ns)) return *e;
  // (Plan puts the training graph in the program it returns.)
  absl::StatusOr<quilt::v1::DistributedProgram> prog =
      LowerWithoutGraph(ix, ns.strategy, topo, &cost, batch);
  if (!prog.ok()) return Annotate(prog.status(), "lowering " + ns.name);
  ASSIGN_OR_RETURN(quilt::v1::StrategyEstimate e,
                   EstimateLowered(ix, topo, cost, ns, batch, lower_bound, &*prog, sim, trace,
                                   both_orders, /*validate=*/true));
  if (program != nullptr) *program = std::move(*prog);
  return e;
}

absl::StatusOr<quilt::v1::StrategyEstimate> EstimateOnArena(
    const GraphIndex& ix, const Topology& topo, const CostModel& cost, const NamedStrategy& ns,
    int64_t batch, double lower_bound, ArenaProgram* program, SimResult* sim, bool trace,
    bool both_orders, bool validate) {
  if (auto e = Unlowerable(ns)) return *e;
  absl::StatusOr<quilt::v1::DistributedProgram*> prog =
      LowerOnArena(ix, ns.strategy, topo, &cost, batch, program->NewArena());
  if (!prog.ok()) return Annotate(prog.status(), "lowering " + ns.name);
  program->Adopt(*prog);
  return EstimateLowered(ix, topo, cost, ns, batch, lower_bound, *prog, sim, trace, both_orders,
                         validate);
}

}  // namespace quilt
