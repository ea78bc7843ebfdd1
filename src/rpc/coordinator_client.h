// gRPC clients of the coordinator: CoordinatorClient (the worker's
// CoordinatorInterface), AdminClient and JobClient (quiltctl). Every call has a
// deadline; transport failures come back as UNAVAILABLE / DEADLINE_EXCEEDED
// with the coordinator's address in the message.
#ifndef QUILT_SRC_RPC_COORDINATOR_CLIENT_H_
#define QUILT_SRC_RPC_COORDINATOR_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"
#include "src/runtime/comm/rendezvous.h"
#include "src/worker/coordinator_interface.h"

namespace quilt::rpc {

class CoordinatorClient final : public CoordinatorInterface {
 public:
  CoordinatorClient(const std::string& address, absl::Duration timeout);
  ~CoordinatorClient() override;

  absl::StatusOr<quilt::v1::RegisterResponse> Register(
      const quilt::v1::RegisterRequest& request) override;
  absl::StatusOr<quilt::v1::HeartbeatResponse> Heartbeat(
      const quilt::v1::HeartbeatRequest& request) override;
  bool WaitForConnection(absl::Duration timeout) override;

 private:
  struct Stubs;
  std::string address_;
  absl::Duration timeout_;
  std::unique_ptr<Stubs> stubs_;
};

class AdminClient {
 public:
  AdminClient(const std::string& address, absl::Duration timeout);
  ~AdminClient();

  absl::StatusOr<quilt::v1::ClusterStatus> GetClusterStatus(
      const quilt::v1::GetClusterStatusRequest& request);
  absl::Status ForgetNode(const std::string& node_id);
  absl::StatusOr<quilt::v1::SetNodeDrainingResponse> SetNodeDraining(const std::string& node_id,
                                                                     bool draining);

  const std::string& address() const { return address_; }

 private:
  struct Stubs;
  std::string address_;
  absl::Duration timeout_;
  std::unique_ptr<Stubs> stubs_;
};

// quiltctl's JobService client. Calls fail fast when the coordinator is
// down.
class JobClient {
 public:
  JobClient(const std::string& address, absl::Duration timeout);
  ~JobClient();

  absl::StatusOr<quilt::v1::PlanReport> PlanJob(const quilt::v1::PlanJobRequest& request);
  absl::StatusOr<std::string> SubmitJob(const quilt::v1::JobSpec& spec);
  absl::StatusOr<quilt::v1::JobStatus> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<quilt::v1::JobStatus>> ListJobs();
  absl::Status CancelJob(const std::string& job_id, const std::string& reason);
  // The checkpoint directory removed (empty when kept or none).
  absl::StatusOr<std::string> DeleteJob(const std::string& job_id, bool keep_checkpoints);
  absl::StatusOr<quilt::v1::ExportJobResponse> ExportJob(
      const std::string& job_id, quilt::v1::ExportFormat format = quilt::v1::EXPORT_FORMAT_ONNX);
  // Trains an ended job on as a new one from its checkpoint (JobService.ResumeJob).
  // `strategy`: the new job's ("" = the old job's); `queue`: it queues.
  absl::StatusOr<quilt::v1::ResumeJobResponse> ResumeJob(const std::string& job_id,
                                                         const std::string& strategy,
                                                         bool queue = false);
  absl::StatusOr<quilt::v1::JobLosses> GetJobLosses(const std::string& job_id, int64_t from_step);
  // The end of the job's executor log on each of its nodes (or `node`'s);
  // with `offsets`, what those nodes wrote from them on; with `run`, the
  // end of that run of the job's executor on each node only (1 the first,
  // -1 the last).
  absl::StatusOr<quilt::v1::GetJobLogsResponse> GetJobLogs(
      const std::string& job_id, int lines, const std::string& node,
      const std::map<std::string, int64_t>& offsets = {}, int run = 0);
  // Streams the job's status to `on_status` until the job ends (OK) or the
  // stream fails; no deadline.
  absl::Status WatchJob(const std::string& job_id,
                        const std::function<void(const quilt::v1::JobStatus&)>& on_status);

  const std::string& address() const { return address_; }

 private:
  struct Stubs;
  std::string address_;
  absl::Duration timeout_;
  std::unique_ptr<Stubs> stubs_;
};

// The executors' rendezvous through the coordinator (ExchangeAddresses):
// publishes this rank's address and polls until every rank has published.
class CoordinatorRendezvous final : public Rendezvous {
 public:
  CoordinatorRendezvous(const std::string& address, std::string job_id);
  ~CoordinatorRendezvous() override;
  absl::StatusOr<std::vector<std::string>> Exchange(int rank, int size, const std::string& address,
                                                    absl::Duration timeout) override;

 private:
  struct Stubs;
  std::string address_;
  std::string job_id_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_COORDINATOR_CLIENT_H_
