// The coordinator's durable state: what must survive a coordinator restart.
// The node registry, the cluster event log and the jobs. The interface keeps the
// domain code independent of the storage engine (SQLite by default).
#ifndef QUILT_SRC_COORDINATOR_STORE_STORE_H_
#define QUILT_SRC_COORDINATOR_STORE_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/quilt/v1/cluster.pb.h"
#include "proto/quilt/v1/job.pb.h"

namespace quilt {

class CoordinatorStore {
 public:
  virtual ~CoordinatorStore() = default;

  // Inserts or replaces the node's record (keyed by info.node_id).
  virtual absl::Status PutNode(const quilt::v1::NodeStatus& node) = 0;
  virtual absl::StatusOr<std::vector<quilt::v1::NodeStatus>> ListNodes() = 0;
  // Removes the node's record (nothing when there is none).
  virtual absl::Status DeleteNode(const std::string& node_id) = 0;

  // Appends an event; only the newest `kMaxEvents` are kept.
  virtual absl::Status AppendEvent(const quilt::v1::ClusterEvent& event) = 0;
  // Newest first, at most `max`.
  virtual absl::StatusOr<std::vector<quilt::v1::ClusterEvent>> RecentEvents(int max) = 0;

  // A job's model (its spec's ONNX bytes, when it has them), the weights
  // it starts from (its spec's initial_weights, when it has them) and its
  // program: large and written once, so kept apart from the job's record,
  // which is rewritten as the job runs and read whole at start-up.
  struct JobModel {
    std::string onnx;
    std::string program;
    std::string weights;
  };
  // Stores a new job: its record (without the model's bytes) and its
  // model, in one transaction.
  virtual absl::Status AddJob(const quilt::v1::JobRecord& job, const JobModel& model) = 0;
  // A queued job that starts: replaces its record and the program of its
  // model (the ONNX bytes stay), in one transaction. Errors: NOT_FOUND.
  virtual absl::Status StartJob(const quilt::v1::JobRecord& job, const std::string& program) = 0;
  // Losses of consecutive steps from `first_step` (1-based).
  struct LossChunk {
    int64_t first_step = 0;
    std::vector<double> losses;
  };
  // Inserts or replaces the job's record (keyed by status.job_id; without
  // the model's bytes and the losses) and appends `losses` to the job's
  // loss history, in one transaction.
  virtual absl::Status PutJob(const quilt::v1::JobRecord& job, const LossChunk& losses) = 0;
  // The job's loss history, by step from step 1 (steps never stored: NaN).
  virtual absl::StatusOr<std::vector<double>> GetJobLosses(const std::string& job_id) = 0;
  // The last step of the job's loss history (0: none), without reading it.
  virtual absl::StatusOr<int64_t> LastLossStep(const std::string& job_id) = 0;
  // Every job, oldest first (without their models).
  virtual absl::StatusOr<std::vector<quilt::v1::JobRecord>> ListJobs() = 0;
  // Errors: NOT_FOUND.
  virtual absl::StatusOr<JobModel> GetJobModel(const std::string& job_id) = 0;
  // Removes the job's record, model and losses (nothing when there is none).
  virtual absl::Status DeleteJob(const std::string& job_id) = 0;

  static constexpr int kMaxEvents = 1000;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_STORE_STORE_H_
