// The fixture of the job tests through the whole service (job_e2e_test,
// job_recovery_test): a coordinator and two workers on loopback (one
// emulated 2x slower) driven through quiltctl; the MLP fixture's job as
// quiltctl submit flags (SubmitArgs) and trained on one device in this
// process (SingleDeviceRun); a job's losses (Losses).
#ifndef QUILT_TEST_INTEGRATION_JOBS_FIXTURE_H_
#define QUILT_TEST_INTEGRATION_JOBS_FIXTURE_H_

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/job_model.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"
#include "test/integration/cluster_fixture.h"

namespace quilt::testing {

constexpr int64_t kBatch = 16;
constexpr int64_t kSteps = 8;

inline std::string Fixture(const std::string& file) {
  return RunfilePath("test/fixtures/mlp/" + file);
}

// The flags quiltctl submit gets, and the same job as a JobSpec.
inline std::vector<std::string> SubmitArgs(const std::string& checkpoints, int64_t steps,
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

// A job's losses, from step 1 (quiltctl losses -o json; NaN for lost).
inline std::vector<double> Losses(LocalCluster& cluster, const std::string& id) {
  absl::StatusOr<CommandResult> r = cluster.Quiltctl({"losses", id, "-o", "json"});
  std::vector<double> out;
  if (!r.ok() || r->exit_code != 0) return out;
  const nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  if (!j.contains("losses")) return out;
  for (const nlohmann::json& l : j["losses"]) out.push_back(l.is_number() ? l.get<double>() : NAN);
  return out;
}

}  // namespace quilt::testing

#endif  // QUILT_TEST_INTEGRATION_JOBS_FIXTURE_H_
