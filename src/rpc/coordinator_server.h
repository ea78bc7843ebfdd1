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
class TokenChecker;
class ClusterServiceImpl;
class AdminServiceImpl;
class JobServiceImpl;

class CoordinatorServer {
 public:
  // Binds config().listen_address. Errors: as GrpcServer::Start.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(Coordinator* coordinator);
  ~CoordinatorServer();

  const std::string& address() const;
  // Reads token_file and tokens_file again (SIGHUP) and serves their
  // clients from the next call on; the number of clients. On an error the
  // clients stay as they were. Errors: LoadServerSecurity's,
  // FAILED_PRECONDITION where the coordinator asks no token (started
  // without token files: only a restart can begin asking).
  absl::StatusOr<size_t> ReloadClients();
  // Health NOT_SERVING, then drain in-flight calls for up to `drain`.
  void Shutdown(absl::Duration drain);

 private:
  CoordinatorServer();
  std::unique_ptr<ClusterServiceImpl> cluster_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<JobServiceImpl> jobs_;
  std::unique_ptr<GrpcServer> server_;
  CoordinatorConfig config_;
  std::shared_ptr<TokenChecker> checker_;  // null: no tokens asked
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_COORDINATOR_SERVER_H_
