// Planner quality and speed: for each zoo model on each cluster (the shipped
// ones and seeded random heterogeneous ones), the best data-parallel
// baseline's predicted step, the HeteroG plan's, the speedup, the ratio to
// the compute lower bound (and the best baseline's: the most any plan could
// gain), planning time, the search's plans simulated and ruled out by their
// bound (and judged per second), peak memory against capacity, and the
// largest batch the memory floor leaves room for (memory_floor_batch;
// src/planner/memory_floor.h). One JSON object per line.
//
//   bazel build //bench:planner_bench
//   bazel-bin/bench/planner_bench [--models a,b] [--clusters f1,f2] [--random N --seed S]
//       [--rows-per-device R[,R...] | --global-batch B[,MODEL=B...]] [--time-budget S]
//       [--max-plans N] [--diagnose] [--write-clusters DIR] [--node-subsets]
//
// The batch: rows per device times the cluster's devices (a per-model
// default, or --rows-per-device), or --global-batch's, the same on every
// cluster (HeteroG's artifact batches: --global-batch 24,bert_large=6);
// bench/batch_choices.h. After each cluster's models, at each batch
// (--rows-per-device takes a list: the speedup depends on the batch), a
// summary line
// ({"summary": ...}): the geometric means, over the models with a
// feasible data-parallel baseline, of the speedup and of its ceiling
// (the best baseline's step over the compute lower bound), and how many
// plans came out slower than their best baseline (the planner must make
// none).
//
// --node-subsets also plans the data-parallel baselines over the fastest
// nodes alone (1 to all but one of them; bench/node_subsets.h) and gives
// the fastest as node_subset_baseline, with the speedup over the faster
// of it and the best baseline over the whole cluster
// (speedup_vs_node_subsets; the summary's geomean_speedup_vs_node_subsets).
//
// --diagnose prints, per case, the coarsened model's and the full model's
// prediction for the same plans (the baselines' placements), to see how
// far the search's model is from the one that reports, with the busiest
// device's compute, exposed communication and idle time in each.
//
// --time-candidates R skips planning and times what the search pays per
// candidate on its coarsened graph: lowering and simulating the best
// baseline's plan, R times, on one thread (the search may use two), with
// the program's instruction count.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/batch_choices.h"
#include "bench/node_subsets.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/text_format.h"
#include "nlohmann/json.hpp"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/random_cluster.h"
#include "src/cluster/topology.h"
#include "src/common/files.h"
#include "src/graph/zoo_training.h"
#include "src/planner/coarse_graph.h"
#include "src/planner/heterog.h"
#include "src/planner/lower.h"
#include "src/planner/plan.h"
#include "src/planner/search_space.h"
#include "src/sim/simulator.h"

namespace {

// Each device's peak memory, GiB.
std::vector<double> PeaksGiB(const quilt::SimResult& r) {
  std::vector<double> out;
  for (const quilt::DeviceUsage& u : r.devices) {
    out.push_back(static_cast<double>(u.peak_memory_bytes) / (1 << 30));
  }
  return out;
}

// A simulation's step and its busiest device's breakdown (seconds), and
// each device's peak memory.
nlohmann::json Breakdown(const quilt::SimResult& r) {
  return {{"step_s", r.step_time_s},
          {"compute_s", r.compute_s},
          {"exposed_communication_s", r.exposed_communication_s},
          {"idle_s", r.idle_s},
          {"device", r.critical_device},
          {"communication_bytes", r.communication_bytes},
          {"peak_memory_gib", PeaksGiB(r)}};
}

// The full graph's simulation of `s` (nullopt when it does not lower or
// simulate).
std::optional<quilt::SimResult> FineRun(const quilt::Graph& g, const quilt::Topology& topo,
                                        const quilt::CostModel& cost, const quilt::v1::Strategy& s,
                                        int64_t batch) {
  auto prog = quilt::Lower(g, s, topo, &cost, batch);
  if (!prog.ok()) return std::nullopt;
  auto r = quilt::Simulate(*prog, g, topo, cost);
  if (!r.ok()) return std::nullopt;
  return std::move(*r);
}

// The coarse and the full prediction of every baseline's state, and of
// a layer-wise plan (the groups over single devices in order, as many to
// each): the coarse model's memory against the full model's where groups
// sit on different devices.
nlohmann::json Diagnose(const quilt::Graph& g, const quilt::Topology& topo, int64_t batch) {
  nlohmann::json out;
  auto cost = quilt::CostModel::Create(&g, &topo);
  auto coarse = quilt::CoarsenForSearch(g, topo, *cost, batch, 0);
  if (!coarse.ok()) return {{"error", std::string(coarse.status().message())}};
  quilt::SearchSpace space(topo, *cost, **coarse, batch, 1.0);
  auto compare = [&](const quilt::PlanState& state, const quilt::v1::Strategy* baseline,
                     const std::string& name) {
    auto score = space.Evaluate(state);
    nlohmann::json j;
    j["coarse_s"] = score.ok() ? score->time_s : -1;
    if (baseline != nullptr) {
      const std::optional<quilt::SimResult> full = FineRun(g, topo, *cost, *baseline, batch);
      j["full_baseline_s"] = full.has_value() ? full->step_time_s : -1;
    }
    quilt::v1::Strategy same =
        space.FineStrategy(g, state, name, quilt::SearchSpace::kFusePerGroup);
    const std::optional<quilt::SimResult> grouped = FineRun(g, topo, *cost, same, batch);
    j["full_same_plan_grouped_s"] = grouped.has_value() ? grouped->step_time_s : -1;
    // Where the two models part: the busiest device's time by kind, on
    // the coarse program and on the full one with the same collectives.
    google::protobuf::Arena arena;
    auto cp = quilt::LowerOnArena((*coarse)->index(), space.CoarseStrategy(state), topo,
                                  &(*coarse)->cost(), batch, &arena);
    if (cp.ok()) {
      quilt::SimOptions so;
      so.index = &(*coarse)->index();
      auto cr = quilt::Simulate(**cp, (*coarse)->graph(), topo, (*coarse)->cost(), so);
      if (cr.ok()) j["coarse_breakdown"] = Breakdown(*cr);
    }
    if (grouped.has_value()) j["full_same_plan_grouped_breakdown"] = Breakdown(*grouped);
    same.set_order(quilt::OtherOrder(same.order()));
    const std::optional<quilt::SimResult> other = FineRun(g, topo, *cost, same, batch);
    if (other.has_value()) j["full_other_order_breakdown"] = Breakdown(*other);
    out[name] = j;
  };
  for (const quilt::NamedStrategy& ns : quilt::Baselines(g, topo, *cost, batch)) {
    if (!ns.infeasible_reason.empty() || ns.name == "single-device") continue;
    compare(space.FromDataParallel(ns.strategy), &ns.strategy, ns.name);
  }
  quilt::PlanState layerwise;
  const int groups = (*coarse)->num_groups();
  for (int k = 0; k < groups; ++k) {
    layerwise.place.push_back(space.SingleOption(k * topo.num_devices() / groups));
    layerwise.method.push_back(quilt::Method::kRing);
  }
  compare(layerwise, nullptr, "layer-wise");
  return out;
}

// Per candidate on the coarsened graph: the fastest data-parallel baseline's
// plan lowered and simulated `repeat` times; microseconds each (medians).
nlohmann::json TimeCandidates(const quilt::Graph& g, const quilt::Topology& topo, int64_t batch,
                              int repeat) {
  auto cost = quilt::CostModel::Create(&g, &topo);
  auto coarse = quilt::CoarsenForSearch(g, topo, *cost, batch, 0);
  if (!coarse.ok()) return {{"error", std::string(coarse.status().message())}};
  quilt::SearchSpace space(topo, *cost, **coarse, batch, 1.0);
  // The fastest baseline on the coarse model, then its candidate timed.
  std::optional<quilt::PlanState> fastest;
  std::string name;
  double best = -1;
  for (const quilt::NamedStrategy& ns : quilt::Baselines(g, topo, *cost, batch)) {
    if (!ns.infeasible_reason.empty() || ns.name == "single-device") continue;
    const quilt::PlanState state = space.FromDataParallel(ns.strategy);
    auto score = space.Evaluate(state);
    if (!score.ok() || (best >= 0 && score->time_s >= best)) continue;
    best = score->time_s;
    fastest = state;
    name = ns.name;
  }
  if (!fastest.has_value()) return {{"error", "no data-parallel baseline simulates"}};
  const quilt::v1::Strategy s = space.CoarseStrategy(*fastest);
  const quilt::CostModel& ccost = (*coarse)->cost();
  quilt::SimOptions so;
  so.index = &(*coarse)->index();
  std::vector<double> lower_us, sim_us;
  int64_t instructions = 0, events = 0;
  for (int i = 0; i < repeat; ++i) {
    google::protobuf::Arena arena;
    const absl::Time t0 = absl::Now();
    auto p = quilt::LowerOnArena((*coarse)->index(), s, topo, &ccost, batch, &arena);
    const absl::Time t1 = absl::Now();
    if (!p.ok()) return {{"error", std::string(p.status().message())}};
    auto r = quilt::Simulate(**p, (*coarse)->graph(), topo, ccost, so);
    if (!r.ok()) return {{"error", std::string(r.status().message())}};
    lower_us.push_back(absl::ToDoubleMicroseconds(t1 - t0));
    sim_us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t1));
    events = r->events;
    instructions = quilt::InstructionCount(**p);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {{"plan", name},
          {"groups", (*coarse)->num_groups()},
          {"instructions", instructions},
          {"events", events},
          {"lower_us", median(lower_us)},
          {"simulate_us", median(sim_us)},
          {"candidates_per_s", 1e6 / (median(lower_us) + median(sim_us))}};
}

// Geometric means over a cluster's models at one batch.
class Summary {
 public:
  // The speedup over the faster of the best baseline and the best over
  // the fastest nodes alone (--node-subsets).
  void AddVsSubsets(double speedup) {
    ++n_subsets_;
    log_subsets_ += std::log(speedup);
  }
  void Add(double speedup, double ceiling) {
    ++n_;
    log_speedup_ += std::log(speedup);
    if (ceiling > 0) {
      ++with_ceiling_;
      log_ceiling_ += std::log(ceiling);
    }
    slower_ += speedup < 1 - 1e-9 ? 1 : 0;
  }
  nlohmann::json Json() const {
    nlohmann::json j;
    j["models"] = n_;
    j["geomean_speedup"] = n_ > 0 ? nlohmann::json(std::exp(log_speedup_ / n_)) : nullptr;
    j["geomean_ceiling"] =
        with_ceiling_ > 0 ? nlohmann::json(std::exp(log_ceiling_ / with_ceiling_)) : nullptr;
    j["slower_than_baseline"] = slower_;
    if (n_subsets_ > 0) {
      j["geomean_speedup_vs_node_subsets"] = std::exp(log_subsets_ / n_subsets_);
      j["models_vs_node_subsets"] = n_subsets_;
    }
    return j;
  }

 private:
  int n_ = 0, with_ceiling_ = 0, slower_ = 0, n_subsets_ = 0;
  double log_speedup_ = 0, log_ceiling_ = 0, log_subsets_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"planner_bench"};
  std::string models = "vgg19,resnet50,inception_v3,transformer,bert_large,gpt2,gpt2_xl";
  std::string clusters =
      "config/clusters/heterog_testbed.textproto,config/clusters/hap_cluster.textproto,"
      "config/clusters/nvlink_2x4_v100.textproto";
  int random = 0;
  uint64_t seed = 1;
  std::string rows_per_device;  // empty: the per-model default below
  double budget = 10;
  int64_t max_plans = 200;
  bool diagnose = false;
  int time_candidates = 0;
  app.add_option("--models", models);
  app.add_option("--clusters", clusters, "Comma-separated cluster spec files ('' for none)");
  app.add_option("--random", random, "Also this many seeded random heterogeneous clusters");
  app.add_option("--seed", seed, "Seed of the random clusters");
  app.add_option("--rows-per-device", rows_per_device,
                 "Global batch = this × devices (default per model: 8; bert_large 4; gpt2 2; "
                 "gpt2_xl 1/4, at least 1); several, comma-separated, to compare batches");
  std::string global_batch;
  app.add_option("--global-batch", global_batch,
                 "Instead of --rows-per-device: the global batch of every model, and MODEL=B "
                 "for those that differ (comma-separated), the same on every cluster");
  app.add_option("--time-budget", budget,
                 "The planner's time budget, seconds (planning's whole time: plan_budget.h)");
  app.add_option("--max-plans", max_plans, "Plans the search simulates at most (0 = no limit)");
  app.add_flag("--diagnose", diagnose, "Coarse vs full predictions of the same plans");
  bool node_subsets = false;
  app.add_flag("--node-subsets", node_subsets,
               "Also the data-parallel baselines over the fastest nodes alone");
  app.add_option("--time-candidates", time_candidates,
                 "Instead of planning: time lowering and simulating one candidate, this many "
                 "times");
  std::string write_clusters;
  app.add_option("--write-clusters", write_clusters,
                 "Also write each random cluster's spec to DIR/NAME.textproto (for quiltctl plan "
                 "--cluster; DIR made if missing)");
  CLI11_PARSE(app, argc, argv);
  auto batch_choices = quilt::ParseBatchChoices(rows_per_device, global_batch);
  if (!batch_choices.ok()) {
    std::cerr << batch_choices.status().message() << "\n";
    return 1;
  }
  std::vector<quilt::v1::ClusterSpec> specs;
  for (const std::string& path :
       std::vector<std::string>(absl::StrSplit(clusters, ',', absl::SkipEmpty()))) {
    auto spec = quilt::LoadClusterSpec(path);
    if (!spec.ok()) {
      std::cerr << spec.status() << "\n";
      return 1;
    }
    specs.push_back(*spec);
  }
  if (!write_clusters.empty() && random > 0) {
    std::error_code ec;
    std::filesystem::create_directories(write_clusters, ec);
    if (ec) {
      std::cerr << "--write-clusters: cannot make " << write_clusters << ": " << ec.message()
                << "\n";
      return 1;
    }
  }
  for (int i = 0; i < random; ++i) {
    specs.push_back(quilt::RandomCluster(seed + i));
    if (write_clusters.empty()) continue;
    std::string text;
    google::protobuf::TextFormat::PrintToString(specs.back(), &text);
    const std::string path = write_clusters + "/" + specs.back().name() + ".textproto";
    if (absl::Status st = quilt::WriteFileAtomically(path, text); !st.ok()) {
      std::cerr << st << "\n";
      return 1;
    }
  }
  for (const quilt::v1::ClusterSpec& spec : specs) {
    auto topo = quilt::Topology::Build(spec);
    if (!topo.ok()) {
      std::cerr << spec.name() << ": " << topo.status() << "\n";
      return 1;
    }
    for (const quilt::BatchChoice& choice : *batch_choices) {
      Summary summary;
      for (const std::string& model : std::vector<std::string>(absl::StrSplit(models, ','))) {
        auto g = quilt::zoo::ZooTrainingGraph(model);
        if (!g.ok()) {
          std::cerr << model << ": " << g.status() << "\n";
          return 1;
        }
        const int64_t batch = choice.BatchFor(model, topo->num_devices());
        nlohmann::json j;
        j["model"] = model;
        j["cluster"] = spec.name();
        j["devices"] = topo->num_devices();
        j["nodes"] = topo->num_nodes();
        j["global_batch"] = batch;
        if (time_candidates > 0) {
          j["candidate"] = TimeCandidates(*g, *topo, batch, time_candidates);
          std::cout << j.dump() << std::endl;
          continue;
        }
        quilt::PlanOptions po;
        po.global_batch = batch;
        po.search.time_budget_s = budget;
        po.search.max_evaluations = max_plans;
        const absl::Time t0 = absl::Now();
        auto plan = quilt::Plan(*g, *topo, po);
        j["planning_wall_s"] = absl::ToDoubleSeconds(absl::Now() - t0);
        if (!plan.ok()) {
          j["error"] = std::string(plan.status().message());
          std::cout << j.dump() << std::endl;
          continue;
        }
        const auto& r = plan->report;
        // (The planner's clock of work, which its budget counts.)
        j["planning_work_s"] = r.planning_work_s();
        if (r.planning_clock_followed_wall()) j["planning_clock_followed_wall"] = true;
        j["lower_bound_s"] = r.lower_bound_s();
        j["memory_floor_batch"] = r.memory_floor().largest_batch();
        const quilt::v1::StrategyEstimate* best = nullptr;
        const quilt::v1::StrategyEstimate* heterog = nullptr;
        for (const auto& e : r.estimates()) {
          j["baselines"][e.name()] =
              e.feasible() ? nlohmann::json(e.step_time_s()) : nlohmann::json(nullptr);
          if (e.name() == "heterog") {
            heterog = &e;
          } else if (e.feasible() && (best == nullptr || e.step_time_s() < best->step_time_s())) {
            best = &e;
          }
        }
        j["best_baseline"] = best ? best->name() : "";
        j["best_baseline_s"] = best ? best->step_time_s() : 0;
        // The most any plan could gain over the best baseline.
        j["ceiling_speedup"] =
            best && r.lower_bound_s() > 0 ? best->step_time_s() / r.lower_bound_s() : 0;
        if (heterog != nullptr) {
          j["quilt_s"] = heterog->feasible() ? heterog->step_time_s() : 0;
          j["quilt_feasible"] = heterog->feasible();
          j["speedup"] =
              best && heterog->feasible() ? best->step_time_s() / heterog->step_time_s() : 0;
          j["ratio_to_lower_bound"] = heterog->ratio_to_lower_bound();
          j["search_wall_s"] = heterog->search().search_wall_s();
          j["plans_evaluated"] = heterog->search().plans_evaluated();
          j["plans_ruled_out"] = heterog->search().plans_ruled_out();
          // Plans judged (simulated or ruled out) per second of search.
          if (heterog->search().search_wall_s() > 0) {
            j["plans_judged_per_s"] = static_cast<double>(heterog->search().plans_evaluated() +
                                                          heterog->search().plans_ruled_out()) /
                                      heterog->search().search_wall_s();
          }
          // The search's own prediction of its result, on the coarsened graph.
          j["search_coarse_s"] = heterog->search().result_coarse_s();
          j["groups"] = heterog->search().groups();
          double peak = 0;
          for (const auto& m : heterog->memory()) {
            peak = std::max(
                peak, m.peak_bytes() / std::max(1.0, static_cast<double>(m.capacity_bytes())));
          }
          j["peak_memory_fraction"] = peak;
          j["note"] = heterog->note();
          if (best != nullptr && heterog->feasible()) {
            summary.Add(best->step_time_s() / heterog->step_time_s(),
                        r.lower_bound_s() > 0 ? best->step_time_s() / r.lower_bound_s() : 0);
          }
        }
        if (node_subsets) {
          const nlohmann::json sub = quilt::BestNodeSubsetBaseline(*g, spec, batch);
          j["node_subset_baseline"] = sub;
          double against = best != nullptr ? best->step_time_s() : 0;
          if (!sub.is_null() && (against <= 0 || sub["step_s"].get<double>() < against)) {
            against = sub["step_s"].get<double>();
          }
          if (heterog != nullptr && heterog->feasible() && against > 0) {
            j["speedup_vs_node_subsets"] = against / heterog->step_time_s();
            summary.AddVsSubsets(against / heterog->step_time_s());
          }
        }
        if (diagnose) j["diagnose"] = Diagnose(*g, *topo, batch);
        std::cout << j.dump() << std::endl;
      }
      if (time_candidates == 0) {
        nlohmann::json sj = summary.Json();
        sj["cluster"] = spec.name();
        sj["batch"] = choice.Describe();
        std::cout << nlohmann::json{{"summary", sj}}.dump() << std::endl;
      }
    }
  }
  return 0;
}
