#include "src/rpc/coordinator_server.h"

#include "src/common/status.h"
#include "src/rpc/admin_service.h"
#include "src/rpc/cluster_service.h"
#include "src/rpc/job_service.h"
#include "src/rpc/security.h"
#include "src/rpc/server.h"

namespace quilt::rpc {

CoordinatorServer::CoordinatorServer() = default;

CoordinatorServer::~CoordinatorServer() {
  if (jobs_) jobs_->Drain();
  if (server_) server_->Shutdown(absl::ZeroDuration());
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    Coordinator* coordinator) {
  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->cluster_ = std::make_unique<ClusterServiceImpl>(coordinator->registry(), coordinator->jobs(),
                                                     coordinator->links(), coordinator->profiles(),
                                                     coordinator->logs());
  s->admin_ = std::make_unique<AdminServiceImpl>(coordinator);
  s->jobs_ = std::make_unique<JobServiceImpl>(
      coordinator, static_cast<size_t>(coordinator->config().max_request_bytes));
  ServerOptions options;
  options.listen_address = coordinator->config().listen_address;
  options.max_request_bytes = coordinator->config().max_request_bytes;
  const CoordinatorConfig& c = coordinator->config();
  ASSIGN_OR_RETURN(options.security,
                   LoadServerSecurity(c.tls_cert_file, c.tls_key_file, c.token_file, c.tokens_file,
                                      c.tls_client_ca_file));
  if (!options.security.clients.empty()) {
    options.security.checker = MakeTokenChecker(options.security.clients);
    s->checker_ = options.security.checker;
  }
  s->config_ = c;
  ASSIGN_OR_RETURN(
      s->server_, GrpcServer::Start(options, {s->cluster_.get(), s->admin_.get(), s->jobs_.get()}));
  return s;
}

const std::string& CoordinatorServer::address() const { return server_->address(); }

absl::StatusOr<size_t> CoordinatorServer::ReloadClients() {
  if (checker_ == nullptr) {
    return absl::FailedPreconditionError(
        "the coordinator started without client tokens (token_file, tokens_file): restart it to "
        "ask for them");
  }
  const CoordinatorConfig& c = config_;
  ASSIGN_OR_RETURN(ServerSecurity reloaded,
                   LoadServerSecurity(c.tls_cert_file, c.tls_key_file, c.token_file, c.tokens_file,
                                      c.tls_client_ca_file));
  const size_t n = reloaded.clients.size();
  checker_->Replace(std::move(reloaded.clients));
  return n;
}

void CoordinatorServer::Shutdown(absl::Duration drain) {
  // Plans already accepted finish (their calls complete) before the server
  // stops; new ones are refused.
  jobs_->Drain();
  server_->Shutdown(drain);
}

}  // namespace quilt::rpc
