// Jobs through the whole service with the real binaries on loopback: a
// coordinator, two workers (one emulated 2x slower) and quiltctl. A job
// runs to SUCCEEDED and its checkpoint holds the single-device run's
// parameters; the exported ONNX model loads with python3-onnx and carries
// them, and so does the .npz export with numpy, from which a new job
// starts (--init-weights); cancel stops a running job within seconds and frees
// the workers; bad requests are rejected at submit time with their reason; a worker killed during a
// job fails the job with the reason while the coordinator keeps serving. (Resuming, restarts and
// the coordinator's restarts: job_recovery_test.cc.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
#include "test/integration/jobs_fixture.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
  // Each node's executor held about what the plan predicts for its device
  // (one device a node here; +2.1 % in every run measured since updates
  // commit once nothing reads the old values: docs/BENCHMARKS.md).
  const nlohmann::json predicted = job.value("predicted_device_memory_bytes", nlohmann::json());
  const nlohmann::json held = job.value("measured_memory_bytes", nlohmann::json());
  ASSERT_EQ(held.size(), 2u) << job.dump();
  for (const auto& [node, bytes] : held.items()) {
    const double h = std::stod(bytes.get<std::string>());
    const double p = std::stod(predicted.value(node + "/cpu:0", std::string("0")));
    EXPECT_GT(h, 0.8 * p) << node;
    EXPECT_LT(h, 1.15 * p) << node;
  }
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
  auto carries_trained = [&](const std::string& file) {
    std::ifstream in(file);
    const nlohmann::json weights = nlohmann::json::parse(in);
    for (const ParameterSpec& p : g->parameters) {
      const Tensor& want = *ref->runner->Persistent(p.tensor);
      ASSERT_TRUE(weights.contains(p.tensor)) << p.tensor << " in " << file;
      const auto& got = weights[p.tensor];
      ASSERT_EQ(static_cast<int64_t>(got.size()), want.numel());
      for (int64_t i = 0; i < want.numel(); ++i) {
        ASSERT_NEAR(got[static_cast<size_t>(i)].get<double>(), want.f32()[i],
                    1e-4 + 1e-3 * std::abs(want.f32()[i]))
            << p.tensor << "[" << i << "] in " << file;
      }
    }
  };
  carries_trained(dump);
  // The same weights as NumPy arrays: numpy.load reads them, one array a
  // parameter, in its shape. (A job's weights to STEM.npz, dumped by numpy
  // to STEM.json; numpy's shapes by name, "" where either step failed.)
  auto export_npz = [&](const std::string& job, const std::string& stem) -> std::string {
    absl::StatusOr<CommandResult> e =
        cluster_.Quiltctl({"export", job, "-o", cluster_.dir().File(stem + ".npz")});
    if (!e.ok() || e->exit_code != 0) {
      ADD_FAILURE() << "export of " << job << ": " << (e.ok() ? e->err : e.status().ToString());
      return "";
    }
    absl::StatusOr<CommandResult> dumped = RunCommand(
        {"/usr/bin/python3", "-c",
         "import sys, json, numpy as np\n"
         "a = np.load(sys.argv[1])\n"
         "json.dump({k: v.ravel().tolist() for k, v in a.items()}, open(sys.argv[2], 'w'))\n"
         "print(json.dumps({k: list(v.shape) for k, v in a.items()}))\n",
         cluster_.dir().File(stem + ".npz"), cluster_.dir().File(stem + ".json")},
        absl::Seconds(60));
    if (!dumped.ok() || dumped->exit_code != 0) {
      ADD_FAILURE() << "numpy: " << (dumped.ok() ? dumped->err : dumped.status().ToString());
      return "";
    }
    return dumped->out;
  };
  const std::string shapes_out = export_npz(id, "trained");
  ASSERT_FALSE(shapes_out.empty());
  carries_trained(cluster_.dir().File("trained.json"));
  const nlohmann::json shapes = nlohmann::json::parse(shapes_out);
  EXPECT_EQ(shapes.size(), g->parameters.size()) << shapes_out;
  for (const ParameterSpec& p : g->parameters) {
    EXPECT_EQ(shapes.value(p.tensor, std::vector<int64_t>{}),
              ref->runner->Persistent(p.tensor)->dims())
        << p.tensor;
  }
  // A job started from those weights (a step at a learning rate too small
  // to move them) holds them: its own export carries the first job's
  // trained values, not the model's initial ones.
  std::vector<std::string> warm = SubmitArgs(cluster_.dir().File("ckpt-warm"), 1, "dp-even-ring");
  for (size_t i = 0; i + 1 < warm.size(); ++i) {
    if (warm[i] == "--lr") warm[i + 1] = "1e-30";
    if (warm[i] == "--checkpoint-every") warm[i + 1] = "0";
  }
  warm.insert(warm.end(), {"--init-weights", cluster_.dir().File("trained.npz")});
  const std::string warm_id = Submit(warm);
  ASSERT_FALSE(warm_id.empty());
  absl::StatusOr<CommandResult> warm_watched = cluster_.Quiltctl({"watch", warm_id});
  ASSERT_THAT(warm_watched.status(), IsOk());
  ASSERT_EQ(warm_watched->exit_code, 0) << warm_watched->err << cluster_.Log("worker-a");
  ASSERT_FALSE(export_npz(warm_id, "warm").empty());
  carries_trained(cluster_.dir().File("warm.json"));
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

// A job that keeps its newest two checkpoints ends with those two; the
// last one holds its trained parameters.
TEST_F(Jobs, AJobKeepingItsNewestCheckpointsEndsWithThoseAlone) {
  const std::string checkpoints = cluster_.dir().File("ckpt");
  std::vector<std::string> args = SubmitArgs(checkpoints, kSteps, "dp-even-ring");
  *std::next(std::find(args.begin(), args.end(), "--checkpoint-every")) = "1";
  args.insert(args.end(), {"--keep-last-checkpoints", "2"});
  const std::string id = Submit(args);
  ASSERT_FALSE(id.empty());
  absl::StatusOr<CommandResult> watched = cluster_.Quiltctl({"watch", id});
  ASSERT_THAT(watched.status(), IsOk());
  ASSERT_EQ(watched->exit_code, 0) << watched->out << watched->err;
  const std::string dir = checkpoints + "/" + id;
  const std::set<std::string> want = {absl::StrFormat("step-%08d", kSteps - 1),
                                      absl::StrFormat("step-%08d", kSteps)};
  std::set<std::string> have;
  for (int i = 0; i < 200 && have != want; ++i) {  // (the last pruning follows the end)
    have.clear();
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      have.insert(e.path().filename().string());
    }
    if (have != want) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(have, want) << cluster_.Log("coordinator");
  absl::StatusOr<Checkpoint> ckpt = ReadLatestCheckpoint(dir, 2);
  ASSERT_THAT(ckpt.status(), IsOk());
  EXPECT_EQ(ckpt->step, kSteps);
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
