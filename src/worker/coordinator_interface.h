// The worker's seam to the coordinator: the calls a worker makes, in domain
// terms (request/response messages, absl::Status). src/rpc/ implements it
// over gRPC; tests may use the real implementation against an in-process
// coordinator.
#ifndef QUILT_SRC_WORKER_COORDINATOR_INTERFACE_H_
#define QUILT_SRC_WORKER_COORDINATOR_INTERFACE_H_

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/quilt/v1/services.pb.h"

namespace quilt {

class CoordinatorInterface {
 public:
  virtual ~CoordinatorInterface() = default;

  // Errors as ClusterService.Register, plus UNAVAILABLE / DEADLINE_EXCEEDED
  // when the coordinator cannot be reached.
  virtual absl::StatusOr<quilt::v1::RegisterResponse> Register(
      const quilt::v1::RegisterRequest& request) = 0;
  // Errors as ClusterService.Heartbeat, plus transport errors.
  virtual absl::StatusOr<quilt::v1::HeartbeatResponse> Heartbeat(
      const quilt::v1::HeartbeatRequest& request) = 0;
  // After a call found the coordinator unreachable: waits until a
  // connection to it is up again, or `timeout`; whether it is up. Lets a
  // worker call again as soon as a restarted coordinator listens (the
  // transport's own retries wait for a next call and back off).
  virtual bool WaitForConnection(absl::Duration timeout) = 0;
};

}  // namespace quilt

#endif  // QUILT_SRC_WORKER_COORDINATOR_INTERFACE_H_
