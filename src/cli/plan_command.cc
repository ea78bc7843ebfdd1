// quiltctl plan: predicted step time, memory and communication of every
// baseline (or one strategy) for a model on a cluster, offline.
#include <fstream>
#include <iostream>

#include "absl/strings/str_format.h"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/topology.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/planner/plan.h"

namespace quilt::cli {
namespace {

struct PlanArgs {
  std::string model;
  std::string cluster;
  int64_t batch = 0;
  std::string strategy = "all";
  std::string trace;
  std::string optimizer = "sgd";
  std::string format = "table";
};

std::string RenderPlan(const quilt::v1::PlanReport& r) {
  std::string out = absl::StrFormat(
      "Model %s, global batch %d. Compute lower bound: %s per step (3 × forward FLOPs / Σ "
      "device FLOP/s)\n\n",
      r.model(), r.global_batch(), HumanSeconds(r.lower_bound_s()));
  Table t({"STRATEGY", "STEP", "SAMPLES/S", "vs LOWER BOUND", "PEAK MEM (max device)", "COMM/STEP",
           "FEASIBLE"});
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
  if (!r.best().empty()) out += "\nBest: " + r.best() + "\n";
  out += absl::StrFormat("Planning took %.2f s\n", r.planning_wall_s());
  return out;
}

int Run(const PlanArgs& a) {
  absl::StatusOr<quilt::v1::ClusterSpec> spec = LoadClusterSpec(a.cluster);
  if (!spec.ok()) return PrintError(std::string(spec.status().message()));
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  if (!topo.ok()) return PrintError(std::string(topo.status().message()));
  absl::StatusOr<Graph> g = LoadModel(a.model, a.batch);
  if (!g.ok()) return PrintError(std::string(g.status().message()));
  TrainingOptions to;
  to.loss = g->loss.type == LossType::kNone ? LossType::kSoftmaxCrossEntropy : g->loss.type;
  to.optimizer.kind = a.optimizer == "adam" ? OptimizerSpec::Kind::kAdam : OptimizerSpec::Kind::kSgd;
  to.optimizer.momentum = a.optimizer == "adam" ? 0 : 0.9;
  if (absl::Status s = BuildTrainingGraph(&*g, to); !s.ok()) return PrintError(std::string(s.message()));
  PlanOptions po;
  po.global_batch = a.batch;
  po.strategy = a.strategy;
  po.trace = !a.trace.empty();
  po.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  absl::StatusOr<PlanResult> r = Plan(*g, *topo, po);
  if (!r.ok()) return PrintError(std::string(r.status().message()));
  if (!a.trace.empty()) {
    if (r->report.best().empty()) return PrintError("no feasible strategy to trace");
    std::ofstream out(a.trace);
    out << ChromeTraceJson(r->best_sim, *topo, a.model + " / " + r->report.best());
    if (!out) return PrintError("cannot write " + a.trace);
  }
  std::cout << (a.format == "json" ? ToJson(r->report) : RenderPlan(r->report));
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, std::vector<Command>* out) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* c = app.add_subcommand(
      "plan", "Predict step time, memory and communication of strategies (offline)");
  c->add_option("model", a->model, "zoo:NAME, a .onnx file or a .pb/.pbtxt graph")->required();
  c->add_option("--cluster", a->cluster, "ClusterSpec file (.textproto or .json)")->required();
  c->add_option("--batch", a->batch, "Global batch size")->required()->check(CLI::PositiveNumber);
  c->add_option("--strategy", a->strategy, "all, or one strategy name");
  c->add_option("--trace", a->trace, "Write the best strategy's simulated timeline (Chrome trace JSON)");
  c->add_option("--optimizer", a->optimizer, "sgd (momentum 0.9) | adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  c->add_option("-o,--output", a->format, "table | json")->check(CLI::IsMember({"table", "json"}));
  out->push_back({c, [a]() { return Run(*a); }});
}

}  // namespace quilt::cli
