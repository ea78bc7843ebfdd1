// Jobs through the whole service with the real binaries on loopback: a
// coordinator, two workers (one emulated 2x slower) and quiltctl. A job
// runs to SUCCEEDED and its checkpoint holds the single-device run's
// parameters; the exported ONNX model loads with python3-onnx and carries
// them; cancel stops a running job within seconds and frees the workers;
// bad requests are rejected at submit time with their reason; a worker
// killed during a job fails the job with the reason while the coordinator
// keeps serving.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/job_export.h"
#include "src/coordinator/job_model.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "src/testing/raw_http.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kBatch = 16;
constexpr int64_t kSteps = 8;

std::string Fixture(const std::string& file) { return RunfilePath("test/fixtures/mlp/" + file); }

// The flags quiltctl submit gets, and the same job as a JobSpec.
std::vector<std::string> SubmitArgs(const std::string& checkpoints, int64_t steps,
                                    const std::string& strategy) {
  return {"submit",
          Fixture("model.onnx"),
          "--loss",
          "softmax_cross_entropy",
          "--batch",
          std::to_string(kBatch),
          "--steps",
          std::to_string(steps),
          "--optimizer",
          "sgd",
          "--lr",
          "0.05",
          "--momentum",
          "0.9",
          "--weight-decay",
          "0.05",
          "--strategy",
          strategy,
          "--data",
          Fixture("x.npy") + "," + Fixture("y.npy"),
          "--checkpoint-dir",
          checkpoints,
          "--checkpoint-every",
          "4"};
}

// The jobs of SubmitArgs run on one device in this process.
struct SingleDeviceRun {
  Graph graph;
  LocalTrainResult result;

  absl::Status Train(int64_t steps) {
    quilt::v1::JobSpec spec;
    ASSIGN_OR_RETURN(std::string onnx, ReadFile(Fixture("model.onnx")));
    spec.set_onnx(onnx);
    spec.set_loss(quilt::v1::Loss::TYPE_SOFTMAX_CROSS_ENTROPY);
    spec.set_global_batch(kBatch);
    spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.05);
    spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9);
    // (enough to change the loss past the tolerance)
    spec.mutable_optimizer()->mutable_sgd()->set_weight_decay(0.05);
    ASSIGN_OR_RETURN(graph, TrainingGraphForJob(spec));
    ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(graph));
    ASSIGN_OR_RETURN(std::unique_ptr<Dataset> data,
                     OpenNumpyDataset({Fixture("x.npy")}, Fixture("y.npy"), sig));
    SetComputeThreads(1);
    LocalTrainOptions lo;
    lo.batch = kBatch;
    lo.steps = steps;
    ASSIGN_OR_RETURN(result, TrainLocal(graph, data.get(), lo));
    return absl::OkStatus();
  }
};

class Jobs : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(cluster_.StartCoordinator().status(), IsOk());
    ASSERT_THAT(cluster_.StartWorker("worker-a").status(), IsOk());
    ASSERT_THAT(cluster_.StartWorker("worker-b", {"--compute_slowdown", "2"}).status(), IsOk());
  }

  // Submits; the job id.
  std::string Submit(const std::vector<std::string>& args) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl(args);
    EXPECT_THAT(r.status(), IsOk());
    EXPECT_EQ(r->exit_code, 0) << r->err;
    std::string id = r->out;
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    return id;
  }

  nlohmann::json Job(const std::string& id) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl({"describe", "job", id, "-o", "json"});
    if (!r.ok() || r->exit_code != 0) return nlohmann::json::object();
    return nlohmann::json::parse(r->out, nullptr, false);
  }

  std::string State(const std::string& id) { return Job(id).value("state", std::string()); }

  int64_t Step(const std::string& id) {
    const nlohmann::json j = Job(id);
    // int64 fields are JSON strings.
    return j.contains("step") ? std::stoll(j["step"].get<std::string>()) : 0;
  }

  // Starts worker `node` and waits until it is Ready.
  void StartReadyWorker(const std::string& node) {
    ASSERT_THAT(cluster_.StartWorker(node).status(), IsOk());
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<std::map<std::string, nlohmann::json>> n = cluster_.Nodes();
          return n.ok() && (*n)[node].value("state", std::string()) == "NODE_STATE_READY";
        },
        absl::Seconds(30)));
  }

  // The job `id` is resumed as, once it is (empty if not within 60 s).
  std::string ResumedAs(const std::string& id) {
    std::string next;
    Eventually(
        [&] {
          next = Job(id).value("resumed_as", std::string());
          return !next.empty();
        },
        absl::Seconds(60));
    return next;
  }

  // Executors still running for `id` on this machine.
  int Executors(const std::string& id) {
    absl::StatusOr<CommandResult> r = RunCommand({"/usr/bin/pgrep", "-f", "-c", id});
    return r.ok() ? std::atoi(r->out.c_str()) : -1;
  }

  // Cancels `id` once past `step`; returns when its executors have ended.
  void CancelAfter(const std::string& id, int64_t step) {
    ASSERT_TRUE(Eventually([&] { return Step(id) > step; }, absl::Seconds(60))) << Job(id).dump();
    absl::StatusOr<CommandResult> c = cluster_.Quiltctl({"cancel", id});
    ASSERT_THAT(c.status(), IsOk());
    ASSERT_EQ(c->exit_code, 0) << c->err;
    ASSERT_TRUE(Eventually([&] { return Executors(id) == 0; }, absl::Seconds(30)));
  }

  // quiltctl resume ID: the new job's id; `err` (optional) gets what it
  // said on stderr.
  std::string Resume(const std::string& id, std::string* err = nullptr) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl({"resume", id});
    EXPECT_THAT(r.status(), IsOk());
    if (!r.ok()) return "";
    EXPECT_EQ(r->exit_code, 0) << r->err;
    if (err != nullptr) *err = r->err;
    std::string next = r->out;
    while (!next.empty() && (next.back() == '\n' || next.back() == ' ')) next.pop_back();
    return next;
  }

  LocalCluster cluster_;
};

// A model of three inputs (word and segment ids, an attention mask; a
// NumPy file each) trains over both workers as PyTorch trains it.
TEST_F(Jobs, AModelOfSeveralInputsTrainsOverBothNodesAsPyTorchDoes) {
  const std::string dir = RunfilePath("test/fixtures/multi_input");
  std::ifstream in(dir + "/losses.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  const auto& adam = expected["adam"];
  const std::string id = Submit(
      {"submit", dir + "/model.onnx", "--loss", "softmax_cross_entropy", "--batch",
       std::to_string(expected["batch"].get<int>()), "--steps",
       std::to_string(expected["steps"].get<int>()), "--optimizer", "adam", "--lr",
       std::to_string(adam["lr"].get<double>()), "--strategy", "dp-even-ring", "--data",
       absl::StrCat(dir, "/ids.npy,", dir, "/segments.npy,", dir, "/mask.npy,", dir, "/y.npy"),
       "--checkpoint-dir", cluster_.dir().File("ckpt")});
  ASSERT_FALSE(id.empty());
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  ASSERT_EQ(watched->exit_code, 0) << watched->out << watched->err << cluster_.Log("worker-a");
  const nlohmann::json job = Job(id);
  EXPECT_EQ(job.value("nodes", nlohmann::json::array()).size(), 2u) << job.dump();
  const double want = adam["losses"].back().get<double>();
  EXPECT_NEAR(job.value("last_loss", 0.0), want, 1e-4 * want) << job.dump();
  // Files that do not match the model's inputs are refused at submission.
  absl::StatusOr<CommandResult> two = cluster_.Quiltctl(
      {"submit", dir + "/model.onnx", "--loss", "softmax_cross_entropy", "--batch", "16", "--steps",
       "2", "--data", absl::StrCat(dir, "/ids.npy,", dir, "/y.npy")});
  ASSERT_THAT(two.status(), IsOk());
  EXPECT_NE(two->exit_code, 0);
  EXPECT_THAT(two->err, HasSubstr("3 input(s) (ids, segments, mask), but 1 inputs file(s)"));
}

TEST_F(Jobs, RunsToSucceededWithTheSingleDeviceParametersAndExportsThem) {
  const std::string checkpoints = cluster_.dir().File("ckpt");
  // Even: a proportional split of this tiny model may leave the slower
  // worker out (its fixed time per step alone exceeds the whole step of
  // the faster one, as their profiles show).
  const std::string id = Submit(SubmitArgs(checkpoints, kSteps, "dp-even-ring"));
  ASSERT_FALSE(id.empty());
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  ASSERT_EQ(watched->exit_code, 0)
      << watched->out << watched->err << cluster_.Log("worker-a") << cluster_.Log("worker-b");
  const nlohmann::json job = Job(id);
  EXPECT_EQ(job.value("state", std::string()), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(job.value("nodes", nlohmann::json::array()).size(), 2u);
  // watch -o json is JSON Lines: a status per line.
  absl::StatusOr<CommandResult> lines = cluster_.Quiltctl({"watch", id, "-o", "json"});
  ASSERT_THAT(lines.status(), IsOk());
  ASSERT_EQ(lines->exit_code, 0) << lines->err;
  int statuses = 0;
  for (absl::string_view line : absl::StrSplit(lines->out, '\n', absl::SkipEmpty())) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_EQ(j.value("job_id", std::string()), id);
    ++statuses;
  }
  EXPECT_GE(statuses, 1);
  // Both workers profiled the model before it was planned, at a device's
  // rows and half of them (the emulated slowdown is model_profiler_test's:
  // this MLP's 8-row step is almost all host time).
  const nlohmann::json calibration = job.value("calibration", nlohmann::json::array());
  ASSERT_EQ(calibration.size(), 2u) << job.dump();
  std::set<std::string> profiled;
  for (const auto& line : calibration) {
    const std::string text = line.get<std::string>();
    const std::string node = text.substr(0, text.find(':'));
    const std::string runs = absl::StrCat("(", kBatch / 2, " and ", kBatch / 4, " rows: ");
    EXPECT_THAT(text, ::testing::StartsWith(node + ": profiled on " + node + "/cpu:0 " + runs))
        << text;
    profiled.insert(node);
  }
  EXPECT_EQ(profiled, (std::set<std::string>{"worker-a", "worker-b"}));

  // The single-device run of the same job.
  SingleDeviceRun single;
  ASSERT_THAT(single.Train(kSteps), IsOk());
  const Graph* g = &single.graph;
  const LocalTrainResult* ref = &single.result;
  EXPECT_NEAR(job.value("last_loss", 0.0), ref->losses.back(), 1e-4 * (1 + ref->losses.back()));

  // Every job checkpoints under a directory of its own.
  absl::StatusOr<Checkpoint> ckpt = ReadLatestCheckpoint(checkpoints + "/" + id, 2);
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_EQ(ckpt->step, kSteps);
  EXPECT_TRUE(std::filesystem::exists(absl::StrCat(checkpoints, "/", id, "/step-00000004")));
  int compared = 0;
  for (const std::string& name : ref->runner->PersistentNames()) {
    const Tensor& want = *ref->runner->Persistent(name);
    auto got = ckpt->tensors.find(name);
    ASSERT_NE(got, ckpt->tensors.end()) << name << " is in no checkpoint file";
    ASSERT_EQ(got->second.numel(), want.numel()) << name;
    if (want.dtype() != DType::kF32) continue;
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(got->second.f32()[i], want.f32()[i], 1e-4 + 1e-3 * std::abs(want.f32()[i]))
          << name << "[" << i << "]";
    }
    ++compared;
  }
  EXPECT_GT(compared, 0);

  // The exported model: valid for onnx's checker, its initializers the
  // trained values.
  const std::string model = cluster_.dir().File("trained.onnx");
  absl::StatusOr<CommandResult> exported = cluster_.Quiltctl({"export", id, "-o", model});
  ASSERT_THAT(exported.status(), IsOk());
  ASSERT_EQ(exported->exit_code, 0) << exported->err;
  const std::string dump = cluster_.dir().File("weights.json");
  absl::StatusOr<CommandResult> py = RunCommand(
      {"/usr/bin/python3", "-c",
       "import sys, json, onnx, onnx.numpy_helper as nh\n"
       "m = onnx.load(sys.argv[1]); onnx.checker.check_model(m)\n"
       "json.dump({t.name: nh.to_array(t).ravel().tolist() for t in m.graph.initializer},"
       " open(sys.argv[2], 'w'))\n",
       model, dump},
      absl::Seconds(60));
  ASSERT_THAT(py.status(), IsOk());
  ASSERT_EQ(py->exit_code, 0) << py->err;
  std::ifstream in(dump);
  const nlohmann::json weights = nlohmann::json::parse(in);
  for (const ParameterSpec& p : g->parameters) {
    const Tensor& want = *ref->runner->Persistent(p.tensor);
    ASSERT_TRUE(weights.contains(p.tensor)) << p.tensor;
    const auto& got = weights[p.tensor];
    ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(got[static_cast<size_t>(i)].get<double>(), want.f32()[i],
                  1e-4 + 1e-3 * std::abs(want.f32()[i]))
          << p.tensor << "[" << i << "]";
    }
  }
}

TEST_F(Jobs, CancelStopsARunningJobWithinSecondsAndFreesTheWorkers) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60)))
      << Job(id).dump() << cluster_.Log("worker-a");
  EXPECT_EQ(Executors(id), 2);
  absl::StatusOr<CommandResult> c = cluster_.Quiltctl({"cancel", id, "--reason", "enough"});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->exit_code, 0) << c->err;
  EXPECT_EQ(State(id), "JOB_STATE_CANCELLED");
  EXPECT_THAT(Job(id).value("message", std::string()), HasSubstr("enough"));
  EXPECT_TRUE(Eventually([&] { return Executors(id) == 0; }, absl::Seconds(5)))
      << "executors of a cancelled job still run";
  // Cancelling again is refused; the workers take the next job.
  absl::StatusOr<CommandResult> again = cluster_.Quiltctl({"cancel", id});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NE(again->exit_code, 0);
  EXPECT_THAT(again->err, HasSubstr("already ended"));
  const std::string next = Submit(SubmitArgs(cluster_.dir().File("ckpt2"), 3, "dp-even-ring"));
  EXPECT_TRUE(Eventually([&] { return State(next) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(60)))
      << Job(next).dump();
  // The listing selects by state.
  auto listed = [&](const std::string& state) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl({"jobs", "--state", state});
    return r.ok() && r->exit_code == 0 ? r->out : std::string("failed");
  };
  EXPECT_THAT(listed("cancelled"), HasSubstr(id));
  EXPECT_THAT(listed("cancelled"), Not(HasSubstr(next)));
  EXPECT_THAT(listed("ended"), HasSubstr(next));
  EXPECT_THAT(listed("active"), Not(HasSubstr(next)));
  // Deleting an ended job forgets it and removes its checkpoints; a kept
  // directory stays.
  const std::string next_checkpoints = cluster_.dir().File("ckpt2") + "/" + next;
  ASSERT_TRUE(std::filesystem::exists(next_checkpoints + "/step-00000003"));
  absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"delete", next});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_EQ(d->exit_code, 0) << d->err;
  EXPECT_THAT(d->out, HasSubstr("its checkpoints in " + next_checkpoints));
  EXPECT_FALSE(std::filesystem::exists(next_checkpoints));
  EXPECT_TRUE(Job(next).empty());
  EXPECT_THAT(listed("all"), Not(HasSubstr(next)));
  d = cluster_.Quiltctl({"delete", id, "--keep-checkpoints"});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_EQ(d->exit_code, 0) << d->err;
  EXPECT_TRUE(std::filesystem::exists(cluster_.dir().File("ckpt") + "/" + id));
  d = cluster_.Quiltctl({"delete", id});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_NE(d->exit_code, 0);
  EXPECT_THAT(d->err, HasSubstr("no job '" + id + "'"));
}

// A job's losses, from step 1 (quiltctl losses -o json; NaN for lost).
std::vector<double> Losses(LocalCluster& cluster, const std::string& id) {
  absl::StatusOr<CommandResult> r = cluster.Quiltctl({"losses", id, "-o", "json"});
  std::vector<double> out;
  if (!r.ok() || r->exit_code != 0) return out;
  const nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  if (!j.contains("losses")) return out;
  for (const nlohmann::json& l : j["losses"]) out.push_back(l.is_number() ? l.get<double>() : NAN);
  return out;
}

// A cancelled job trains on from its last checkpoint as a new job: the
// steps left, from the checkpoint's weights and momentum and the data where
// the old job was (each step's loss is the uninterrupted run's), to
// SUCCEEDED. A running job and an ended job with nothing left are refused
// with the reason.
TEST_F(Jobs, ACancelledJobResumesFromItsLastCheckpointAsANewJob) {
  constexpr int64_t kTotal = 200;
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), kTotal, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 13; }, absl::Seconds(60))) << Job(id).dump();
  absl::StatusOr<CommandResult> running = cluster_.Quiltctl({"resume", id});
  ASSERT_THAT(running.status(), IsOk());
  EXPECT_NE(running->exit_code, 0);
  EXPECT_THAT(running->err, HasSubstr("only a failed or cancelled job can be resumed"));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(id, 13));
  // (Its executors ran on until the cancel reached them: its checkpoint
  // can be of a later step than its last loss.)
  const std::vector<double> old_losses = Losses(cluster_, id);

  std::string said;
  const std::string resumed = Resume(id, &said);
  ASSERT_FALSE(resumed.empty());
  ASSERT_NE(resumed, id);
  // Checkpoints every 4 steps: the last one the cancel left.
  const nlohmann::json job = Job(resumed);
  const int64_t steps = std::stoll(job.value("steps", std::string("0")));
  const int64_t from = kTotal - steps;
  EXPECT_GE(from, 12);
  EXPECT_EQ(from % 4, 0);
  EXPECT_THAT(said, HasSubstr("from step " + std::to_string(from) + "'s checkpoint"));
  EXPECT_THAT(job.value("name", std::string()),
              HasSubstr("(resumed from " + id + " at step " + std::to_string(from) + ")"));
  ASSERT_TRUE(
      Eventually([&] { return State(resumed) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(120)))
      << Job(resumed).dump();
  const std::vector<double> new_losses = Losses(cluster_, resumed);
  ASSERT_EQ(static_cast<int64_t>(new_losses.size()), steps);
  ASSERT_GE(old_losses.size(), 2u);
  // It trains on as the job would have without the cancel: its step k is
  // the uninterrupted run's step from + k, on the same samples, from the
  // same parameters and momentum.
  SingleDeviceRun single;
  ASSERT_THAT(single.Train(kTotal), IsOk());
  const std::vector<float>& want = single.result.losses;
  for (int64_t k = 0; k < steps; ++k) {
    const double w = want[static_cast<size_t>(from + k)];
    ASSERT_NEAR(new_losses[static_cast<size_t>(k)], w, 1e-3 * (1 + std::abs(w)))
        << "the resumed job's step " << k + 1 << ", the run's step " << from + k + 1;
  }
  // It has nothing left once it succeeded: refused, naming export.
  absl::StatusOr<CommandResult> again = cluster_.Quiltctl({"resume", resumed});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NE(again->exit_code, 0);
  EXPECT_THAT(again->err, HasSubstr("only a failed or cancelled job can be resumed"));
  absl::StatusOr<CommandResult> unknown = cluster_.Quiltctl({"resume", "job-00000000"});
  ASSERT_THAT(unknown.status(), IsOk());
  EXPECT_NE(unknown->exit_code, 0);
  EXPECT_THAT(unknown->err, HasSubstr("job-00000000"));
}

// Resumes chain: a resumed job resumed in turn goes on from its own
// checkpoint, the steps before it counted over both jobs; one without a
// checkpoint of its own (lost here) goes on from where it started. Each
// trains as the uninterrupted run at its steps.
TEST_F(Jobs, AResumedJobResumesFromItsOwnCheckpointOrWhereItStarted) {
  constexpr int64_t kTotal = 1000000;  // (cancelled long before)
  const std::string ckpt = cluster_.dir().File("ckpt");
  auto steps_of = [&](const std::string& id) {
    return std::stoll(Job(id).value("steps", std::string("0")));
  };
  const std::string a = Submit(SubmitArgs(ckpt, kTotal, "dp-even-ring"));
  ASSERT_FALSE(a.empty());
  ASSERT_NO_FATAL_FAILURE(CancelAfter(a, 13));
  std::string err;
  const std::string b = Resume(a, &err);
  const int64_t from_a = kTotal - steps_of(b);
  ASSERT_NO_FATAL_FAILURE(CancelAfter(b, 9));
  const std::string c = Resume(b, &err);
  const int64_t from_b = steps_of(b) - steps_of(c);
  EXPECT_GE(from_b, 8);
  EXPECT_THAT(Job(c).value("name", std::string()),
              HasSubstr("(resumed from " + b + " at step " + std::to_string(from_b) + ")"));
  // Its status counts the steps before it, over both jobs (int64: a JSON
  // string), and describe says so.
  EXPECT_EQ(Job(c).value("steps_before", std::string()), std::to_string(from_a + from_b));
  absl::StatusOr<CommandResult> described = cluster_.Quiltctl({"describe", "job", c});
  ASSERT_THAT(described.status(), IsOk());
  EXPECT_THAT(described->out, HasSubstr("Resumed from: " + b));
  EXPECT_THAT(described->out,
              HasSubstr("Trained before: " + std::to_string(from_a + from_b) + " steps"));
  ASSERT_TRUE(Eventually([&] { return Losses(cluster_, c).size() >= 20; }, absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(c, 2));
  std::filesystem::remove_all(ckpt + "/" + c);
  const std::string d = Resume(c, &err);
  EXPECT_THAT(err, HasSubstr("no checkpoint of its own"));
  EXPECT_EQ(steps_of(d), steps_of(c));
  EXPECT_THAT(Job(d).value("name", std::string()), HasSubstr("(resumed from " + c + " at step 0)"));
  ASSERT_TRUE(Eventually([&] { return Losses(cluster_, d).size() >= 20; }, absl::Seconds(60)));
  ASSERT_NO_FATAL_FAILURE(CancelAfter(d, 20));

  SingleDeviceRun single;
  ASSERT_THAT(single.Train(from_a + from_b + 20), IsOk());
  const std::vector<float>& want = single.result.losses;
  for (const auto& [job, before] : std::vector<std::pair<std::string, int64_t>>{
           {b, from_a}, {c, from_a + from_b}, {d, from_a + from_b}}) {
    const std::vector<double> got = Losses(cluster_, job);
    ASSERT_GE(got.size(), 8u) << job;
    for (size_t k = 0; k < std::min<size_t>(got.size(), 20); ++k) {
      const double w = want[static_cast<size_t>(before) + k];
      ASSERT_NEAR(got[k], w, 1e-3 * (1 + std::abs(w)))
          << job << "'s step " << k + 1 << ", the run's step " << before + k + 1;
    }
  }
}

// A zoo model (no ONNX file to write the weights into) resumes too: its
// executors restore the checkpoint, so the new job trains as the
// uninterrupted run would have, on the same synthetic samples, with
// Adam's moments and step count.
TEST_F(Jobs, AZooJobResumesFromItsCheckpointAndRepeatsTheStepsAfterIt) {
  const std::string ckpt = cluster_.dir().File("ckpt");
  const std::string id =
      Submit({"submit", "zoo:mlp", "--batch", "16", "--steps", "1000000", "--optimizer", "adam",
              "--strategy", "dp-even-ring", "--data", "synthetic:7", "--checkpoint-dir", ckpt,
              "--checkpoint-every", "5"});
  ASSERT_FALSE(id.empty());
  ASSERT_NO_FATAL_FAILURE(CancelAfter(id, 23));
  const std::vector<double> old_losses = Losses(cluster_, id);
  const std::string resumed = Resume(id);
  ASSERT_FALSE(resumed.empty());
  const int64_t from = 1000000 - std::stoll(Job(resumed).value("steps", std::string("0")));
  EXPECT_EQ(from % 5, 0);
  ASSERT_TRUE(
      Eventually([&] { return Losses(cluster_, resumed).size() >= 10; }, absl::Seconds(60)));
  const std::vector<double> new_losses = Losses(cluster_, resumed);
  absl::StatusOr<CommandResult> stop = cluster_.Quiltctl({"cancel", resumed});
  ASSERT_THAT(stop.status(), IsOk());
  // The same model trained on one device without a break.
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(16);
  spec.mutable_optimizer()->mutable_adam()->set_learning_rate(1e-3);
  absl::StatusOr<Graph> g = TrainingGraphForJob(spec);
  ASSERT_THAT(g.status(), IsOk());
  absl::StatusOr<DataSignature> sig = DataSignatureOf(*g);
  ASSERT_THAT(sig.status(), IsOk());
  absl::StatusOr<std::unique_ptr<Dataset>> data = MakeSyntheticDataset(*g, *sig, 7);
  ASSERT_THAT(data.status(), IsOk());
  SetComputeThreads(1);
  LocalTrainOptions lo;
  lo.batch = 16;
  lo.steps = from + 10;
  absl::StatusOr<LocalTrainResult> ref = TrainLocal(*g, data->get(), lo);
  ASSERT_THAT(ref.status(), IsOk());
  ASSERT_GE(old_losses.size(), 20u);
  for (size_t k = 0; k < 20; ++k) {
    EXPECT_NEAR(old_losses[k], ref->losses[k], 1e-4 * (1 + std::abs(ref->losses[k])))
        << "the old job's step " << k + 1;
  }
  for (size_t k = 0; k < 10; ++k) {
    const double w = ref->losses[static_cast<size_t>(from) + k];
    EXPECT_NEAR(new_losses[k], w, 1e-4 * (1 + std::abs(w)))
        << "the new job's step " << k + 1 << ", the run's " << from + k + 1;
  }
}

// With a restart left, a job that fails because a node died trains on by
// itself: once the node is no longer Ready, a new job from its last
// checkpoint on the nodes left, named on the old one.
TEST_F(Jobs, AJobWithARestartLeftTrainsOnWithoutTheNodeThatDied) {
  ASSERT_NO_FATAL_FAILURE(StartReadyWorker("worker-c"));
  std::vector<std::string> args = SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring");
  args.insert(args.end(), {"--max-restarts", "1"});
  const std::string id = Submit(args);
  ASSERT_TRUE(Eventually([&] { return Step(id) > 6; }, absl::Seconds(60))) << Job(id).dump();
  ASSERT_EQ(Job(id)["nodes"].size(), 3u) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGKILL);
  const std::string next = ResumedAs(id);
  ASSERT_FALSE(next.empty()) << Job(id).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(State(id), "JOB_STATE_FAILED");
  ASSERT_TRUE(Eventually([&] { return Step(next) > 2; }, absl::Seconds(60))) << Job(next).dump();
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a", "worker-c"}))
      << Job(next).dump();
  // From a checkpoint past the start, with the steps left; its checkpoints
  // beside the old job's.
  const std::string name = Job(next).value("name", std::string());
  EXPECT_THAT(name, HasSubstr("(resumed from " + id + " at step "));
  EXPECT_THAT(name, Not(HasSubstr(" at step 0)")));
  EXPECT_LT(std::stoll(Job(next).value("steps", std::string("0"))), 1000000);
  EXPECT_TRUE(
      Eventually([&] { return std::filesystem::exists(cluster_.dir().File("ckpt") + "/" + next); },
                 absl::Seconds(30)));
  absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"describe", "job", id});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_THAT(d->out, HasSubstr("Resumed as: " + next));
  // Resumed once: by hand it is refused, naming the job that trains on.
  absl::StatusOr<CommandResult> again = cluster_.Quiltctl({"resume", id});
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_NE(again->exit_code, 0);
  EXPECT_THAT(again->err, HasSubstr("was resumed already, as " + next));
  // Its one restart used: the new job fails with worker-c and stays failed.
  cluster_.KillWorker("worker-c", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return State(next) == "JOB_STATE_FAILED"; }, absl::Seconds(60)))
      << Job(next).dump();
  absl::SleepFor(kNotReadyAfter + absl::Seconds(2));
  EXPECT_EQ(Job(next).value("resumed_as", std::string()), "") << Job(next).dump();
}

// A job with a restart left that fails before its first checkpoint is
// restarted from its first step (there is no checkpoint to go on from).
TEST_F(Jobs, AJobThatFailsBeforeItsFirstCheckpointRestartsFromItsFirstStep) {
  ASSERT_NO_FATAL_FAILURE(StartReadyWorker("worker-c"));
  const int64_t steps = 1000000;
  std::vector<std::string> args = SubmitArgs(cluster_.dir().File("ckpt"), steps, "dp-even-ring");
  *std::next(std::find(args.begin(), args.end(), "--checkpoint-every")) = "500000";
  args.insert(args.end(), {"--max-restarts", "1"});
  const std::string id = Submit(args);
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGKILL);
  const std::string next = ResumedAs(id);
  ASSERT_FALSE(next.empty()) << Job(id).dump() << cluster_.Log("coordinator");
  EXPECT_EQ(Job(id).value("restart_error", std::string()), "") << Job(id).dump();
  EXPECT_THAT(Job(next).value("name", std::string()),
              HasSubstr("(resumed from " + id + " at step 0)"));
  EXPECT_EQ(std::stoll(Job(next).value("steps", std::string("0"))), steps) << Job(next).dump();
  ASSERT_TRUE(Eventually([&] { return Step(next) > 2; }, absl::Seconds(60))) << Job(next).dump();
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a", "worker-c"}))
      << Job(next).dump();
  EXPECT_THAT(cluster_.Log("coordinator"), HasSubstr("it starts again from its first step"));
  absl::StatusOr<CommandResult> cancel = cluster_.Quiltctl({"cancel", next});
  ASSERT_THAT(cancel.status(), IsOk());
}

TEST_F(Jobs, ADrainedNodeGetsNoNewJobsWhileItsRunningJobGoesOn) {
  auto quiltctl = [&](const std::vector<std::string>& args) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl(args);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : CommandResult{};
  };
  const std::string running =
      Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(running) > 2; }, absl::Seconds(60)))
      << Job(running).dump();
  const CommandResult drained = quiltctl({"drain", "worker-b"});
  EXPECT_EQ(drained.exit_code, 0) << drained.err;
  EXPECT_THAT(drained.out, HasSubstr("worker-b is draining"));
  EXPECT_THAT(drained.out, HasSubstr("running on it until they end: " + running));
  EXPECT_THAT(quiltctl({"drain", "worker-b"}).out, HasSubstr("draining already"));
  const CommandResult unknown = quiltctl({"drain", "worker-z"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("no node 'worker-z'"));
  EXPECT_THAT(quiltctl({"nodes"}).out, HasSubstr("Ready,Draining"));
  const CommandResult described = quiltctl({"describe", "node", "worker-b"});
  EXPECT_THAT(described.out, HasSubstr("(draining: no new jobs)"));
  EXPECT_THAT(described.out, HasSubstr("Jobs:        " + running));
  EXPECT_THAT(described.out, HasSubstr("Draining: drained: no new jobs"));
  EXPECT_THAT(quiltctl({"status"}).out, HasSubstr("1 draining (no new jobs)"));
  // The running job goes on over both nodes; new ones are planned without
  // the drained node: data parallelism over every device finds one.
  const int64_t at = Step(running);
  EXPECT_TRUE(Eventually([&] { return Step(running) > at + 2; }, absl::Seconds(60)));
  EXPECT_EQ(State(running), "JOB_STATE_RUNNING");
  const CommandResult one = quiltctl(SubmitArgs(cluster_.dir().File("ckpt"), 3, "dp-even-ring"));
  EXPECT_NE(one.exit_code, 0);
  EXPECT_THAT(one.err, HasSubstr("the cluster has 1"));
  const std::string next = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 3, "auto"));
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a"})) << Job(next).dump();
  ASSERT_TRUE(Eventually([&] { return State(next) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(60)))
      << Job(next).dump();
  // Waiting for the node to be idle: not while the job runs; once it is
  // cancelled, at once.
  const CommandResult busy = quiltctl({"drain", "worker-b", "--wait", "--wait-timeout", "2"});
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_THAT(busy.out, HasSubstr("waiting for " + running + " to end on worker-b"));
  EXPECT_THAT(busy.err, HasSubstr("still runs " + running));
  ASSERT_EQ(quiltctl({"cancel", running}).exit_code, 0);
  const CommandResult idle = quiltctl({"drain", "worker-b", "--wait", "--wait-timeout", "30"});
  EXPECT_EQ(idle.exit_code, 0) << idle.err;
  EXPECT_THAT(idle.out, HasSubstr("worker-b runs no job: it may be stopped"));
  // Every Ready node draining: a submission is refused, saying why.
  EXPECT_EQ(quiltctl({"drain", "worker-a"}).exit_code, 0);
  const CommandResult refused = quiltctl(SubmitArgs(cluster_.dir().File("ckpt"), 3, "auto"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("2 draining"));
  // Taken back: the next job may use it again.
  for (const char* node : {"worker-a", "worker-b"}) {
    const CommandResult back = quiltctl({"undrain", node});
    EXPECT_EQ(back.exit_code, 0) << back.err;
    EXPECT_THAT(back.out, HasSubstr("is taken back"));
  }
  EXPECT_THAT(quiltctl({"undrain", "worker-b"}).out, HasSubstr("was not draining"));
  EXPECT_THAT(quiltctl({"nodes"}).out, Not(HasSubstr("Draining")));
  const std::string last = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 3, "dp-even-ring"));
  EXPECT_EQ(Job(last)["nodes"].size(), 2u) << Job(last).dump();
}

// The coordinator's Prometheus endpoint follows a running job.
TEST(Metrics, TheEndpointShowsTheClusterAndARunningJobsProgress) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator("127.0.0.1:0", {"--metrics_address", "127.0.0.1:0"}),
              IsOk());
  ASSERT_THAT(cluster.StartWorker("worker-a").status(), IsOk());
  // The port it got is in its log.
  std::string log;
  size_t at = std::string::npos;
  ASSERT_TRUE(Eventually(
      [&] {
        log = cluster.Log("coordinator");
        at = log.find("metrics at http://");
        return at != std::string::npos;
      },
      absl::Seconds(10)))
      << log;
  const size_t from = at + strlen("metrics at http://");
  const std::string address = log.substr(from, log.find('/', from) - from);
  absl::StatusOr<CommandResult> r =
      cluster.Quiltctl(SubmitArgs(cluster.dir().File("ckpt"), 1000000, "auto"));
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  const std::string id(absl::StripAsciiWhitespace(r->out));
  // The value of the sample whose line starts with `prefix` ("" if none).
  auto sample = [&](const std::string& prefix) {
    const std::string page = testing::RawHttpExchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
    const size_t p = page.find("\n" + prefix);
    if (p == std::string::npos) return std::string();
    const size_t v = page.find(' ', page.find('}', p)) + 1;
    return page.substr(v, page.find('\n', v) - v);
  };
  EXPECT_EQ(sample("quilt_nodes{state=\"ready\"}"), "1");
  EXPECT_EQ(sample("quilt_jobs{state=\"failed\"}"), "0");
  const std::string labels = "{job_id=\"" + id + "\",";
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string step = sample("quilt_job_step" + labels);
        return !step.empty() && std::stoll(step) > 3;
      },
      absl::Seconds(60)))
      << testing::RawHttpExchange(address, "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(sample("quilt_job_steps" + labels), "1000000");
  EXPECT_EQ(sample("quilt_jobs{state=\"running\"}"), "1");
  EXPECT_EQ(sample("quilt_node_jobs{node=\"worker-a\"}"), "1");
  EXPECT_EQ(sample("quilt_node_ready{node=\"worker-a\"}"), "1");
  const double loss = std::stod(sample("quilt_job_loss" + labels));
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  EXPECT_GT(std::stod(sample("quilt_job_predicted_step_time_seconds" + labels)), 0);
  ASSERT_EQ(cluster.Quiltctl({"cancel", id})->exit_code, 0);
  EXPECT_EQ(sample("quilt_job_step" + labels), "");  // ended: no longer listed
  EXPECT_EQ(sample("quilt_jobs{state=\"cancelled\"}"), "1");
}

TEST_F(Jobs, BadRequestsAreRejectedAtSubmitWithTheirReason) {
  const std::string ckpt = cluster_.dir().File("ckpt");
  auto rejected = [&](std::vector<std::string> args, const std::string& why) {
    absl::StatusOr<CommandResult> r = cluster_.Quiltctl(args);
    ASSERT_THAT(r.status(), IsOk());
    EXPECT_NE(r->exit_code, 0) << r->out;
    EXPECT_THAT(r->err, HasSubstr(why));
  };
  std::vector<std::string> args = SubmitArgs(ckpt, 4, "dp-even-ring");
  // Unknown model.
  std::vector<std::string> zoo = args;
  zoo[1] = "zoo:no_such_model";
  rejected(zoo, "no_such_model");
  // Restarts without checkpoints before the end.
  std::vector<std::string> restarts = args;
  restarts.insert(restarts.end(), {"--max-restarts", "2"});
  std::vector<std::string> no_checkpoints = restarts;
  *std::next(std::find(no_checkpoints.begin(), no_checkpoints.end(), "--checkpoint-every")) = "0";
  rejected(no_checkpoints, "max_restarts needs checkpoints before the end");
  // Unsupported op.
  {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name("odd");
    auto* in = g->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("N");
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(20);
    auto* node = g->add_node();
    node->set_op_type("FancyNewOp");
    node->add_input("x");
    node->add_output("y");
    g->add_output()->set_name("y");
    const std::string path = cluster_.dir().File("odd.onnx");
    std::ofstream(path, std::ios::binary) << m.SerializeAsString();
    std::vector<std::string> odd = args;
    odd[1] = path;
    rejected(odd, "FancyNewOp");
  }
  // Memory: gpt2_xl with a huge batch fits no CPU device here.
  std::vector<std::string> big = {"submit",  "zoo:gpt2_xl", "--batch",    "4096",
                                  "--steps", "1",           "--strategy", "dp-even-ring"};
  rejected(big, "memory");
  // A batch that cannot be split over the plan's devices.
  std::vector<std::string> tiny = args;
  tiny[5] = "1";
  rejected(tiny, "cannot be split");
  // Missing dataset file; a dataset smaller than one batch.
  std::vector<std::string> missing = args;
  missing[17] = "/nonexistent/x.npy,/nonexistent/y.npy";
  rejected(missing, "/nonexistent/x.npy");
  std::vector<std::string> small = args;
  small[5] = "128";
  rejected(small, "fewer than one global batch");
  // A checkpoint directory the coordinator cannot create.
  std::vector<std::string> unwritable = args;
  const auto ckpt_flag = std::find(unwritable.begin(), unwritable.end(), "--checkpoint-dir");
  ASSERT_NE(ckpt_flag, unwritable.end());
  *(ckpt_flag + 1) = "/proc/quilt-checkpoints";
  rejected(unwritable, "checkpoint directory /proc/quilt-checkpoints cannot be created");
  // One that exists but takes no files (sysfs: not even for root).
  *(ckpt_flag + 1) = "/sys/kernel";
  rejected(unwritable, "checkpoint directory /sys/kernel cannot be written");
  // A name with a control character (it would reach terminals as is).
  std::vector<std::string> named = args;
  named.insert(named.end(), {"--name", "evil\x1b[2Jname"});
  rejected(named, "control character");
  // Nothing was created.
  absl::StatusOr<CommandResult> jobs = cluster_.Quiltctl({"jobs", "-o", "json"});
  ASSERT_THAT(jobs.status(), IsOk());
  EXPECT_EQ(nlohmann::json::parse(jobs->out).value("jobs", nlohmann::json::array()).size(), 0u);
}

TEST_F(Jobs, ASingleDeviceJobRunsOnItsNodeAlone) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 3, "single-device"));
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_SUCCEEDED"; }, absl::Seconds(60)))
      << Job(id).dump();
  // The idle node is no part of the job (its loss could not fail it).
  EXPECT_EQ(Job(id).value("nodes", nlohmann::json::array()).size(), 1u) << Job(id).dump();
}

TEST_F(Jobs, ANonFiniteLossFailsTheJobAndStatusListsIt) {
  absl::StatusOr<Tensor> x = ReadNpy(Fixture("x.npy"));
  ASSERT_THAT(x.status(), IsOk());
  // Every sample: each process's part of the first step's loss is NaN.
  const int64_t per_sample = x->numel() / x->dim(0);
  for (int64_t i = 0; i < x->dim(0); ++i) x->f32()[i * per_sample] = std::nanf("");
  const std::string nan_x = cluster_.dir().File("nan_x.npy");
  ASSERT_THAT(WriteNpy(nan_x, *x), IsOk());
  std::vector<std::string> args = SubmitArgs(cluster_.dir().File("ckpt"), 5, "dp-even-ring");
  const auto data = std::find(args.begin(), args.end(), "--data");
  ASSERT_NE(data, args.end());
  *(data + 1) = nan_x + "," + Fixture("y.npy");
  const std::string id = Submit(args);
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_FAILED"; }, absl::Seconds(60)))
      << Job(id).dump();
  EXPECT_THAT(Job(id).value("message", std::string()), HasSubstr("the loss is nan at step 1"));
  absl::StatusOr<CommandResult> status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status.status(), IsOk());
  EXPECT_THAT(status->out, HasSubstr("JobFailed"));
  EXPECT_THAT(status->out, HasSubstr("job " + id));
}

TEST_F(Jobs, AKilledWorkerFailsTheJobWithTheReasonAndTheCoordinatorKeepsServing) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  // Both nodes list the job and the memory its plan holds there.
  absl::StatusOr<std::map<std::string, nlohmann::json>> nodes = cluster_.Nodes();
  ASSERT_THAT(nodes.status(), IsOk());
  for (const char* node : {"worker-a", "worker-b"}) {
    const nlohmann::json& n = (*nodes)[node];
    ASSERT_TRUE(n.contains("running_jobs")) << n.dump();
    EXPECT_EQ(n["running_jobs"], nlohmann::json::array({id})) << n.dump();
    EXPECT_GT(std::stoll(n.value("memory_used_bytes", std::string("0"))), 0) << n.dump();
  }
  cluster_.KillWorker("worker-b", SIGKILL);
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_FAILED"; }, absl::Seconds(30)))
      << Job(id).dump();
  const std::string message = Job(id).value("message", std::string());
  // The executor on worker-a names its lost peer (or the node is Down).
  EXPECT_THAT(message, HasSubstr("worker-b"));
  EXPECT_TRUE(Eventually([&] { return Executors(id) == 0; }, absl::Seconds(10)));
  nodes = cluster_.Nodes();
  ASSERT_THAT(nodes.status(), IsOk());
  EXPECT_EQ((*nodes)["worker-a"].value("running_jobs", nlohmann::json::array()),
            nlohmann::json::array());
  EXPECT_EQ((*nodes)["worker-a"].value("memory_used_bytes", std::string("0")), "0");
  absl::StatusOr<CommandResult> status = cluster_.Quiltctl({"status"});
  ASSERT_THAT(status.status(), IsOk());
  EXPECT_EQ(status->exit_code, 0) << status->err;
  // Resumed from its last checkpoint once worker-b is no longer Ready, the
  // job trains on worker-a alone.
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<std::map<std::string, nlohmann::json>> n = cluster_.Nodes();
        return n.ok() && (*n)["worker-b"].value("state", std::string()) != "NODE_STATE_READY";
      },
      absl::Seconds(30)));
  // (dp-even-ring needs two devices: the planner's choice instead.)
  absl::StatusOr<CommandResult> resumed = cluster_.Quiltctl({"resume", id, "--strategy", "auto"});
  ASSERT_THAT(resumed.status(), IsOk());
  ASSERT_EQ(resumed->exit_code, 0) << resumed->err;
  std::string next = resumed->out;
  while (!next.empty() && (next.back() == '\n' || next.back() == ' ')) next.pop_back();
  ASSERT_TRUE(Eventually([&] { return Step(next) > 2; }, absl::Seconds(60))) << Job(next).dump();
  EXPECT_EQ(Job(next)["nodes"], nlohmann::json::array({"worker-a"})) << Job(next).dump();
  absl::StatusOr<CommandResult> c = cluster_.Quiltctl({"cancel", next});
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->exit_code, 0) << c->err;
}

TEST_F(Jobs, ACheckpointThatCannotBeWrittenFailsTheJobAtThatStep) {
  const std::string checkpoints = cluster_.dir().File("ckpt");
  const std::string id = Submit(SubmitArgs(checkpoints, 1000000, "dp-even-ring"));
  ASSERT_FALSE(id.empty());
  // A file where step 40's checkpoint directory goes.
  std::filesystem::create_directories(checkpoints + "/" + id);
  ASSERT_TRUE(std::ofstream(checkpoints + "/" + id + "/step-00000040").good());
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_FAILED"; }, absl::Seconds(60)))
      << Job(id).dump();
  EXPECT_THAT(Job(id).value("message", std::string()), HasSubstr("checkpoint at step 40"));
  EXPECT_LT(Step(id), 100);
  EXPECT_TRUE(std::filesystem::exists(checkpoints + "/" + id + "/step-00000036/rank-1"));
}

TEST_F(Jobs, ARunningJobCannotBeDeleted) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 0; }, absl::Seconds(60))) << Job(id).dump();
  absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"delete", id});
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_NE(d->exit_code, 0);
  EXPECT_THAT(d->err, HasSubstr("is running; cancel it first"));
  EXPECT_EQ(State(id), "JOB_STATE_RUNNING");
}

TEST_F(Jobs, ARunningJobOutlivesACoordinatorRestart) {
  constexpr int64_t kLongSteps = 600;
  const std::string id =
      Submit(SubmitArgs(cluster_.dir().File("ckpt"), kLongSteps, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  const std::string address = cluster_.address();
  // A watch across the restart waits for the coordinator and goes on.
  absl::StatusOr<Subprocess> watch =
      Subprocess::Start({RunfilePath("src/cli/quiltctl"), "--coordinator", address, "watch", id},
                        cluster_.dir().File("watch.log"));
  ASSERT_THAT(watch.status(), IsOk());
  // (Watching before the stop: a watch that cannot reach the coordinator
  // at its start says so at once.)
  ASSERT_TRUE(Eventually(
      [&] {
        std::error_code ec;
        return std::filesystem::file_size(cluster_.dir().File("watch.log"), ec) > 0;
      },
      absl::Seconds(30)));
  const int64_t before = Step(id);
  cluster_.StopCoordinator(SIGTERM);
  ASSERT_TRUE(cluster_.WaitCoordinator(absl::Seconds(10)).has_value());
  absl::SleepFor(absl::Seconds(2));  // the executors train on meanwhile
  std::cerr << "step " << before << " of " << kLongSteps << " when the coordinator stopped\n";
  ASSERT_THAT(cluster_.StartCoordinator(address), IsOk()) << cluster_.Log("coordinator");
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  EXPECT_EQ(watched->exit_code, 0) << watched->out << watched->err << Job(id).dump();
  EXPECT_EQ(State(id), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  EXPECT_EQ(Step(id), kLongSteps);
  std::optional<int> watch_exit = watch->Wait(absl::Seconds(30));
  ASSERT_TRUE(watch_exit.has_value());
  std::ifstream watch_log(cluster_.dir().File("watch.log"));
  const std::string watch_text((std::istreambuf_iterator<char>(watch_log)),
                               std::istreambuf_iterator<char>());
  EXPECT_EQ(*watch_exit, 0) << watch_text;
  EXPECT_THAT(watch_text, HasSubstr("watching again when the coordinator is back"));
  // Its final checkpoint is complete: it exports.
  absl::StatusOr<CommandResult> exported =
      cluster_.Quiltctl({"export", id, "-o", cluster_.dir().File("after-restart.onnx")});
  ASSERT_THAT(exported.status(), IsOk());
  EXPECT_EQ(exported->exit_code, 0) << exported->err;
}

TEST_F(Jobs, ACoordinatorKilledMidJobLosesNoStepsLoss) {
  constexpr int64_t kSteps = 400;
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), kSteps, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  const std::string address = cluster_.address();
  // Killed: nothing stored since its last write (every few seconds) but
  // what the workers kept.
  cluster_.StopCoordinator(SIGKILL);
  ASSERT_TRUE(cluster_.WaitCoordinator(absl::Seconds(10)).has_value());
  absl::SleepFor(absl::Seconds(1));
  ASSERT_THAT(cluster_.StartCoordinator(address), IsOk()) << cluster_.Log("coordinator");
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  EXPECT_EQ(State(id), "JOB_STATE_SUCCEEDED") << Job(id).dump();
  absl::StatusOr<CommandResult> losses = cluster_.Quiltctl({"losses", id, "-o", "json"});
  ASSERT_THAT(losses.status(), IsOk());
  ASSERT_EQ(losses->exit_code, 0) << losses->err;
  const nlohmann::json j = nlohmann::json::parse(losses->out, nullptr, false);
  ASSERT_TRUE(j.contains("losses")) << losses->out;
  ASSERT_EQ(j["losses"].size(), kSteps);
  int lost = 0;
  for (const nlohmann::json& l : j["losses"]) lost += l.is_number() ? 0 : 1;
  EXPECT_EQ(lost, 0) << losses->out;
  // The loss shown is the last step's.
  EXPECT_DOUBLE_EQ(j["losses"].back().get<double>(), Job(id).value("last_loss", 0.0));
  // The table form: a header and one line per step from --from on.
  absl::StatusOr<CommandResult> table = cluster_.Quiltctl({"losses", id, "--from", "391"});
  ASSERT_THAT(table.status(), IsOk());
  const std::vector<std::string> lines = absl::StrSplit(table->out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 11) << table->out;
  EXPECT_EQ(lines[0], "step\tloss");
  EXPECT_THAT(lines[1], ::testing::StartsWith("391\t"));
  EXPECT_THAT(lines[10], ::testing::StartsWith("400\t"));
}

TEST_F(Jobs, AStallShowsInDescribeAndGoesWhenTheJobGoesOn) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "single-device"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  auto describe = [&] {
    absl::StatusOr<CommandResult> d = cluster_.Quiltctl({"describe", "job", id});
    return d.ok() ? d->out : std::string();
  };
  EXPECT_THAT(describe(), HasSubstr(", last step "));
  EXPECT_THAT(describe(), Not(HasSubstr("no step for")));
  // The executor hangs (stopped; the worker's stall timeout is minutes).
  absl::StatusOr<CommandResult> stop = RunCommand({"/usr/bin/pkill", "-STOP", "-f", id});
  ASSERT_THAT(stop.status(), IsOk());
  ASSERT_EQ(stop->exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return absl::StrContains(describe(), "no step for"); }, absl::Seconds(30)))
      << describe();
  EXPECT_GT(Job(id).value("since_progress_s", 0.0), 10.0) << Job(id).dump();
  EXPECT_EQ(State(id), "JOB_STATE_RUNNING");
  // It goes on: the warning goes.
  const int64_t stalled_at = Step(id);
  absl::StatusOr<CommandResult> cont = RunCommand({"/usr/bin/pkill", "-CONT", "-f", id});
  ASSERT_THAT(cont.status(), IsOk());
  ASSERT_TRUE(Eventually([&] { return Step(id) > stalled_at; }, absl::Seconds(30)));
  EXPECT_THAT(describe(), Not(HasSubstr("no step for")));
  EXPECT_LT(Job(id).value("since_progress_s", 0.0), 10.0) << Job(id).dump();
  ASSERT_THAT(cluster_.Quiltctl({"cancel", id}).status(), IsOk());
}

TEST_F(Jobs, AWorkerStoppedMidJobFailsItSayingSo) {
  const std::string id = Submit(SubmitArgs(cluster_.dir().File("ckpt"), 1000000, "dp-even-ring"));
  ASSERT_TRUE(Eventually([&] { return Step(id) > 2; }, absl::Seconds(60))) << Job(id).dump();
  cluster_.KillWorker("worker-b", SIGTERM);
  ASSERT_TRUE(Eventually([&] { return State(id) == "JOB_STATE_FAILED"; }, absl::Seconds(30)))
      << Job(id).dump();
  // The stopped worker is named, not its peer's lost connection.
  EXPECT_THAT(Job(id).value("message", std::string()),
              HasSubstr("the worker on worker-b was stopped"));
  EXPECT_TRUE(Eventually([&] { return Executors(id) == 0; }, absl::Seconds(10)));
}

TEST(StalledExecutor, IsStoppedAndTheJobFailsSayingSo) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator().status(), IsOk());
  ASSERT_THAT(cluster.StartWorker("solo", {"--stall_timeout_ms", "3000"}).status(), IsOk());
  absl::StatusOr<CommandResult> r =
      cluster.Quiltctl(SubmitArgs(cluster.dir().File("ckpt"), 1000000, "single-device"));
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->exit_code, 0) << r->err;
  std::string id = r->out;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  auto job = [&] {
    absl::StatusOr<CommandResult> d = cluster.Quiltctl({"describe", "job", id, "-o", "json"});
    return d.ok() ? nlohmann::json::parse(d->out, nullptr, false) : nlohmann::json();
  };
  ASSERT_TRUE(Eventually(
      [&] {
        const nlohmann::json j = job();
        return j.is_object() && j.contains("step") && std::stoll(j["step"].get<std::string>()) > 2;
      },
      absl::Seconds(60)))
      << job().dump();
  // The executor hangs (as on a dead file server): stopped, not killed.
  absl::StatusOr<CommandResult> stop = RunCommand({"/usr/bin/pkill", "-STOP", "-f", id});
  ASSERT_THAT(stop.status(), IsOk());
  ASSERT_EQ(stop->exit_code, 0);
  ASSERT_TRUE(
      Eventually([&] { return job().value("state", "") == "JOB_STATE_FAILED"; }, absl::Seconds(30)))
      << job().dump();
  EXPECT_THAT(job().value("message", std::string()), HasSubstr("stopped as stalled"));
}

TEST(JobsWithoutWorkers, SubmitSaysNoNodeIsReady) {
  LocalCluster cluster;
  ASSERT_THAT(cluster.StartCoordinator().status(), IsOk());
  absl::StatusOr<CommandResult> r =
      cluster.Quiltctl(SubmitArgs(cluster.dir().File("c"), 2, "auto"));
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_NE(r->exit_code, 0);
  EXPECT_THAT(r->err, HasSubstr("Ready"));
}

}  // namespace
}  // namespace quilt::testing
