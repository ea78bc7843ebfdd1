// quiltctl plan: predicted step time, memory and communication of every
// baseline (or one strategy) for a model on a cluster: offline with
// --cluster FILE, otherwise by the coordinator on the live cluster
// (JobService.PlanJob).
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cli/validators.h"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/topology.h"
#include "src/common/files.h"
#include "src/common/proto_file.h"
#include "src/common/status.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/planner/accumulation.h"
#include "src/planner/memory_floor.h"
#include "src/planner/micro_batches.h"
#include "src/planner/plan.h"
#include "src/rpc/coordinator_client.h"

namespace quilt::cli {
namespace {

struct PlanArgs {
  std::string model;
  std::string loss_output;
  std::string cluster;
  int64_t batch = 0;
  std::string strategy = "all";
  std::string trace;
  std::string program_out;
  std::string optimizer = "sgd";
  std::string loss = "auto";
  std::vector<std::string> frozen;
  double lr = 0, momentum = 0.9;
  std::string format = "table";
  bool explain = false;
  bool no_micro_batches = false;
  double time_budget_s = 0;  // 0: 10 s offline, the coordinator's plan_time_budget_ms live
  int64_t max_plans = 200;
  uint64_t seed = 1;
  int groups = 0;
  std::string strategy_file;
  bool strategy_given = false;  // --strategy on the command line
};

std::string Breakdown(const quilt::v1::StrategyEstimate& e) {
  return absl::StrFormat("%s: step %s = %s (execution order: %s)", e.name(),
                         HumanSeconds(e.step_time_s()),
                         StepParts(e.step_time_s(), e.compute_s(), e.exposed_communication_s(),
                                   e.idle_s(), e.critical_device()),
                         ExecutionOrderText(e.strategy().order()));
}

// Per group: what the HeteroG plan chose and what it saves, then the time
// breakdown of the plan and of the baseline it started from.
std::string RenderExplain(const quilt::v1::PlanReport& r) {
  const quilt::v1::StrategyEstimate* h = nullptr;
  for (const auto& e : r.estimates()) {
    if (e.has_search()) h = &e;
  }
  if (h == nullptr) {
    return "\nNothing to explain: --explain says what the planner chose per op group, and it did "
           "not plan here (--strategy heterog or all runs it)\n";
  }
  const quilt::v1::SearchSummary& s = h->search();
  std::string out = absl::StrFormat(
      "\nheterog: %d op group%s, %d plans simulated and %d ruled out by a lower bound in "
      "%.2f s (stopped: %s), starting from %s (coarse model: %s%s → %s%s)\n\n",
      s.groups(), s.groups() == 1 ? "" : "s", s.plans_evaluated(), s.plans_ruled_out(),
      s.search_wall_s(), s.stopped_by(), s.start(), HumanSeconds(s.start_coarse_s()),
      s.start_over_memory() ? " over memory" : "", HumanSeconds(s.result_coarse_s()),
      s.result_over_memory() ? " over memory" : "");
  if (!s.memory_share().empty()) out += "memory: " + s.memory_share() + "\n\n";
  if (!s.memory_repair().empty()) out += "memory: " + s.memory_repair() + "\n\n";
  if (!s.untried().empty()) out += "untried: " + s.untried() + "\n\n";
  if (h->strategy().micro_batches() > 1 && s.pipelined().empty()) {
    out += "gradient accumulation: " +
           DescribeMicroBatches(r.global_batch(), h->strategy().micro_batches()) + " (" +
           h->note() + ")\n\n";
  }
  const std::string pipelined =
      s.pipelined().empty()
          ? ""
          : absl::StrFormat(
                "pipelined: the batch as %s (the plan holds it at once, but its devices waited on "
                "each other's layers; saves %s per step in full simulation)\n",
                s.pipelined(), HumanSeconds(s.pipelined_saved_s()));
  if (s.decisions().empty()) {
    out += "No group choices: the plan is data parallelism (" + h->note() + ")\n";
    if (!s.gradient_collectives().empty()) out += "gradients: " + s.gradient_collectives() + "\n";
    return out + pipelined + Breakdown(*h) + "\n";
  }
  const std::string against = s.decisions_against().empty() || s.decisions_against() == s.start()
                                  ? std::string("the start")
                                  : s.decisions_against();
  const bool all_as_start = absl::c_all_of(s.decisions(), [](const auto& d) {
    return d.as_start() && d.changed_after_search().empty();
  });
  if (all_as_start) {
    out += absl::StrFormat("Every one of the %d groups placed and aggregated as %s had it\n",
                           s.decisions_size(), against);
  }
  Table t({"GROUP", "OPS", "PLACEMENT", "AGGREGATION", "SAVES*"});
  bool over_memory = false;
  for (const auto& d : s.decisions()) {
    const std::string ops =
        d.ops() == 1 ? d.first_op()
                     : absl::StrFormat("%s … %s (%d ops)", d.first_op(), d.last_op(), d.ops());
    std::string saves =
        d.needed_to_fit() ? "needed to fit memory"
        : d.as_start()    ? "- (as the start)"
        : d.saved_not_measured()
            ? (s.memory_repair().empty() ? "not measured (time budget)" : "not measured")
        : d.saved_s() < 0 ? "-" + HumanSeconds(-d.saved_s())
                          : HumanSeconds(d.saved_s());
    if (d.saved_over_memory() && !d.needed_to_fit() && !d.saved_not_measured()) {
      saves += " †";
      over_memory = true;
    }
    if (!d.changed_after_search().empty()) {
      saves += "; then " + d.changed_after_search() + " (below)";
    }
    t.AddRow({std::to_string(d.group()), ops, d.placement(), d.aggregation(), saves});
  }
  if (!all_as_start) {
    out += t.Render() +
           "* the step time added on the search's coarse model by putting that group alone back "
           "as " +
           against +
           " had it (negative: the choice pays only with the others'); the groups' figures do not "
           "add up to the plan's saving\n" +
           (over_memory ? "† the plan is over memory on the coarse model (it fits in full): the "
                          "two steps' times compared alone\n\n"
                        : "\n");
  }
  if (!s.gradient_collectives().empty()) {
    out += absl::StrFormat("gradients: %s (the fastest of %d variants simulated in full)\n",
                           s.gradient_collectives(), s.variants_simulated());
  }
  if (!s.gathered_tables().empty()) {
    out += absl::StrFormat(
        "embedding gradients gathered, not summed: %s (each replica computes the lookups' part "
        "for the whole batch from the others' rows; saves %s per step in full simulation)\n",
        absl::StrJoin(s.gathered_tables(), ", "), HumanSeconds(s.gathered_saved_s()));
  }
  if (!s.exchange_parts().empty()) {
    out += "parts across nodes by their bandwidths, in " + s.exchange_parts() + "\n";
  }
  if (!s.weight_gradient_moves().empty()) {
    out += absl::StrFormat(
        "weight gradients: %s (their activations and output gradients sent there; saves %s per "
        "step in full simulation)\n",
        s.weight_gradient_moves(), HumanSeconds(s.weight_gradient_saved_s()));
  }
  out += pipelined + Breakdown(*h) + "\n";
  if (s.has_best_baseline()) out += Breakdown(s.best_baseline()) + "\n";
  return out;
}

std::string NoFeasibleStrategy(const quilt::v1::PlanReport& r) {
  std::string hint;
  const std::string floor = AboveTheMemoryFloor(r);
  // The hybrid plan's batch first where it is the larger (it usually is:
  // a model no data-parallel plan fits at any batch).
  const bool hybrid = r.hybrid_batch_limit() > r.data_parallel_batch_limit();
  if (hybrid) {
    hint = absl::StrFormat(
        "; the planner's closest plan (heterog above) fits --batch %d with the same placements "
        "(%s per step, simulated in full; a search at that batch may find a faster plan)",
        r.hybrid_batch_limit(), HumanSeconds(r.hybrid_batch_step_s()));
  }
  if (hybrid && r.data_parallel_batch_limit() <= 0) {
    hint += floor;
  } else if (r.data_parallel_batch_limit() > 0) {
    hint += r.memory_floor().devices() < 2
                ? absl::StrFormat("; the device fits --batch %d (planned in full)",
                                  r.data_parallel_batch_limit())
                : absl::StrFormat(
                      "; data parallelism with the speed-proportional split and all-reduce fits "
                      "--batch %d here (planned in full; with parameter servers, which shard the "
                      "optimizer state, perhaps more)",
                      r.data_parallel_batch_limit());
    hint += floor;
  } else if (r.data_parallel_batch_unchecked() > 0) {
    hint = absl::StrFormat(
        "; by the memory model, %s fits about --batch %d (not planned in full: the time budget "
        "ended before it was checked; a longer --time-budget checks it)",
        r.memory_floor().devices() < 2 ? "the device"
                                       : "data parallelism with the speed-proportional split",
        r.data_parallel_batch_unchecked());
    hint += floor;
  } else if (!floor.empty()) {
    hint = floor;
    if (r.memory_floor().largest_batch() > 0) hint += "; a smaller --batch may fit";
  } else {
    hint = r.global_batch() > 1 ? "; a smaller --batch or more devices may fit"
                                : "; devices with more memory may fit";
  }
  hint += AccumulationRefusedHint(r);
  return absl::StrCat(
      "No feasible strategy: every strategy above runs out of memory or cannot "
      "be built at a global batch of ",
      r.global_batch(), hint);
}

// How long planning took; where the planner searched and took over 5 %
// more than its time budget on its clock of work, where the time went (the
// first full simulations are never cut short, and where nothing fits,
// fitting goes on). Where the clock followed the wall, says so.
std::string PlanningTime(const quilt::v1::PlanReport& r) {
  std::string out = absl::StrFormat("%.2f s", r.planning_wall_s());
  if (r.planning_clock_followed_wall()) {
    out += absl::StrFormat(
        " (this machine ran far behind the planner's clock of work, %.2f s, which then followed "
        "the wall: another run may give another plan)",
        r.planning_work_s());
  }
  const double budget = r.time_budget_s();
  const double counted = r.planning_work_s() > 0 ? r.planning_work_s() : r.planning_wall_s();
  if (!(budget > 0) || r.planning_wall_s() <= 1.05 * budget) return out;
  if (counted <= 1.05 * budget) {
    return out + absl::StrFormat(
                     ", %.2f s of work on the planner's clock, which its %.3g s time budget "
                     "counts (this machine ran slower than the clock's costs)",
                     counted, budget);
  }
  double searching = 0;
  for (const auto& e : r.estimates()) {
    if (e.name() == "heterog") searching = e.search().search_wall_s();
  }
  const double before = r.search_began_s();
  const double accumulating = r.accumulation_wall_s();
  const double after = std::max(0.0, r.planning_wall_s() - before - searching - accumulating);
  const std::string micro_batches =
      accumulating > 0
          ? absl::StrFormat(
                "%.2f s planning the batch as micro-batches (gradient accumulation: each try a "
                "plan at a micro-batch's rows and a simulation of the whole step; until one "
                "fits, it goes on past the budget%s), ",
                accumulating,
                r.accumulation_cut_short()
                    ? ", and then the tries left were not begun: a longer --time-budget tries "
                      "them"
                    : "")
          : std::string();
  const std::string rest = absl::StrFormat(
      "%.2f s %s (simulating the plan and the baselines in full, which is never cut short, and "
      "fitting the plan to memory%s)",
      after, accumulating > 0 ? "besides" : "after it",
      r.best().empty() ? "; where no plan fits, fitting one goes on past the budget" : "");
  if (before == 0 && searching == 0) {
    // (Past the memory floor: the planner's plan was not searched for.)
    return out + absl::StrFormat(
                     ", over its %.3g s time budget: not searched at the whole batch (by the "
                     "memory model no plan holds it at once), %s%s",
                     budget, micro_batches, rest);
  }
  return out + absl::StrFormat(
                   ", over its %.3g s time budget: %.2f s before the search (building the "
                   "baselines, and simulating those asked for), %.2f s searching, %s%s",
                   budget, before, searching, micro_batches, rest);
}

// Beside the planner's plan: how much faster than the fastest feasible
// baseline any plan could be (that baseline's step over the compute lower
// bound), so that a small gain reads as what the cluster allows, or not.
std::string Ceiling(const quilt::v1::PlanReport& r) {
  const quilt::v1::StrategyEstimate* best = nullptr;
  bool planned = false;
  for (const auto& e : r.estimates()) {
    if (e.name() == "heterog") {
      planned = true;
      // Planned alone (--strategy heterog): the baseline its search beat.
      const auto& b = e.search().best_baseline();
      if (best == nullptr && b.feasible() && b.step_time_s() > 0) best = &b;
      continue;
    }
    if (absl::StartsWith(e.name(), "file:") || !e.feasible()) continue;
    if (best == nullptr || e.step_time_s() < best->step_time_s()) best = &e;
  }
  if (!planned || best == nullptr || !(r.lower_bound_s() > 0)) return "";
  return absl::StrFormat(
      "\nCeiling: no plan can be more than %.2f× faster than %s here (its step over the compute "
      "lower bound)\n",
      best->step_time_s() / r.lower_bound_s(), best->name());
}

std::string RenderPlan(const quilt::v1::PlanReport& r) {
  std::string out = absl::StrFormat(
      "Model %s, global batch %d. Compute lower bound: %s per step (no plan computes faster: each "
      "op's rows shared out over the devices at will, at their modeled speeds, with no "
      "communication)\n\n",
      r.model(), r.global_batch(), HumanSeconds(r.lower_bound_s()));
  Table t({"STRATEGY", "STEP", "SAMPLES/S", "vs LOWER BOUND", "PEAK MEM (fullest device)",
           "COMM/STEP", "FEASIBLE"});
  for (const auto& e : r.estimates()) {
    int64_t peak = 0, cap = 0;
    for (const auto& m : e.memory()) {
      if (cap == 0 || m.peak_bytes() * 1.0 / std::max<int64_t>(1, m.capacity_bytes()) >
                          peak * 1.0 / std::max<int64_t>(1, cap)) {
        peak = m.peak_bytes();
        cap = m.capacity_bytes();
      }
    }
    const bool ran = e.step_time_s() > 0;
    t.AddRow({e.name(), ran ? HumanSeconds(e.step_time_s()) : "-",
              ran ? absl::StrFormat("%.1f", e.samples_per_s()) : "-",
              ran ? absl::StrFormat("%.2f×", e.ratio_to_lower_bound()) : "-",
              ran ? HumanBytes(peak) + "/" + HumanBytes(cap) : "-",
              ran ? HumanBytes(e.communication_bytes()) : "-",
              e.feasible() ? "yes" : "no: " + e.infeasible_reason()});
  }
  out += t.Render();
  for (const auto& e : r.estimates()) {
    if (!e.note().empty()) out += "\nNote on " + e.name() + ": " + e.note() + "\n";
  }
  out += Ceiling(r);
  if (!r.best().empty()) {
    out += "\nBest: " + r.best() + "\n";
  } else {
    out += "\n" + NoFeasibleStrategy(r) + "\n";
  }
  out += "Planning took " + PlanningTime(r) + "\n";
  for (int i = 0; i < r.calibration_size(); ++i) {
    out += (i == 0 ? "Planned by: " : "            ") + r.calibration(i) + "\n";
  }
  return out;
}

// Prints the report as a table (with --explain, the explanation) or JSON.
// Without a feasible strategy the command fails (the table says why; JSON
// readers get it on stderr), so that scripts do not go on to submit the job.
int Print(const quilt::v1::PlanReport& r, const PlanArgs& a) {
  if (a.format == "json") {
    std::cout << ToJson(r);
    if (r.best().empty()) std::cerr << "quiltctl: " << NoFeasibleStrategy(r) << "\n";
  } else {
    std::cout << RenderPlan(r) + (a.explain ? RenderExplain(r) : "");
  }
  return r.best().empty() ? 1 : 0;
}

// The loss and optimizer the plan trains `g` with (submit's defaults); a
// loss it adds is recorded on `g`. Errors: a --loss other than the one the
// model computes.
absl::StatusOr<TrainingOptions> TrainingFor(const PlanArgs& a, Graph* g) {
  TrainingOptions to;
  ASSIGN_OR_RETURN(to.loss, ApplyLossFlag(a.loss, g));
  if (g->loss.type == LossType::kNone) {
    std::cerr << "planning with softmax cross-entropy: the model has no loss (--loss sets one)\n";
    g->loss.type = to.loss = LossType::kSoftmaxCrossEntropy;
  }
  to.optimizer.kind =
      a.optimizer == "adam" ? OptimizerSpec::Kind::kAdam : OptimizerSpec::Kind::kSgd;
  to.optimizer.learning_rate = a.lr > 0 ? a.lr : (a.optimizer == "adam" ? 1e-3 : 0.05);
  to.optimizer.momentum = a.optimizer == "adam" ? 0 : a.momentum;
  return to;
}

// The coordinator plans on the live cluster.
int RunRemote(const PlanArgs& a, Graph* forward, const GlobalOptions& globals) {
  quilt::v1::PlanJobRequest request;
  quilt::v1::JobSpec& spec = *request.mutable_spec();
  spec.set_name(forward->name);
  for (const std::string& name : a.frozen) spec.add_frozen(name);
  spec.set_global_batch(a.batch);
  spec.set_loss_output(a.loss_output);
  if (absl::Status s = SetJobModel(a.model, a.batch, forward, &spec); !s.ok()) {
    return PrintError(std::string(s.message()));
  }
  absl::StatusOr<TrainingOptions> training = TrainingFor(a, forward);
  if (!training.ok()) return PrintError(std::string(training.status().message()));
  const TrainingOptions& to = *training;
  if (to.loss == LossType::kSoftmaxCrossEntropy) {
    spec.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
  } else if (to.loss == LossType::kMse) {
    spec.set_loss(quilt::v1::Loss::TYPE_MSE);
  }
  if (to.optimizer.kind == OptimizerSpec::Kind::kAdam) {
    spec.mutable_optimizer()->mutable_adam()->set_learning_rate(to.optimizer.learning_rate);
  } else {
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(to.optimizer.learning_rate);
    spec.mutable_optimizer()->mutable_sgd()->set_momentum(to.optimizer.momentum);
  }
  request.set_strategy(a.strategy);
  request.set_time_budget_s(a.time_budget_s);
  request.set_max_plans(a.max_plans == 0 ? -1 : a.max_plans);  // proto: 0 = default
  request.set_seed(a.seed);
  request.set_groups(a.groups);
  request.set_no_micro_batches(a.no_micro_batches);
  // Planning takes seconds to minutes: a longer deadline unless one is given.
  const double timeout =
      globals.timeout_set ? globals.timeout_s : std::max(globals.timeout_s, 600.0);
  rpc::JobClient client(globals.coordinator, absl::Seconds(timeout));
  std::cerr << "planning on the coordinator at " << globals.coordinator << "\n";
  absl::StatusOr<quilt::v1::PlanReport> report = client.PlanJob(request);
  if (!report.ok()) return PrintError(std::string(report.status().message()));
  return Print(*report, a);
}

int Run(PlanArgs a, const GlobalOptions& globals) {
  if (a.strategy == "auto") a.strategy = "all";  // submit's name for it
  absl::StatusOr<Graph> g = LoadModel(a.model, a.batch, a.loss_output);
  if (!g.ok()) return PrintError(std::string(g.status().message()));
  if (absl::Status f = FreezeParameters(&*g, a.frozen); !f.ok()) {
    return PrintError(std::string(f.message()));
  }
  PrintModelNotes(*g, {});
  if (a.cluster.empty()) {
    if (!a.trace.empty() || !a.program_out.empty() || !a.strategy_file.empty()) {
      return PrintError(
          "--trace, --program-out and --strategy-file need --cluster (an offline plan)");
    }
    return RunRemote(a, &*g, globals);
  }
  // Checked before planning, which can take a while.
  if (absl::Status apart =
          CheckOutputsApart({{"--program-out", a.program_out}, {"--trace", a.trace}},
                            {{"the model", absl::StartsWith(a.model, "zoo:") ? "" : a.model},
                             {"--cluster", a.cluster},
                             {"--strategy-file", a.strategy_file}});
      !apart.ok()) {
    return PrintError(std::string(apart.message()));
  }
  for (const std::string* path : {&a.program_out, &a.trace}) {
    if (path->empty()) continue;
    if (absl::Status w = CheckWritablePath(*path); !w.ok()) {
      return PrintError(std::string(w.message()));
    }
  }
  absl::StatusOr<quilt::v1::ClusterSpec> spec = LoadClusterSpec(a.cluster);
  if (!spec.ok()) return PrintError(std::string(spec.status().message()));
  for (const std::string& line : DefaultedFigures(*spec)) std::cerr << "note: " << line << "\n";
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  if (!topo.ok()) return PrintError(std::string(topo.status().message()));
  absl::StatusOr<TrainingOptions> training = TrainingFor(a, &*g);
  if (!training.ok()) return PrintError(std::string(training.status().message()));
  if (absl::Status s = BuildTrainingGraph(&*g, *training); !s.ok()) {
    return PrintError(std::string(s.message()));
  }
  PlanOptions po;
  po.global_batch = a.batch;
  po.strategy = a.strategy;
  if (!a.strategy_file.empty()) {
    quilt::v1::Strategy given;
    if (absl::Status s = ReadProtoFile(a.strategy_file, &given); !s.ok()) {
      return PrintError(std::string(s.message()));
    }
    if (given.global_batch() < 0) {
      return PrintError(absl::StrCat(a.strategy_file, ": its global_batch is ",
                                     given.global_batch(), " (a global batch is positive)"));
    }
    if (given.global_batch() != 0 && given.global_batch() != a.batch) {
      std::cerr << "note: " << a.strategy_file << " was planned for a global batch of "
                << given.global_batch() << "; simulated at " << a.batch
                << " (its replica counts split that)\n";
    }
    const std::string name = "file:" + std::filesystem::path(a.strategy_file).filename().string();
    given.set_name(name);
    po.given.push_back(NamedStrategy{name, std::move(given), ""});
    // Only the file's, unless --strategy names others.
    if (!a.strategy_given) po.strategy = "given";
  }
  po.trace = !a.trace.empty();
  po.program_with_graph = !a.program_out.empty();
  po.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  po.search.time_budget_s = a.time_budget_s > 0 ? a.time_budget_s : 10;
  po.accumulate = !a.no_micro_batches;
  po.search.max_evaluations = a.max_plans;
  po.search.seed = a.seed;
  po.search.target_groups = a.groups;
  absl::StatusOr<PlanResult> r = Plan(*g, *topo, po);
  if (!r.ok()) return PrintError(std::string(r.status().message()));
  if (r->report.best().empty() && (!a.program_out.empty() || !a.trace.empty())) {
    // The table says why each strategy failed; then the error.
    Print(r->report, a);
    return PrintError(a.program_out.empty() ? "no feasible strategy to trace"
                                            : "no feasible strategy to write");
  }
  if (!a.program_out.empty()) {
    // Deterministic bytes: the same plan, the same file (maps in order).
    if (absl::Status w = WriteBinaryProtoFile(a.program_out, r->best_program); !w.ok()) {
      return PrintError(std::string(w.message()));
    }
  }
  if (!a.trace.empty()) {
    if (absl::Status w = WriteFileAtomically(
            a.trace, ChromeTraceJson(r->best_sim, *topo, a.model + " / " + r->report.best()));
        !w.ok()) {
      return PrintError(std::string(w.message()));
    }
  }
  return Print(r->report, a);
}

}  // namespace

std::string StepParts(double step_s, double compute_s, double exposed_s, double idle_s,
                      const std::string& device) {
  const double rest = step_s - compute_s - exposed_s - idle_s;
  return absl::StrFormat(
      "compute %s + exposed communication %s + idle %s%s on %s, its busiest device",
      HumanSeconds(compute_s), HumanSeconds(exposed_s), HumanSeconds(idle_s),
      rest > 1e-3 * step_s ? " + per-step overhead " + HumanSeconds(rest) : "",
      device.empty() ? "-" : device);
}

std::string ExecutionOrderText(quilt::v1::ExecutionOrder order) {
  return order == quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST
             ? "gradients' producers lifted by the communication queued behind them"
             : "critical path first";
}

void AddPlanCommand(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand(
      "plan", "Predict step time, memory and communication of strategies (offline)");
  c->add_option("model", a->model, "zoo:NAME, a .onnx file or a .pb/.pbtxt graph")->required();
  c->add_option("--cluster", a->cluster,
                "ClusterSpec file (.textproto or .json) to plan offline; without it the "
                "coordinator plans on the live cluster");
  c->add_option("--batch", a->batch, "Global batch size")->required()->check(PositiveInt());
  c->add_option("--strategy", a->strategy,
                "all (or auto), heterog (the planner), or a baseline: single-device, dp-even-ring, "
                "dp-even-ps, dp-proportional-ring, dp-proportional-ps");
  c->add_option("--strategy-file", a->strategy_file,
                "A Strategy of your own (text format, or JSON when the name ends in .json: a "
                "strategy `plan -o json` printed, edited) simulated as file:NAME; alone unless "
                "--strategy names others (all: beside every strategy). Offline (--cluster) only")
      ->check(NonEmpty());
  c->add_option(
       "--program-out", a->program_out,
       "Write the best strategy's DistributedProgram (binary protobuf, for quilt-executor)")
      ->check(NonEmpty());
  c->add_flag("--explain", a->explain, "Per op group: what the planner chose and what it saves");
  c->add_flag("--no-micro-batches", a->no_micro_batches,
              "Never run the batch as micro-batches: not where no plan holds it at once "
              "(gradient accumulation), nor pipelined where the plan holds it but idles (the "
              "default tries both)");
  c->add_option("--time-budget", a->time_budget_s,
                "Seconds planning may take (default 10; on the live cluster the "
                "coordinator's plan_time_budget_ms), counted on the planner's clock of work "
                "(lowering and simulation, by size: about the wall's seconds on 2 cores, and "
                "the same plan for a seed on any machine): the search gets what is left after "
                "building the baselines, less a quarter kept for simulating the plan and "
                "the baselines in full (seconds each on hundreds of devices, never cut "
                "short); each step after that is begun only where its simulation fits what "
                "is left; where no plan fits at all, fitting one to memory, or the batch as "
                "micro-batches, goes on past it until one fits, and the micro-batches' tries "
                "after that within twice it from that fit (the progress lines say so)")
      ->check(Positive());
  c->add_option("--max-plans", a->max_plans,
                "Plans the planner's local search judges once one fits: simulated, or ruled "
                "out by a lower bound on their step (default 200; until one fits, the time "
                "budget alone ends it, or 2000 plans where it starts over memory and other "
                "seeds are left; its starting plans and the explanation's what-ifs are "
                "simulated besides)")
      ->check(PositiveInt());
  c->add_option(
       "--seed", a->seed,
       "Seed of the planner's search (same seed, same plan, on any machine and under any load)")
      ->check(Seed());
  c->add_option("--groups", a->groups,
                "Op groups the planner coarsens the graph into (default: by cluster size)")
      ->check(PositiveInt());
  c->add_option("--trace", a->trace,
                "Write the best strategy's simulated timeline (Chrome trace JSON)")
      ->check(NonEmpty());
  c->add_option("--optimizer", a->optimizer, "sgd | adam")->check(CLI::IsMember({"sgd", "adam"}));
  c->add_option("--frozen", a->frozen,
                "Parameters not to train, by name (comma-separated): buffers an ONNX export wrote "
                "as initializers")
      ->delimiter(',');
  c->add_option("--loss-output", a->loss_output,
                "The ONNX output that is the model's own loss (default: the first one-value "
                "output that reads the labels and a weight)");
  c->add_option("--loss", a->loss,
                "auto (the model's; softmax cross-entropy if it has none) | "
                "softmax_cross_entropy | mse")
      ->check(CLI::IsMember({"auto", "softmax_cross_entropy", "mse"}));
  c->add_option("--lr", a->lr,
                "Learning rate of --program-out (default 0.05 for sgd, 1e-3 for adam)")
      ->check(Positive());
  c->add_option("--momentum", a->momentum, "SGD momentum (default 0.9)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("-o,--output", a->format, "table | json")->check(CLI::IsMember({"table", "json"}));
  out->push_back({c, [a, c, &globals]() {
                    if (a->optimizer == "adam" && c->count("--momentum") > 0) {
                      return PrintError("--momentum is SGD's; adam takes --lr only");
                    }
                    a->strategy_given = c->count("--strategy") > 0;
                    return Run(*a, globals);
                  }});
}

}  // namespace quilt::cli
