// Simulator and planning speed: for each zoo model on each shipped cluster,
// the time to lower the data-parallel (even split, ring all-reduce) program
// (as Plan's estimates do: onto an arena, without the training graph),
// validate it and simulate one step, with the simulator's events per second;
// and the wall time of a full `plan` (every strategy). Prints one JSON object
// per line.
//
//   bazel build //bench:simulator_bench
//   bazel-bin/bench/simulator_bench [--models a,b] [--clusters DIR_OR_FILES] [--repeat N]
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/topology.h"
#include "src/graph/graph_index.h"
#include "src/graph/zoo/zoo.h"
#include "src/graph/zoo_training.h"
#include "src/planner/arena_program.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/planner/plan.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"simulator_bench"};
  std::string models;  // default: every zoo model
  std::string clusters =
      "config/clusters/heterog_testbed.textproto,config/clusters/hap_cluster.textproto,"
      "config/clusters/nvlink_2x4_v100.textproto";
  int repeat = 3;
  int64_t batch_per_device = 8;
  bool full_plan = true;
  app.add_option("--models", models);
  app.add_option("--clusters", clusters);
  app.add_option("--repeat", repeat);
  app.add_option("--batch-per-device", batch_per_device);
  app.add_option("--plan", full_plan, "Also time a full plan (every strategy)");
  CLI11_PARSE(app, argc, argv);
  if (models.empty()) {
    for (const quilt::zoo::ZooModel& m : quilt::zoo::ZooModels()) {
      models += (models.empty() ? "" : ",") + m.name;
    }
  }
  for (const std::string& cpath : std::vector<std::string>(absl::StrSplit(clusters, ','))) {
    auto spec = quilt::LoadClusterSpec(cpath);
    if (!spec.ok()) {
      std::cerr << spec.status() << "\n";
      return 1;
    }
    auto topo = quilt::Topology::Build(*spec);
    for (const std::string& model : std::vector<std::string>(absl::StrSplit(models, ','))) {
      auto g = quilt::zoo::ZooTrainingGraph(model);
      if (!g.ok()) {
        std::cerr << model << ": " << g.status() << "\n";
        return 1;
      }
      const int64_t batch = batch_per_device * topo->num_devices();
      auto cost = quilt::CostModel::Create(&*g, &*topo);
      std::vector<int64_t> even(topo->num_devices(), 1);
      auto strategy = quilt::DataParallelStrategy(
          *g, *topo, even, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp-even-ring");
      // The graph's index, built once per graph (as the planner does for
      // every strategy it simulates), timed on its own.
      absl::Time t_index = absl::Now();
      absl::StatusOr<quilt::GraphIndex> index = quilt::GraphIndex::Build(*g);
      const double index_s = Seconds(t_index);
      if (!index.ok()) {
        std::cerr << index.status() << "\n";
        return 1;
      }
      quilt::SimOptions sim_options;
      sim_options.index = &*index;
      double lower = 1e9, validate = 1e9, simulate = 1e9, prepare = 1e9, replay = 1e9;
      int64_t events = 0, instructions = 0;
      double step = 0;
      for (int r = 0; r < repeat; ++r) {
        // Lowered as Plan's estimates lower every strategy: without the
        // training graph inside, onto an arena of the program's own.
        absl::Time t0 = absl::Now();
        quilt::ArenaProgram arena_program;
        auto lowered =
            quilt::LowerOnArena(*index, strategy, *topo, &*cost, batch, arena_program.NewArena());
        lower = std::min(lower, Seconds(t0));
        if (!lowered.ok()) {
          std::cerr << lowered.status() << "\n";
          return 1;
        }
        arena_program.Adopt(*lowered);
        const quilt::v1::DistributedProgram* prog = *lowered;
        t0 = absl::Now();
        auto v = quilt::ValidateProgram(*prog, *index, *topo);
        validate = std::min(validate, Seconds(t0));
        if (!v.ok()) {
          std::cerr << v << "\n";
          return 1;
        }
        t0 = absl::Now();
        auto sim = quilt::Simulate(*prog, *g, *topo, *cost, sim_options);
        simulate = std::min(simulate, Seconds(t0));
        if (!sim.ok()) {
          std::cerr << sim.status() << "\n";
          return 1;
        }
        prepare = std::min(prepare, sim->prepare_wall_s);
        replay = std::min(replay, sim->replay_wall_s);
        events = sim->events;
        instructions = sim->instructions;
        step = sim->step_time_s;
      }
      nlohmann::json j;
      j["cluster"] = spec->name();
      j["devices"] = topo->num_devices();
      j["model"] = model;
      j["global_batch"] = batch;
      j["instructions"] = instructions;
      j["events"] = events;
      j["graph_index_s"] = index_s;
      j["lower_s"] = lower;
      j["validate_s"] = validate;
      j["simulate_s"] = simulate;
      j["simulate_prepare_s"] = prepare;
      j["simulate_replay_s"] = replay;
      j["events_per_s"] = replay > 0 ? events / replay : 0;
      j["simulated_step_s"] = step;
      if (full_plan) {
        quilt::PlanOptions po;
        po.global_batch = batch;
        absl::Time t0 = absl::Now();
        auto plan = quilt::Plan(*g, *topo, po);
        j["plan_every_strategy_s"] = Seconds(t0);
        if (plan.ok()) j["best"] = plan->report.best();
      }
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
}
