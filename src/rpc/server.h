// A gRPC server on the callback API: binds one address, registers the given
// services and the standard grpc.health.v1 service, and drains on Shutdown.
#ifndef QUILT_SRC_RPC_SERVER_H_
#define QUILT_SRC_RPC_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/rpc/security.h"

namespace quilt::rpc {

// The largest response a server sends and a client takes (a trained model
// on export).
inline constexpr int64_t kMaxResponseBytes = int64_t{1} << 30;

struct ServerOptions {
  // host:port; port 0 picks a free port (see GrpcServer::address()).
  std::string listen_address;
  // Transport limit on one request; larger ones fail with RESOURCE_EXHAUSTED
  // before reaching a handler. Handlers apply tighter per-method limits.
  int64_t max_request_bytes = 64 << 20;
  // Largest response (e.g. a trained model on export).
  int64_t max_response_bytes = kMaxResponseBytes;
  // TLS and the client token (security.h); plaintext by default.
  ServerSecurity security;
};

class GrpcServer {
 public:
  // Errors: INVALID_ARGUMENT for a bad address, UNAVAILABLE when the address
  // cannot be bound (in use, not local).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const ServerOptions& options, const std::vector<grpc::Service*>& services);
  ~GrpcServer();

  // The bound address with the actual port.
  const std::string& address() const { return address_; }

  // Health: SERVING / NOT_SERVING for all services.
  void SetServing(bool serving);

  // Stops accepting calls, lets in-flight calls finish until `deadline`,
  // then cancels the rest. Idempotent.
  void Shutdown(absl::Duration drain);

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool shut_down_ = false;
};

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_SERVER_H_
