// CoordinatorStore on an embedded SQLite database (one file under the
// coordinator's state directory). Records are the API protos, serialized,
// next to the columns they are looked up by. The schema is versioned
// (PRAGMA user_version) and migrated forward at open. Thread-safe.
#ifndef QUILT_SRC_COORDINATOR_STORE_SQLITE_STORE_H_
#define QUILT_SRC_COORDINATOR_STORE_SQLITE_STORE_H_

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "src/coordinator/store/sqlite_db.h"
#include "src/coordinator/store/store.h"

namespace quilt {

class SqliteStore final : public CoordinatorStore {
 public:
  // Opens or creates `path`. Errors: as SqliteDb::Open, FAILED_PRECONDITION
  // for a database written by a newer Quilt.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);

  absl::Status PutNode(const quilt::v1::NodeStatus& node) override;
  absl::Status DeleteNode(const std::string& node_id) override;
  absl::StatusOr<std::vector<quilt::v1::NodeStatus>> ListNodes() override;
  absl::Status AppendEvent(const quilt::v1::ClusterEvent& event) override;
  absl::Status AddJob(const quilt::v1::JobRecord& job, const JobModel& model) override;
  absl::Status StartJob(const quilt::v1::JobRecord& job, const std::string& program) override;
  absl::Status PutJob(const quilt::v1::JobRecord& job, const LossChunk& losses) override;
  absl::StatusOr<std::vector<double>> GetJobLosses(const std::string& job_id) override;
  absl::StatusOr<int64_t> LastLossStep(const std::string& job_id) override;
  absl::StatusOr<std::vector<quilt::v1::JobRecord>> ListJobs() override;
  absl::StatusOr<JobModel> GetJobModel(const std::string& job_id) override;
  absl::Status DeleteJob(const std::string& job_id) override;
  absl::StatusOr<std::vector<quilt::v1::ClusterEvent>> RecentEvents(int max) override;

 private:
  explicit SqliteStore(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
  absl::Status Migrate();

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_STORE_SQLITE_STORE_H_
