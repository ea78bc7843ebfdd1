// quiltctl's command plumbing: each command family adds its CLI11
// subcommands and a handler that returns the process exit code (0 ok,
// 1 failure, 2 usage error).
#ifndef QUILT_SRC_CLI_COMMAND_H_
#define QUILT_SRC_CLI_COMMAND_H_

#include <functional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/job.pb.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/graph/graph.h"

namespace quilt::cli {

struct GlobalOptions {
  std::string coordinator;
  double timeout_s = 10;
  // Whether --timeout was given (long commands pick a longer default).
  bool timeout_set = false;
};

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

// Each registers its subcommands on `app` (handlers read `globals` when run).
void AddClusterCommands(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out);
void AddGraphCommands(CLI::App& app, std::vector<Command>* out);
void AddTrainLocalCommand(CLI::App& app, std::vector<Command>* out);
void AddPlanCommand(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out);
void AddSimulateCommand(CLI::App& app, std::vector<Command>* out);
void AddJobCommands(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out);
void AddLogsCommand(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out);

// The model of a job spec from a command's MODEL argument: zoo:NAME, an
// .onnx file (its bytes), or a Quilt graph file (`loaded` if the caller
// already loaded it).
absl::Status SetJobModel(const std::string& model, int64_t batch, const Graph* loaded,
                         quilt::v1::JobSpec* spec);

// The loss a command's --loss adds to `graph` ("" or "auto": none, the
// model's own): kNone when the model computes its loss itself; a loss named
// for a graph without a loss output is recorded on it. Errors: a --loss
// other than the one the model computes.
absl::StatusOr<LossType> ApplyLossFlag(const std::string& loss, Graph* graph);

// A step's time on its busiest device, as `plan --explain` and `simulate`
// print it: "compute X + exposed communication Y + idle Z[ + per-step
// overhead W] on DEVICE, its busiest device" (the overhead: what the three
// leave of the step, the executor's measured fixed cost, shown above 0.1 %).
std::string StepParts(double step_s, double compute_s, double exposed_s, double idle_s,
                      const std::string& device);
// The execution order in words.
std::string ExecutionOrderText(quilt::v1::ExecutionOrder order);

// Prints "quiltctl: <message>" to stderr; returns 1.
int PrintError(const std::string& message);

// Prints the model's notes (ModelNotes) to stderr as "quiltctl: note: …",
// the parameters named in `frozen` counted as frozen.
void PrintModelNotes(Graph graph, const std::vector<std::string>& frozen);

}  // namespace quilt::cli

#endif  // QUILT_SRC_CLI_COMMAND_H_
