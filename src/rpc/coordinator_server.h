// The coordinator's gRPC front: ClusterService, AdminService, JobService and
// health,
// bound to one address and backed by a Coordinator.
#ifndef QUILT_SRC_RPC_COORDINATOR_SERVER_H_
#define QUILT_SRC_RPC_COORDINATOR_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/coordinator/coordinator.h"

namespace quilt::rpc {

class GrpcServer;
class ClusterServiceImpl;
class AdminServiceImpl;
class JobServiceImpl;

class CoordinatorServer {
 public:
  // Binds config().listen_address. Errors: as GrpcServer::Start.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Coordinator* coordinator);
  ~CoordinatorServer();

  const std::string& address() const;
  // Health NOT_SERVING, then drain in-flight calls for up to `drain`.
  void Shutdown(absl::Duration drain);

 private:
  CoordinatorServer();
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<GrpcServer> server_;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_COORDINATOR_SERVER_H_
