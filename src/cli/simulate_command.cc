// quiltctl simulate: validates a DistributedProgram written by `quiltctl
// plan --program-out` (it carries its training graph) against a cluster
// and simulates it again: the step time, the critical device's breakdown
// and every device's time and memory. What `plan` predicted for the
// program can be checked with it (the same program, cluster and
// simulator give the same step), and a program can be looked at on
// another cluster file naming the same devices (links or speeds changed).
#include <algorithm>
#include <cmath>
#include <iostream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cli/validators.h"
#include "src/cluster/cluster_spec.h"
#include "src/cluster/topology.h"
#include "src/common/files.h"
#include "src/cost/cost_model.h"
#include "src/planner/micro_batches.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt::cli {
namespace {

struct SimulateArgs {
  std::string program;
  std::string cluster;
  std::string trace;
  std::string format = "table";
};

// A device's time neither computing nor communicating (the simulator's
// idle time includes its exposed communication).
double Waiting(const DeviceUsage& d) { return std::max(0.0, d.idle_s - d.exposed_communication_s); }

// A number for JSON (null when not finite, which JSON cannot hold).
nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

// What the step has beside the busiest device's compute, exposed
// communication and idle time: the per-step overhead the devices measured.
double Overhead(const SimResult& r) {
  return std::max(0.0, r.step_time_s - r.compute_s - r.exposed_communication_s - r.idle_s);
}

void PrintJson(const quilt::v1::DistributedProgram& program, const SimResult& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceUsage& d : r.devices) {
    devices.push_back({{"device", d.device},
                       {"busy_s", Number(d.busy_s)},
                       {"exposed_communication_s", Number(d.exposed_communication_s)},
                       {"idle_s", Number(Waiting(d))},
                       {"peak_memory_bytes", d.peak_memory_bytes},
                       {"capacity_bytes", d.capacity_bytes},
                       {"out_of_memory", d.out_of_memory}});
  }
  const nlohmann::json out = {{"strategy", program.strategy().name()},
                              {"global_batch", program.global_batch()},
                              {"step_time_s", Number(r.step_time_s)},
                              {"critical_device", r.critical_device},
                              {"compute_s", Number(r.compute_s)},
                              {"exposed_communication_s", Number(r.exposed_communication_s)},
                              {"idle_s", Number(r.idle_s)},
                              {"step_overhead_s", Number(Overhead(r))},
                              {"communication_bytes", r.communication_bytes},
                              {"feasible", r.out_of_memory.empty()},
                              {"out_of_memory", r.out_of_memory},
                              {"devices", devices}};
  std::cout << out.dump(2) << "\n";
}

void PrintTable(const quilt::v1::DistributedProgram& program, const SimResult& r) {
  const double step = r.step_time_s;
  std::cout << absl::StrFormat(
      "Program %s: %d devices, global batch %d%s, execution order: %s (validated)\n\n",
      program.strategy().name().empty() ? "(unnamed)" : program.strategy().name(),
      program.devices_size(), program.global_batch(),
      program.micro_batches() > 1
          ? " as " +
                DescribeMicroBatches(program.global_batch(),
                                     static_cast<int>(program.micro_batches())) +
                (program.strategy().micro_batches_in_flight() > 1
                     ? " (" + DescribeInFlight(program.strategy().micro_batches_in_flight()) + ")"
                     : "")
          : "",
      ExecutionOrderText(program.strategy().order()));
  Table t({"DEVICE", "BUSY", "EXPOSED COMM", "IDLE", "PEAK MEM", "CAPACITY", "FITS"});
  for (const DeviceUsage& d : r.devices) {
    t.AddRow({d.device, HumanSeconds(d.busy_s), HumanSeconds(d.exposed_communication_s),
              HumanSeconds(Waiting(d)), HumanBytes(d.peak_memory_bytes),
              HumanBytes(d.capacity_bytes), d.out_of_memory ? "NO" : "yes"});
  }
  std::cout << t.Render() << "\n";
  std::cout << absl::StrFormat(
      "Step %s (%.1f samples/s) = %s\nCommunication per step: %s\n", HumanSeconds(step),
      step > 0 ? program.global_batch() / step : 0.0,
      StepParts(step, r.compute_s, r.exposed_communication_s, r.idle_s, r.critical_device),
      HumanBytes(r.communication_bytes));
}

int Run(const SimulateArgs& a) {
  if (absl::Status apart = CheckOutputsApart(
          {{"--trace", a.trace}}, {{"the program", a.program}, {"--cluster", a.cluster}});
      !apart.ok()) {
    return PrintError(std::string(apart.message()));
  }
  absl::StatusOr<std::string> bytes = ReadFile(a.program);
  if (!bytes.ok()) return PrintError(std::string(bytes.status().message()));
  quilt::v1::DistributedProgram program;
  if (!program.ParseFromString(*bytes) || program.devices_size() == 0) {
    return PrintError(a.program +
                      " is not a DistributedProgram (write one with quiltctl plan --program-out)");
  }
  if (program.graph().ops_size() == 0) {
    return PrintError(a.program +
                      " carries no training graph (quiltctl plan --program-out "
                      "writes it with the program)");
  }
  absl::StatusOr<Graph> graph = Graph::FromProto(program.graph());
  if (!graph.ok()) {
    return PrintError(a.program + ": its training graph: " + std::string(graph.status().message()));
  }
  absl::StatusOr<quilt::v1::ClusterSpec> spec = LoadClusterSpec(a.cluster);
  if (!spec.ok()) return PrintError(std::string(spec.status().message()));
  for (const std::string& line : DefaultedFigures(*spec)) std::cerr << "note: " << line << "\n";
  absl::StatusOr<Topology> topo = Topology::Build(*spec);
  if (!topo.ok()) return PrintError(std::string(topo.status().message()));
  for (const auto& d : program.devices()) {
    if (topo->DeviceIndex(d.device()) < 0) {
      return PrintError(
          absl::StrFormat("the program runs on %s, which %s does not have", d.device(), a.cluster));
    }
  }
  if (absl::Status v = ValidateProgram(program, *graph, *topo); !v.ok()) {
    return PrintError("the program is invalid: " + std::string(v.message()));
  }
  absl::StatusOr<CostModel> cost = CostModel::Create(&*graph, &*topo);
  if (!cost.ok()) return PrintError(std::string(cost.status().message()));
  SimOptions options;
  options.trace = !a.trace.empty();
  absl::StatusOr<SimResult> r = Simulate(program, *graph, *topo, *cost, options);
  if (!r.ok()) return PrintError("cannot simulate: " + std::string(r.status().message()));
  if (!a.trace.empty()) {
    const std::string title = a.program + " / " + program.strategy().name();
    if (absl::Status w = WriteFileAtomically(a.trace, ChromeTraceJson(*r, *topo, title)); !w.ok()) {
      return PrintError(std::string(w.message()));
    }
  }
  if (a.format == "json") {
    PrintJson(program, *r);
  } else {
    PrintTable(program, *r);
  }
  // Exit status 1 when a device overflows its memory, in either format.
  if (!r->out_of_memory.empty()) {
    return PrintError("the program does not fit memory: " + r->out_of_memory);
  }
  return 0;
}

}  // namespace

void AddSimulateCommand(CLI::App& app, std::vector<Command>* out) {
  auto a = std::make_shared<SimulateArgs>();
  CLI::App* c = app.add_subcommand(
      "simulate", "Validate and simulate a program (quiltctl plan --program-out) on a cluster");
  c->add_option("program", a->program, "DistributedProgram file (binary protobuf)")->required();
  c->add_option("--cluster", a->cluster, "ClusterSpec file (.textproto or .json)")->required();
  c->add_option("--trace", a->trace, "Write the simulated timeline (Chrome trace JSON)")
      ->check(NonEmpty());
  c->footer(
      "Exit status: 0 when the program validates, simulates and fits every device's memory; 1 "
      "otherwise (the reason on stderr; the table or JSON still printed when it does not fit).");
  c->add_option("-o,--output", a->format, "table | json")->check(CLI::IsMember({"table", "json"}));
  out->push_back({c, [a] { return Run(*a); }});
}

}  // namespace quilt::cli
