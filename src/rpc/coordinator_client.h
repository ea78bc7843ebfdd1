// gRPC clients of the coordinator: CoordinatorClient (the worker's
// CoordinatorInterface), AdminClient and JobClient (quiltctl). Every call has a
// deadline; transport failures come back as UNAVAILABLE / DEADLINE_EXCEEDED
// with the coordinator's address in the message.
#ifndef QUILT_SRC_RPC_COORDINATOR_CLIENT_H_
#define QUILT_SRC_RPC_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"
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

  const std::string& address() const { return address_; }

 private:
  struct Stubs;
  std::string address_;
  absl::Duration timeout_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_COORDINATOR_CLIENT_H_
