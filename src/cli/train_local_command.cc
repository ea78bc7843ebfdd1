// quiltctl train-local: trains a model on one CPU device from NumPy files or
// a synthetic dataset and prints the loss of every step.
#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/cli/command.h"
#include "src/cli/validators.h"
#include "src/graph/autodiff.h"
#include "src/graph/model_loader.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"

namespace quilt::cli {
namespace {

struct TrainArgs {
  std::string model;
  std::vector<std::string> frozen;
  std::string loss;
  std::string data;
  int64_t batch = 0;
  int64_t steps = 0;
  std::string optimizer = "sgd";
  std::string loss_output;
  double lr = 0;  // 0: submit's default (0.05 for sgd, 1e-3 for adam)
  double momentum = 0.9;
  double weight_decay = 0;
  int threads = 0;
  uint64_t seed = 0;
  std::string format = "table";
  bool profile = false;
};

int Run(const TrainArgs& a) {
  SetComputeThreads(a.threads > 0 ? a.threads : std::max(1u, std::thread::hardware_concurrency()));
  absl::StatusOr<Graph> g = LoadModel(a.model, a.batch, a.loss_output);
  if (!g.ok()) return PrintError(std::string(g.status().message()));
  if (absl::Status f = FreezeParameters(&*g, a.frozen); !f.ok()) {
    return PrintError(std::string(f.message()));
  }
  PrintModelNotes(*g, {});
  TrainingOptions to;
  absl::StatusOr<LossType> loss = ApplyLossFlag(a.loss, &*g);
  if (!loss.ok()) return PrintError(std::string(loss.status().message()));
  to.loss = *loss;
  if (g->loss.type == LossType::kNone) {
    if (absl::Status t = CheckLossTarget(*g); !t.ok()) return PrintError(std::string(t.message()));
    return PrintError("the model has no loss; pass --loss softmax_cross_entropy or --loss mse");
  }
  to.optimizer.kind =
      a.optimizer == "adam" ? OptimizerSpec::Kind::kAdam : OptimizerSpec::Kind::kSgd;
  const bool adam = a.optimizer == "adam";
  to.optimizer.learning_rate = a.lr > 0 ? a.lr : (adam ? 1e-3 : 0.05);
  to.optimizer.momentum = adam ? 0 : a.momentum;
  to.optimizer.weight_decay = a.weight_decay;
  if (absl::Status s = BuildTrainingGraph(&*g, to); !s.ok()) {
    return PrintError(std::string(s.message()));
  }
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  if (!sig.ok()) return PrintError(std::string(sig.status().message()));
  absl::StatusOr<std::unique_ptr<Dataset>> data;
  if (a.data.rfind("synthetic", 0) == 0) {
    // synthetic[:SEED], as submit takes it (--seed otherwise).
    uint64_t seed = a.seed;
    if (a.data.size() > 9 && (a.data[9] != ':' || !absl::SimpleAtoi(a.data.substr(10), &seed))) {
      return PrintError("--data must be INPUTS.npy,LABELS.npy or synthetic[:SEED]");
    }
    data = MakeSyntheticDataset(*g, *sig, seed);
  } else {
    data = OpenNumpyFiles(a.data, *sig);  // a file per model input, then the labels
  }
  if (!data.ok()) return PrintError(std::string(data.status().message()));
  if (a.data.rfind("synthetic", 0) != 0 && (*data)->size() < a.batch) {
    // As submit: a batch would repeat samples within itself.
    return PrintError(absl::StrFormat("the dataset has %d samples, fewer than one batch of %d",
                                      (*data)->size(), a.batch));
  }
  const bool json = a.format == "json";
  if (!json) {
    std::cout << absl::StrFormat(
        "Training %s on 1 CPU device (%d threads): batch %d, %d steps, %s lr=%g\n", a.model,
        ComputeThreads(), a.batch, a.steps, a.optimizer, to.optimizer.learning_rate);
  }
  LocalTrainOptions lo;
  lo.batch = a.batch;
  lo.steps = a.steps;
  lo.seed = a.seed;
  lo.profile = a.profile;
  lo.on_step = [&](const StepReport& r) {
    if (!json) {
      std::cout << absl::StrFormat("step %d/%d  loss %.6f  samples/s %.1f\n", r.step, a.steps,
                                   r.loss, r.samples_per_s)
                << std::flush;
    }
  };
  absl::StatusOr<LocalTrainResult> result = TrainLocal(*g, data->get(), lo);
  if (!result.ok()) return PrintError(std::string(result.status().message()));
  const double sps = result->mean_step_time_s > 0 ? a.batch / result->mean_step_time_s : 0;
  if (json) {
    nlohmann::json j;
    j["model"] = a.model;
    j["batch"] = a.batch;
    j["steps"] = a.steps;
    j["optimizer"] = a.optimizer;
    j["threads"] = ComputeThreads();
    j["losses"] = result->losses;
    j["mean_step_time_s"] = result->mean_step_time_s;
    j["samples_per_s"] = sps;
    if (a.profile) j["op_time_s"] = result->runner->OpTimes();
    std::cout << j.dump() << "\n";
  } else {
    std::cout << absl::StrFormat("done: mean step %.2f ms (%.1f samples/s after the first step)\n",
                                 result->mean_step_time_s * 1e3, sps);
    if (a.profile) {
      std::vector<std::pair<double, std::string>> rows;
      double total = 0;
      for (const auto& [type, t] : result->runner->OpTimes()) {
        rows.push_back({t, type});
        total += t;
      }
      std::sort(rows.rbegin(), rows.rend());
      std::cout << "time by op type (all steps):\n";
      for (const auto& [t, type] : rows) {
        std::cout << absl::StrFormat("  %-28s %8.2f ms  %5.1f%%\n", type, t * 1e3,
                                     total > 0 ? 100 * t / total : 0);
      }
    }
  }
  return 0;
}

}  // namespace

void AddTrainLocalCommand(CLI::App& app, std::vector<Command>* out) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train-local", "Train a model on one CPU device");
  c->add_option("model", a->model, "zoo:NAME, a .onnx file or a .pb/.pbtxt graph")->required();
  c->add_option("--frozen", a->frozen,
                "Parameters not to train, by name (comma-separated): buffers an ONNX export wrote "
                "as initializers")
      ->delimiter(',');
  c->add_option("--loss-output", a->loss_output,
                "The ONNX output that is the model's own loss (default: the first one-value "
                "output that reads the labels and a weight)");
  c->add_option("--loss", a->loss, "softmax_cross_entropy | mse (default: the model's own)")
      ->check(CLI::IsMember({"softmax_cross_entropy", "mse"}));
  c->add_option("--data", a->data,
                "INPUTS.npy,LABELS.npy (a file per model input, then the labels) or "
                "synthetic[:SEED]")
      ->required();
  c->add_option("--batch", a->batch, "Samples per step")->required()->check(PositiveInt());
  c->add_option("--steps", a->steps, "Training steps")->required()->check(PositiveInt());
  c->add_option("--optimizer", a->optimizer, "sgd | adam")->check(CLI::IsMember({"sgd", "adam"}));
  c->add_option("--lr", a->lr, "Learning rate (default 0.05 for sgd, 1e-3 for adam, as submit)")
      ->check(Positive());
  c->add_option("--momentum", a->momentum, "SGD momentum (default 0.9, as submit; adam takes none)")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--weight-decay", a->weight_decay, "L2 weight decay")->check(NonNegative());
  c->add_option("--threads", a->threads, "Compute threads (default: all cores; at most 1024)")
      ->check(CLI::Range(1, 1024));
  c->add_option("--seed", a->seed, "Seed of synthetic data and dropout")->check(Seed());
  c->add_option("-o,--output", a->format, "table | json")->check(CLI::IsMember({"table", "json"}));
  c->add_flag("--profile", a->profile, "Report the time spent per op type");
  out->push_back({c, [a, c]() {
                    if (a->optimizer == "adam" && c->count("--momentum") > 0) {
                      return PrintError("--momentum is SGD's; adam takes --lr only");
                    }
                    return Run(*a);
                  }});
}

}  // namespace quilt::cli
