#include "src/rpc/server.h"

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "src/common/net.h"
#include "src/common/status.h"

namespace quilt::rpc {

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const ServerOptions& options, const std::vector<grpc::Service*>& services) {
  ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(options.listen_address));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address, ServerCredentials(options.security), &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_request_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_response_bytes));
  // A dead peer is noticed within ~30 s even without traffic.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // One process per address: fail instead of sharing the port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen_address,
        options.security.cert_pem.empty()
            ? " (address in use or not local?)"
            : " (address in use or not local, or the TLS certificate and key do not go "
              "together?)"));
  }
  const bool v6 = hp.host.find(':') != std::string::npos;
  server->address_ = v6 ? absl::StrCat("[", hp.host, "]:", port) : absl::StrCat(hp.host, ":", port);
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

void GrpcServer::SetServing(bool serving) {
  if (server_ && server_->GetHealthCheckService() != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(serving);
  }
}

void GrpcServer::Shutdown(absl::Duration drain) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  SetServing(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + drain));
  server_->Wait();
}

}  // namespace quilt::rpc
