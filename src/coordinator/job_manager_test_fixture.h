// The fixture of the JobManager tests: a coordinator store in a temporary
// directory, a node registry and a job manager on a fake clock, with
// helpers that add jobs and send heartbeats with task reports.
#ifndef QUILT_SRC_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
#define QUILT_SRC_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/fake_clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/job_manager.h"
#include "src/coordinator/store/sqlite_store.h"
#include "src/testing/node_info.h"
#include "src/testing/temp_dir.h"

namespace quilt {

using quilt::v1::HeartbeatRequest;
using quilt::v1::HeartbeatResponse;
using quilt::v1::TaskReport;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

inline quilt::v1::NodeInfo Info(const std::string& id) { return testing::CpuNodeInfo(id); }

inline TaskReport Report(const std::string& job, quilt::v1::TaskState state, int64_t first,
                         std::vector<double> losses) {
  TaskReport r;
  r.set_job_id(job);
  r.set_state(state);
  r.set_first_step(first);
  r.set_step(first + static_cast<int64_t>(losses.size()) - 1);
  for (double l : losses) {
    r.add_loss_parts(l);
    r.add_step_times_s(0.5);
  }
  return r;
}

class JobManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  void Reopen() {
    jobs_.reset();
    registry_.reset();
    store_.reset();
    auto store = SqliteStore::Open(dir_.File("c.db"));
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    LivenessOptions o;
    o.heartbeat_period = absl::Seconds(1);
    o.not_ready_after = absl::Seconds(5);
    o.down_after = absl::Seconds(30);
    registry_ = std::make_unique<NodeRegistry>(&clock_, store_.get(), o);
    ASSERT_THAT(registry_->Load(), IsOk());
    jobs_ = std::make_unique<JobManager>(store_.get(), registry_.get(), &clock_, "/ckpt");
    ASSERT_THAT(jobs_->Load(), IsOk());
  }

  // A job of `steps` steps on nodes a and b.
  static NewJob OnAB(int64_t steps) {
    NewJob n;
    n.spec.set_steps(steps);
    n.program = "program-bytes";
    n.world = {"a", "b"};
    return n;
  }

  std::string AddJob(int64_t steps = 3, int max_restarts = 0) {
    NewJob n;
    n.spec.set_name("j");
    n.spec.set_steps(steps);
    n.spec.set_max_restarts(max_restarts);
    n.spec.set_global_batch(8);
    n.program = "program-bytes";
    n.world = {"a", "b"};
    n.strategy = "dp-even-ring";
    n.predicted_step_time_s = 0.25;
    absl::StatusOr<std::string> id = jobs_->Add(std::move(n));
    EXPECT_THAT(id, IsOk());
    return *id;
  }

  // A job of 100 steps on nodes a, b and c.
  // Nodes a, b and c registered (incarnations 1, 2 and 3).
  void RegisterABC() {
    ASSERT_THAT(registry_->Register(Info("a"), 1), IsOk());
    ASSERT_THAT(registry_->Register(Info("b"), 2), IsOk());
    ASSERT_THAT(registry_->Register(Info("c"), 3), IsOk());
  }

  // a's and b's executors of job `id` failed at step 2, each because the
  // other did (c's sent nothing).
  void AAndBBlameEachOther(const std::string& id) {
    TaskReport r = Report(id, quilt::v1::TASK_STATE_FAILED, 2, {});
    r.set_message("receive from rank 1 (b) (tag 0x5, 64 bytes): the peer failed");
    Beat("a", {r});
    r.set_message("receive from rank 0 (a) (tag 0x5, 64 bytes): the peer failed");
    Beat("b", {r});
  }

  std::string AddJobOnABC() {
    NewJob n;
    n.spec.set_steps(100);
    n.program = "program-bytes";
    n.world = {"a", "b", "c"};
    absl::StatusOr<std::string> id = jobs_->Add(std::move(n));
    EXPECT_THAT(id, IsOk());
    return id.ok() ? *id : "";
  }

  HeartbeatResponse Beat(const std::string& node, std::vector<TaskReport> reports = {}) {
    HeartbeatRequest req;
    req.set_node_id(node);
    for (auto& r : reports) *req.add_tasks() = r;
    HeartbeatResponse resp;
    jobs_->OnHeartbeat(req, &resp);
    return resp;
  }

  quilt::v1::JobStatus Status(const std::string& id) {
    absl::StatusOr<quilt::v1::JobStatus> s = jobs_->Get(id);
    EXPECT_THAT(s, IsOk());
    return *s;
  }

  testing::TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<NodeRegistry> registry_;
  std::unique_ptr<JobManager> jobs_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_MANAGER_TEST_FIXTURE_H_
