// quiltctl's job commands: submit (a model file or zoo name with its
// training settings; the coordinator checks, plans and starts it), jobs,
// describe job, watch (a live progress line until the job ends), resume, losses
// (every step's), cancel, delete and export (the trained model as ONNX,
// or its weights as NumPy arrays).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "src/cli/cluster_view.h"
#include "src/cli/command.h"
#include "src/cli/format.h"
#include "src/cli/validators.h"
#include "src/common/files.h"
#include "src/common/heartbeat.h"
#include "src/common/proto_time.h"
#include "src/common/status.h"
#include "src/graph/model_loader.h"
#include "src/planner/micro_batches.h"
#include "src/rpc/coordinator_client.h"
#include "src/runtime/data/npz.h"

namespace quilt::cli {
namespace {

using quilt::v1::JobState;
using quilt::v1::JobStatus;

// While a submission or resume waits for the coordinator (which checks the
// model, has the workers profile it and plans it: tens of seconds on a
// large cluster), a line every 5 s says it is still waiting.
Heartbeat StillWaiting(const char* what) {
  const absl::Time start = absl::Now();
  return Heartbeat(absl::Seconds(5), [start, what] {
    std::cerr << absl::StrFormat("still waiting for the coordinator to %s (%.0f s so far)\n", what,
                                 absl::ToDoubleSeconds(absl::Now() - start));
  });
}

// `path` from the current directory (empty stays empty).
std::string Absolute(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? std::string(cwd) + "/" + path : path;
}

struct SubmitArgs {
  std::string model, name, loss = "auto", optimizer = "sgd", strategy = "auto", data = "synthetic";
  std::string loss_output;
  std::string checkpoint_dir;
  std::string init_weights;
  std::vector<std::string> frozen;
  int64_t batch = 0, steps = 0, checkpoint_every = 0;
  int max_restarts = 0, keep_checkpoints = 0;
  double lr = 0, momentum = 0.9, weight_decay = 0;
  bool momentum_given = false;  // --momentum was on the command line
  uint64_t seed = 0;
  bool watch = false;
  bool queue = false;
  bool no_micro_batches = false;
  int32_t priority = 0;
  std::string format = "table";
};

bool JobEnded(JobState s) {
  return s == quilt::v1::JOB_STATE_SUCCEEDED || s == quilt::v1::JOB_STATE_FAILED ||
         s == quilt::v1::JOB_STATE_CANCELLED;
}

// The job's last loss ("-" before a first step's), with the step it is
// from when that is not the job's step (losses still coming in, or lost).
std::string LossText(const JobStatus& s, const absl::FormatSpec<double>& format) {
  if (s.last_loss_step() <= 0) return "-";
  std::string text = absl::StrFormat(format, s.last_loss());
  if (s.last_loss_step() != s.step()) absl::StrAppend(&text, " (step ", s.last_loss_step(), ")");
  return text;
}

// A running job that finished no step for far longer than its steps take
// (at least 10 s; 60 s before its first step, which waits for every
// executor to start): how long, else "".
std::string StallText(const JobStatus& s) {
  if (s.state() != quilt::v1::JOB_STATE_RUNNING) return "";
  const double step =
      s.measured_step_time_s() > 0 ? s.measured_step_time_s() : s.predicted_step_time_s();
  if (s.since_progress_s() <= std::max(s.step() > 0 ? 10.0 : 60.0, 10 * step)) return "";
  return absl::StrCat("no step for ", HumanDuration(s.since_progress_s()));
}

std::string StateName(JobState s) {
  std::string n = quilt::v1::JobState_Name(s);
  return n.rfind("JOB_STATE_", 0) == 0 ? n.substr(10) : n;
}

absl::StatusOr<quilt::v1::JobSpec> SpecFrom(const SubmitArgs& a) {
  quilt::v1::JobSpec spec;
  RETURN_IF_ERROR(SetJobModel(a.model, a.batch, nullptr, &spec));
  if (!a.loss_output.empty() && spec.model_case() != quilt::v1::JobSpec::kOnnx) {
    return absl::InvalidArgumentError("--loss-output names an output of an ONNX model");
  }
  spec.set_loss_output(a.loss_output);
  if (spec.model_case() == quilt::v1::JobSpec::kOnnx) {
    // (The coordinator imports it and reports errors; here only its notes.)
    // (--loss against the model's own is checked there too, for every
    // kind of model; here before the upload.)
    absl::StatusOr<Graph> g = LoadOnnxBytes(spec.onnx(), a.batch, a.model, a.loss_output);
    if (g.ok()) {
      RETURN_IF_ERROR(ApplyLossFlag(a.loss, &*g).status());
      PrintModelNotes(*std::move(g), a.frozen);
    }
  }
  spec.set_name(a.name);
  for (const std::string& name : a.frozen) spec.add_frozen(name);
  if (!a.init_weights.empty()) {
    // Read here, and checked as an archive before the upload (the
    // coordinator matches its arrays to the model's parameters).
    ASSIGN_OR_RETURN(std::string npz, ReadFile(a.init_weights));
    RETURN_IF_ERROR(ParseNpz(npz, a.init_weights).status());
    spec.set_initial_weights(std::move(npz));
  }
  spec.set_global_batch(a.batch);
  spec.set_steps(a.steps);
  spec.set_strategy(a.strategy);
  spec.set_seed(a.seed);
  spec.set_checkpoint_interval_steps(a.checkpoint_every);
  spec.set_max_restarts(a.max_restarts);
  spec.set_keep_checkpoints(a.keep_checkpoints);
  spec.set_queue(a.queue);
  spec.set_no_micro_batches(a.no_micro_batches);
  if (a.priority != 0 && !a.queue) {
    return absl::InvalidArgumentError(
        "--priority orders the queue: it needs --queue (a job without it never waits)");
  }
  spec.set_priority(a.priority);
  // The workers write there, in their own working directories: absolute.
  spec.set_checkpoint_dir(Absolute(a.checkpoint_dir));
  if (a.loss == "softmax_cross_entropy") {
    spec.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
  } else if (a.loss == "mse") {
    spec.set_loss(quilt::v1::Loss::TYPE_MSE);
  }  // auto: the model's own loss
  if (a.optimizer == "adam") {
    if (a.momentum_given) {
      return absl::InvalidArgumentError("--momentum is SGD's; adam takes --lr only");
    }
    spec.mutable_optimizer()->mutable_adam()->set_learning_rate(a.lr > 0 ? a.lr : 1e-3);
    spec.mutable_optimizer()->mutable_adam()->set_weight_decay(a.weight_decay);
  } else {
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(a.lr > 0 ? a.lr : 0.05);
    spec.mutable_optimizer()->mutable_sgd()->set_momentum(a.momentum);
    spec.mutable_optimizer()->mutable_sgd()->set_weight_decay(a.weight_decay);
  }
  if (a.data.rfind("synthetic", 0) == 0) {
    uint64_t seed = 0;
    if (a.data.size() > 9 && (a.data[9] != ':' || !absl::SimpleAtoi(a.data.substr(10), &seed))) {
      return absl::InvalidArgumentError("--data synthetic[:SEED], or INPUTS.npy,LABELS.npy");
    }
    spec.mutable_dataset()->set_synthetic_seed(seed);
  } else {
    std::vector<std::string> files = absl::StrSplit(a.data, ',');
    if (files.size() < 2) {
      return absl::InvalidArgumentError(
          "--data synthetic[:SEED], or INPUTS.npy,LABELS.npy (a file per model input, then the "
          "labels)");
    }
    // The coordinator and the workers read them: absolute paths.
    for (std::string& f : files) f = Absolute(f);
    quilt::v1::NumpyDataset* numpy = spec.mutable_dataset()->mutable_numpy();
    numpy->set_inputs_path(files[0]);
    for (size_t i = 1; i + 1 < files.size(); ++i) numpy->add_more_inputs_paths(files[i]);
    numpy->set_labels_path(files.back());
  }
  return spec;
}

// A new job's plan, or why it waits in the queue.
std::string PlanLine(const JobStatus& s) {
  if (s.state() == quilt::v1::JOB_STATE_QUEUED) return "queued: " + s.message();
  return absl::StrCat("plan: ", s.strategy(), ", predicted ",
                      HumanSeconds(s.predicted_step_time_s()), " per step");
}

// The plan's peak memory on its fullest device against the most an
// executor's device held in a step ("" for a job not planned yet).
std::string MemoryText(const JobStatus& s) {
  int64_t predicted = 0, held = 0;
  for (const auto& [device, bytes] : s.predicted_device_memory_bytes()) {
    predicted = std::max(predicted, bytes);
  }
  for (const auto& [node, bytes] : s.measured_memory_bytes()) held = std::max(held, bytes);
  if (predicted <= 0) return "";
  std::string text = "predicted " + HumanBytes(predicted) + " on the fullest device";
  if (held <= 0) return text + ", held - (no step measured)";
  return text +
         absl::StrFormat("; the executors held at most %s on a device in a step (%+.0f %%)",
                         HumanBytes(held),
                         100.0 * (static_cast<double>(held) / static_cast<double>(predicted) - 1));
}

std::string Describe(const JobStatus& s) {
  std::string out;
  absl::StrAppendFormat(&out, "Job:        %s (%s)%s\n", s.job_id(), s.name(),
                        s.submitted_by().empty() ? "" : ", submitted by " + s.submitted_by());
  absl::StrAppendFormat(&out, "State:      %s%s\n", StateName(s.state()),
                        s.message().empty() ? "" : " — " + s.message());
  if (s.priority() != 0) absl::StrAppendFormat(&out, "Priority:   %d\n", s.priority());
  // A queued job (or one cancelled while queued) has no plan yet.
  const bool planned = !s.strategy().empty();
  if (planned) {
    absl::StrAppendFormat(
        &out, "Strategy:   %s on %s%s\n", s.strategy(), absl::StrJoin(s.nodes(), ", "),
        s.micro_batches() > 1
            ? absl::StrFormat(" (the batch as %d micro-batches%s, their gradients summed before "
                              "each update)",
                              s.micro_batches(),
                              s.micro_batches_in_flight() > 1
                                  ? ", " + DescribeInFlight(s.micro_batches_in_flight())
                                  : "")
            : "");
  } else {
    out += "Strategy:   - (not planned yet: planned when it leaves the queue)\n";
  }
  absl::StrAppendFormat(&out, "Progress:   step %d of %d, loss %s%s\n", s.step(), s.steps(),
                        LossText(s, "%.6g"),
                        s.state() == quilt::v1::JOB_STATE_RUNNING && s.has_progressed_at()
                            ? absl::StrCat(", ", s.step() > 0 ? "last step " : "started ",
                                           HumanDuration(s.since_progress_s()), " ago")
                            : "");
  if (const std::string stall = StallText(s); !stall.empty()) {
    absl::StrAppendFormat(&out,
                          "Warning:    %s; a worker stops an executor that finishes no step for "
                          "its stall_timeout_ms, and the job fails\n",
                          stall);
  }
  absl::StrAppendFormat(
      &out, "Step time:  predicted %s, measured %s%s\n",
      planned ? HumanSeconds(s.predicted_step_time_s()) : "-",
      s.measured_step_time_s() > 0 ? HumanSeconds(s.measured_step_time_s()) : "-",
      s.measured_step_time_s() > 0 && s.predicted_step_time_s() > 0
          ? absl::StrFormat(" (%+.0f %%)",
                            100 * (s.measured_step_time_s() / s.predicted_step_time_s() - 1))
          : "");
  if (const std::string memory = MemoryText(s); !memory.empty()) {
    absl::StrAppendFormat(&out, "Memory:     %s\n", memory);
  }
  absl::StrAppendFormat(&out, "Throughput: %s samples/s\n",
                        s.samples_per_s() > 0 ? absl::StrFormat("%.1f", s.samples_per_s()) : "-");
  for (int i = 0; i < s.calibration_size(); ++i) {
    absl::StrAppendFormat(&out, "%s%s\n", i == 0 ? "Planned by: " : "            ",
                          s.calibration(i));
  }
  if (!s.resumed_from().empty()) {
    absl::StrAppendFormat(&out,
                          "Resumed from: %s (its checkpoint's parameters and optimizer state, the "
                          "data from where it stopped)\n",
                          s.resumed_from());
  }
  if (s.steps_before() > 0) {
    absl::StrAppendFormat(&out,
                          "Trained before: %d steps (its step k is the training's step %d + k)\n",
                          s.steps_before(), s.steps_before());
  }
  if (!s.resumed_as().empty()) {
    absl::StrAppendFormat(&out, "Resumed as: %s (from this job's last checkpoint)\n",
                          s.resumed_as());
  }
  if (!s.restart_error().empty()) {
    absl::StrAppendFormat(&out, "Restart:    not made: %s\n", s.restart_error());
  }
  return out;
}

// One progress line: a bar, step/steps, loss, samples/s, ETA.
std::string ProgressLine(const JobStatus& s) {
  const int width = 24;
  const double frac = s.steps() > 0 ? static_cast<double>(s.step()) / s.steps() : 0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  const std::string stall = StallText(s);
  // (A stalled job has no current rate: none is shown.)
  const double eta = s.measured_step_time_s() > 0 && !JobEnded(s.state()) && stall.empty()
                         ? (s.steps() - s.step()) * s.measured_step_time_s()
                         : -1;
  return absl::StrFormat(
      "[%s] %s step %d/%d  loss %s  %s samples/s  ETA %s%s", bar, StateName(s.state()), s.step(),
      s.steps(), LossText(s, "%.4g"),
      s.samples_per_s() > 0 && stall.empty() ? absl::StrFormat("%.0f", s.samples_per_s()) : "-",
      eta >= 0 ? HumanDuration(eta) : "-",
      !stall.empty()                             ? "  (" + stall + ")"
      : s.state() == quilt::v1::JOB_STATE_QUEUED ? "  (" + s.message() + ")"
                                                 : "");
}

int Watch(const std::string& id, const GlobalOptions& g, const std::string& format) {
  rpc::JobClient client(g.coordinator, absl::Seconds(g.timeout_s));
  const bool tty = isatty(STDOUT_FILENO) != 0 && format != "json";
  JobStatus last;
  int64_t last_printed_step = -1;
  JobState last_printed_state = quilt::v1::JOB_STATE_UNSPECIFIED;
  bool printed_stalled = false;
  // The stream has no deadline (a job runs for hours): a call that has one
  // first, so that a coordinator that does not answer is reported within
  // --timeout.
  absl::Status s = client.GetJob(id).status();
  // A coordinator that restarts (an upgrade) keeps its jobs: the watch
  // waits for it, up to kWatchReconnect, and goes on.
  constexpr absl::Duration kWatchReconnect = absl::Minutes(10);
  while (s.ok()) {
    s = client.WatchJob(id, [&](const JobStatus& st) {
      last = st;
      if (format == "json") {
        std::cout << ToJson(st, /*one_line=*/true) << std::endl;  // JSON Lines
      } else if (tty) {
        std::cout << "\r" << ProgressLine(st) << "\033[K" << std::flush;
      } else if (const bool stalled = !StallText(st).empty();
                 st.state() != last_printed_state || JobEnded(st.state()) ||
                 st.step() >= last_printed_step + std::max<int64_t>(1, st.steps() / 20) ||
                 stalled != printed_stalled) {
        // Not a terminal: a line per 5 % of the steps, per state change,
        // and when the job stalls or goes on.
        std::cout << ProgressLine(st) << "\n" << std::flush;
        last_printed_step = st.step();
        last_printed_state = st.state();
        printed_stalled = stalled;
      }
    });
    // A stopping coordinator ends the stream UNAVAILABLE or CANCELLED.
    const bool lost =
        s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kCancelled;
    if (s.ok() || !lost || JobEnded(last.state())) break;
    std::cerr << (tty ? "\n" : "") << "quiltctl: " << s.message()
              << "; watching again when the coordinator is back\n";
    const absl::Time give_up = absl::Now() + kWatchReconnect;
    do {
      absl::SleepFor(absl::Seconds(1));
      s = client.GetJob(id).status();
    } while ((s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded ||
              // (a coordinator still stopping cancels the calls it gets)
              s.code() == absl::StatusCode::kCancelled) &&
             absl::Now() < give_up);
  }
  if (tty) std::cout << "\n";
  if (!s.ok()) return PrintError(std::string(s.message()));
  if (format != "json") {
    std::cout << "Job " << id << " " << StateName(last.state())
              << (last.message().empty() ? "" : ": " + last.message()) << "\n";
  }
  return last.state() == quilt::v1::JOB_STATE_SUCCEEDED ? 0 : 1;
}

// Every step's loss from `from` on, a page at a time: "step<TAB>loss"
// lines ("nan" for a step whose loss was lost) or one JSON object.
int PrintLosses(const std::string& id, int64_t from, const std::string& format,
                const GlobalOptions& globals) {
  rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
  std::vector<double> all;
  int64_t next = from;
  for (;;) {
    absl::StatusOr<quilt::v1::JobLosses> page = client.GetJobLosses(id, next);
    if (!page.ok()) return PrintError(std::string(page.status().message()));
    all.insert(all.end(), page->losses().begin(), page->losses().end());
    next = page->first_step() + page->losses_size();
    if (page->losses_size() == 0 || next > page->last_step()) break;
  }
  if (format == "json") {
    nlohmann::json j;
    j["job_id"] = id;
    j["first_step"] = from;
    j["losses"] = nlohmann::json::array();
    for (double l : all) j["losses"].push_back(std::isfinite(l) ? nlohmann::json(l) : nullptr);
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::string text = "step\tloss\n";
  for (size_t i = 0; i < all.size(); ++i) {
    absl::StrAppend(&text, from + static_cast<int64_t>(i), "\t", absl::StrFormat("%.9g", all[i]),
                    "\n");
  }
  std::cout << text;
  return 0;
}

}  // namespace

absl::Status SetJobModel(const std::string& model, int64_t batch, const Graph* loaded,
                         quilt::v1::JobSpec* spec) {
  if (model.rfind("zoo:", 0) == 0) {
    spec->set_zoo(model.substr(4));
    return absl::OkStatus();
  }
  if (model.size() > 5 && model.substr(model.size() - 5) == ".onnx") {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(model));
    spec->set_onnx(std::move(bytes));
    return absl::OkStatus();
  }
  if (loaded != nullptr) {
    *spec->mutable_graph() = loaded->ToProto();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Graph g, LoadModel(model, batch));
  *spec->mutable_graph() = g.ToProto();
  return absl::OkStatus();
}

absl::StatusOr<LossType> ApplyLossFlag(const std::string& loss, Graph* g) {
  if (loss.empty() || loss == "auto") return LossType::kNone;
  const LossType asked = loss == "mse" ? LossType::kMse : LossType::kSoftmaxCrossEntropy;
  ASSIGN_OR_RETURN(const LossType want, ChooseLoss(asked, "--loss " + loss, g));
  if (want == LossType::kNone) return want;
  const TensorInfo* out = g->outputs.empty() ? nullptr : g->FindTensor(g->outputs[0]);
  if (want == LossType::kSoftmaxCrossEntropy && out != nullptr && out->shape.rank() == 3 &&
      !out->shape.dim(1).batch && out->shape.dim(1) == out->shape.dim(2)) {
    // [N, K, K]: the labels' shape does not tell the two readings apart.
    std::cerr << "quiltctl: note: the model's output is [N, " << out->shape.dim(1).value << ", "
              << out->shape.dim(2).value
              << "]: --loss softmax_cross_entropy takes its classes from the last axis (a "
                 "sequence model's [N, L, V]); for classes on axis 1 ([N, C, L], as "
                 "F.cross_entropy reads them) compute the loss inside the model\n";
  }
  return want;
}

void AddJobCommands(CLI::App& app, const GlobalOptions& globals, std::vector<Command>* out) {
  // submit
  auto a = std::make_shared<SubmitArgs>();
  CLI::App* submit = app.add_subcommand("submit", "Train a model on the cluster");
  submit->add_option("model", a->model, "zoo:NAME, a .onnx file or a .pb/.pbtxt graph")->required();
  submit->add_option("--batch", a->batch, "Global batch size")->required()->check(PositiveInt());
  submit->add_option("--steps", a->steps, "Training steps")->required()->check(PositiveInt());
  submit
      ->add_option("--init-weights", a->init_weights,
                   "Start from these parameter values (a NumPy .npz of arrays named as the "
                   "model's parameters, e.g. what `quiltctl export -o X.npz` wrote); parameters "
                   "it does not name keep their initial values")
      ->check(CLI::ExistingFile);
  submit
      ->add_option("--frozen", a->frozen,
                   "Parameters not to train, by name (comma-separated): buffers an ONNX export "
                   "wrote as initializers")
      ->delimiter(',')
      ->check(Utf8Text());
  submit
      ->add_option("--loss-output", a->loss_output,
                   "The ONNX output that is the model's own loss (default: the first one-value "
                   "output that reads the labels and a weight)")
      ->check(Utf8Text());
  submit->add_option("--loss", a->loss, "auto (the model's) | softmax_cross_entropy | mse")
      ->check(CLI::IsMember({"auto", "softmax_cross_entropy", "mse"}));
  submit->add_option("--optimizer", a->optimizer, "sgd | adam")
      ->check(CLI::IsMember({"sgd", "adam"}));
  submit->add_option("--lr", a->lr, "Learning rate (default 0.05 for sgd, 1e-3 for adam)")
      ->check(Positive());
  submit->add_option("--weight-decay", a->weight_decay, "L2 weight decay (default 0)")
      ->check(NonNegative());
  submit->add_option("--momentum", a->momentum, "SGD momentum (default 0.9)")
      ->check(CLI::Range(0.0, 1.0));
  submit->add_option("--strategy", a->strategy, "auto (the planner) or a baseline's name")
      ->check(Utf8Text());
  submit
      ->add_option(
          "--data", a->data,
          "synthetic[:SEED] or INPUTS.npy,LABELS.npy (a model with several inputs: a file each, in "
          "its order, then the labels)")
      ->check(Utf8Text());
  submit
      ->add_option("--checkpoint-every", a->checkpoint_every,
                   "Checkpoint every N steps (0: after the last)")
      ->check(NonNegativeInt());
  submit
      ->add_option("--checkpoint-dir", a->checkpoint_dir,
                   "Checkpoints go to DIR/<job id> (default: the coordinator's state\n"
                   "directory)")
      ->check(Utf8Text());
  submit
      ->add_option("--keep-last-checkpoints", a->keep_checkpoints,
                   "Keep only the newest N complete checkpoints: older ones are removed as new "
                   "ones complete (default 0: keep every one; a failed or cancelled job keeps "
                   "what it has)")
      ->check(CLI::Range(0, 1000000));
  submit->add_option("--name", a->name, "A name for the job")->check(Utf8Text());
  submit
      ->add_option("--max-restarts", a->max_restarts,
                   "After a failure, resume from the last checkpoint as a new job up to N "
                   "times (before the first checkpoint: from the first step; default 0; the "
                   "strategy should suit fewer nodes: auto)")
      ->check(CLI::Range(0, 100));
  submit->add_option("--seed", a->seed, "Seed of the planner and of random kernels")->check(Seed());
  submit->add_flag("--watch", a->watch, "Watch the job after submitting it");
  submit->add_flag("--queue", a->queue,
                   "When other jobs hold the memory it needs, wait for them (QUEUED, first in "
                   "first out within a priority) instead of failing");
  submit->add_flag("--no-micro-batches", a->no_micro_batches,
                   "Never run the batch as micro-batches: where no plan holds it at once on the "
                   "idle nodes, fail instead (no gradient accumulation); a plan that holds it is "
                   "not pipelined either");
  submit
      ->add_option("--priority", a->priority,
                   "With --queue: queued jobs of a higher priority start first (default 0)")
      ->check(CLI::Range(-1000, 1000));
  out->push_back({submit, [a, submit, &globals] {
                    a->momentum_given = submit->count("--momentum") > 0;
                    absl::StatusOr<quilt::v1::JobSpec> spec = SpecFrom(*a);
                    if (!spec.ok()) return PrintError(std::string(spec.status().message()));
                    // Submission plans the job: allow the planner's time.
                    const double timeout = globals.timeout_set ? globals.timeout_s : 600.0;
                    rpc::JobClient client(globals.coordinator, absl::Seconds(timeout));
                    std::cerr << "submitting to " << globals.coordinator
                              << " (the coordinator checks and plans the job)\n";
                    absl::StatusOr<std::string> id;
                    {
                      Heartbeat still = StillWaiting("check, profile and plan the job");
                      id = client.SubmitJob(*spec);
                    }
                    if (!id.ok()) return PrintError(std::string(id.status().message()));
                    absl::StatusOr<JobStatus> st = client.GetJob(*id);
                    std::cout << *id << "\n";
                    if (st.ok()) std::cerr << PlanLine(*st) << "\n";
                    return a->watch ? Watch(*id, globals, "table") : 0;
                  }});
  // resume ID
  auto resume_id = std::make_shared<std::string>();
  auto resume_watch = std::make_shared<bool>(false);
  CLI::App* resume = app.add_subcommand(
      "resume", "Train a failed or cancelled job on from its last checkpoint, as a new job");
  resume->add_option("id", *resume_id, "Job id")->required()->check(Utf8Text());
  resume->add_flag("--watch", *resume_watch, "Watch the new job");
  auto resume_queue = std::make_shared<bool>(false);
  resume->add_flag("--queue", *resume_queue,
                   "When other jobs hold the memory it needs, wait for them (as submit --queue; "
                   "a job submitted with --queue queues without it)");
  auto resume_strategy = std::make_shared<std::string>();
  resume->add_option("--strategy", *resume_strategy,
                     "auto (the planner) or a baseline's name (default: the old job's)");
  resume->footer(
      "The new job is the old one's spec with the steps left, planned on the cluster as it is "
      "now. Its executors start from the last readable checkpoint's parameters and optimizer "
      "state (momentum, Adam's moments) and read the data on from where the old job was.");
  out->push_back({resume, [resume_id, resume_watch, resume_queue, resume_strategy, &globals] {
                    const double timeout = globals.timeout_set ? globals.timeout_s : 600.0;
                    rpc::JobClient client(globals.coordinator, absl::Seconds(timeout));
                    std::cerr << "resuming " << *resume_id << " on " << globals.coordinator
                              << " (the coordinator reads its checkpoint and plans the job)\n";
                    absl::StatusOr<quilt::v1::ResumeJobResponse> r;
                    {
                      Heartbeat still = StillWaiting("read the checkpoint and plan the job");
                      r = client.ResumeJob(*resume_id, *resume_strategy, *resume_queue);
                    }
                    if (!r.ok()) return PrintError(std::string(r.status().message()));
                    std::cout << r->job_id() << "\n";
                    std::cerr << "from step " << r->from_step() << "'s checkpoint, " << r->steps()
                              << " steps left";
                    if (absl::StatusOr<JobStatus> st = client.GetJob(r->job_id()); st.ok()) {
                      std::cerr << "; " << PlanLine(*st);
                    }
                    std::cerr << "\n";
                    if (!r->note().empty()) std::cerr << "note: " << r->note() << "\n";
                    return *resume_watch ? Watch(r->job_id(), globals, "table") : 0;
                  }});
  // jobs
  auto jobs_format = std::make_shared<std::string>("table");
  auto jobs_state = std::make_shared<std::string>("all");
  auto jobs_last = std::make_shared<int64_t>(0);
  CLI::App* jobs = app.add_subcommand("jobs", "List jobs (oldest first)");
  jobs->add_option("-o,--output", *jobs_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  jobs->add_option("--state", *jobs_state,
                   "all | active (queued, pending or running) | ended | queued | pending | running "
                   "| succeeded | failed | cancelled")
      ->check(CLI::IsMember({"all", "active", "ended", "queued", "pending", "running", "succeeded",
                             "failed", "cancelled"}));
  jobs->add_option("--last", *jobs_last, "Only the newest N (of those the state selects)")
      ->check(PositiveInt());
  out->push_back({jobs, [jobs_format, jobs_state, jobs_last, &globals] {
                    rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
                    absl::StatusOr<std::vector<JobStatus>> all = client.ListJobs();
                    if (!all.ok()) return PrintError(std::string(all.status().message()));
                    const std::string& want = *jobs_state;
                    auto selects = [&want](JobState s) {
                      if (want == "all") return true;
                      if (want == "active") return !JobEnded(s);
                      if (want == "ended") return JobEnded(s);
                      return want == absl::AsciiStrToLower(StateName(s));
                    };
                    std::vector<JobStatus> selected;
                    for (JobStatus& j : *all) {
                      if (selects(j.state())) selected.push_back(std::move(j));
                    }
                    if (*jobs_last > 0 && static_cast<int64_t>(selected.size()) > *jobs_last) {
                      selected.erase(selected.begin(), selected.end() - *jobs_last);
                    }
                    if (*jobs_format == "json") {
                      quilt::v1::ListJobsResponse r;
                      for (const auto& j : selected) *r.add_jobs() = j;
                      std::cout << ToJson(r) << "\n";
                      return 0;
                    }
                    Table t({"JOB", "NAME", "STATE", "STEP", "LOSS", "SAMPLES/S", "STRATEGY"});
                    for (const JobStatus& j : selected) {
                      t.AddRow(
                          {j.job_id(), j.name(), StateName(j.state()),
                           absl::StrCat(j.step(), "/", j.steps()), LossText(j, "%.4g"),
                           j.samples_per_s() > 0 ? absl::StrFormat("%.0f", j.samples_per_s()) : "-",
                           j.strategy()});
                    }
                    std::cout << t.Render();
                    return 0;
                  }});
  // describe job ID
  auto describe_id = std::make_shared<std::string>();
  auto describe_format = std::make_shared<std::string>("table");
  CLI::App* describe = app.add_subcommand("describe", "Details of a cluster object");
  CLI::App* describe_job = describe->add_subcommand("job", "A job: plan, progress, step times");
  describe->require_subcommand(1);
  describe_job->add_option("id", *describe_id, "Job id")->required()->check(Utf8Text());
  describe_job->add_option("-o,--output", *describe_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  out->push_back({describe_job, [describe_id, describe_format, &globals] {
                    rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
                    absl::StatusOr<JobStatus> st = client.GetJob(*describe_id);
                    if (!st.ok()) return PrintError(std::string(st.status().message()));
                    std::cout << (*describe_format == "json" ? ToJson(*st) + "\n" : Describe(*st));
                    return 0;
                  }});
  // describe node ID
  auto node_id = std::make_shared<std::string>();
  auto node_format = std::make_shared<std::string>("table");
  CLI::App* describe_node = describe->add_subcommand(
      "node", "A node: state, devices and their speed, links, jobs, recent events");
  describe_node->add_option("id", *node_id, "Node id")->required()->check(Utf8Text());
  describe_node->add_option("-o,--output", *node_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  out->push_back({describe_node, [node_id, node_format, &globals] {
                    rpc::AdminClient admin(globals.coordinator, absl::Seconds(globals.timeout_s));
                    quilt::v1::GetClusterStatusRequest request;
                    request.set_max_events(1000);
                    auto st = admin.GetClusterStatus(request);
                    if (!st.ok()) return PrintError(std::string(st.status().message()));
                    absl::StatusOr<std::string> text =
                        RenderNodeDetails(*st, *node_id, *node_format, absl::Now());
                    if (!text.ok()) return PrintError(std::string(text.status().message()));
                    std::cout << *text;
                    return 0;
                  }});
  // watch ID
  auto watch_id = std::make_shared<std::string>();
  auto watch_format = std::make_shared<std::string>("table");
  CLI::App* watch = app.add_subcommand("watch", "Follow a job until it ends");
  watch->add_option("id", *watch_id, "Job id")->required()->check(Utf8Text());
  watch->add_option("-o,--output", *watch_format, "table | json")
      ->check(CLI::IsMember({"table", "json"}));
  out->push_back({watch, [watch_id, watch_format, &globals] {
                    return Watch(*watch_id, globals, *watch_format);
                  }});
  // cancel ID
  auto cancel_id = std::make_shared<std::string>();
  auto cancel_reason = std::make_shared<std::string>();
  CLI::App* cancel = app.add_subcommand("cancel", "Stop a job");
  cancel->add_option("id", *cancel_id, "Job id")->required()->check(Utf8Text());
  cancel->add_option("--reason", *cancel_reason, "Why (kept with the job)")->check(Utf8Text());
  out->push_back({cancel, [cancel_id, cancel_reason, &globals] {
                    rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
                    absl::Status s = client.CancelJob(*cancel_id, *cancel_reason);
                    if (!s.ok()) return PrintError(std::string(s.message()));
                    std::cout << "cancelled " << *cancel_id << "\n";
                    return 0;
                  }});
  // losses ID
  auto losses_id = std::make_shared<std::string>();
  auto losses_from = std::make_shared<int64_t>(1);
  auto losses_format = std::make_shared<std::string>("table");
  CLI::App* losses =
      app.add_subcommand("losses", "A job's loss at every step (its training curve)");
  losses->add_option("id", *losses_id, "Job id")->required()->check(Utf8Text());
  losses->add_option("--from", *losses_from, "First step (default 1)")->check(PositiveInt());
  losses->add_option("-o,--output", *losses_format, "table (step, loss) | json")
      ->check(CLI::IsMember({"table", "json"}));
  out->push_back({losses, [losses_id, losses_from, losses_format, &globals] {
                    return PrintLosses(*losses_id, *losses_from, *losses_format, globals);
                  }});
  // delete
  auto delete_id = std::make_shared<std::string>();
  auto keep = std::make_shared<bool>(false);
  CLI::App* del = app.add_subcommand(
      "delete", "Forget an ended job: its record, its model and its checkpoints");
  del->add_option("id", *delete_id, "Job id")->required()->check(Utf8Text());
  del->add_flag("--keep-checkpoints", *keep,
                "Leave its checkpoint directory (<checkpoint-dir>/<job id>)");
  out->push_back({del, [delete_id, keep, &globals] {
                    rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
                    absl::StatusOr<std::string> removed = client.DeleteJob(*delete_id, *keep);
                    if (!removed.ok()) return PrintError(std::string(removed.status().message()));
                    std::cout << "deleted " << *delete_id
                              << (removed->empty() ? "" : " and its checkpoints in " + *removed)
                              << "\n";
                    return 0;
                  }});
  auto export_id = std::make_shared<std::string>();
  auto export_out = std::make_shared<std::string>();
  CLI::App* exp = app.add_subcommand(
      "export",
      "Write a job's trained model: as ONNX (jobs submitted as ONNX) or its weights as .npz");
  exp->add_option("id", *export_id, "Job id")->required()->check(Utf8Text());
  exp->add_option("-o,--output", *export_out,
                  "The file to write: NAME.onnx (the ONNX model with the trained weights) or "
                  "NAME.npz (every parameter as a NumPy array, for any job; numpy.load reads it)")
      ->required();
  out->push_back(
      {exp, [export_id, export_out, &globals] {
         if (absl::Status w = CheckWritablePath(*export_out); !w.ok()) {
           return PrintError(std::string(w.message()));
         }
         const bool npz = absl::EndsWith(*export_out, ".npz");
         if (!npz && !absl::EndsWith(*export_out, ".onnx")) {
           return PrintError("-o " + *export_out +
                             ": name a .onnx file (the model) or a .npz file (its "
                             "weights as NumPy arrays)");
         }
         rpc::JobClient client(globals.coordinator, absl::Seconds(globals.timeout_s));
         absl::StatusOr<quilt::v1::ExportJobResponse> r = client.ExportJob(
             *export_id, npz ? quilt::v1::EXPORT_FORMAT_NPZ : quilt::v1::EXPORT_FORMAT_ONNX);
         if (!r.ok()) return PrintError(std::string(r.status().message()));
         absl::Status w = WriteFileAtomically(*export_out, npz ? r->npz() : r->onnx());
         if (!w.ok()) return PrintError(std::string(w.message()));
         if (!r->note().empty()) std::cerr << "quiltctl: " << r->note() << "\n";
         std::cout << "wrote " << *export_out << " (the weights after step " << r->step() << ")\n";
         return 0;
       }});
}

}  // namespace quilt::cli
