// Transport security of Quilt's gRPC API: TLS and a shared client token.
// A coordinator given a certificate and key serves over TLS; given a token
// too, every call must carry it ("authorization: Bearer <token>", checked
// in constant time) or is refused UNAUTHENTICATED before any handler runs.
// Clients (workers, executors, quiltctl) trust the CA file they are given
// and send the token; without a CA file they speak plaintext, which the
// daemons allow on loopback only. A process holds one client identity
// (SetClientSecurity), which every channel it makes uses.
#ifndef QUILT_SRC_RPC_SECURITY_H_
#define QUILT_SRC_RPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace quilt::rpc {

struct ServerSecurity {
  std::string cert_pem, key_pem;  // empty: plaintext
  std::string token;              // empty: no token asked
};

struct ClientSecurity {
  std::string ca_pem;  // empty: plaintext
  std::string token;   // sent with every call (TLS only)
  // The name the server's certificate must carry, when it is not the
  // address's host (e.g. a certificate for the cluster's DNS name reached
  // by IP).
  std::string server_name;
};

// From PEM files and a token file (its first line; empty paths: none).
// Errors: INVALID_ARGUMENT naming the file and the problem (unreadable,
// not PEM, a key without a certificate, a token without TLS, an empty or
// multi-line token).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& token_file);
absl::StatusOr<ClientSecurity> LoadClientSecurity(const std::string& ca_file,
                                                  const std::string& token_file,
                                                  const std::string& server_name);

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerSecurity& security);

// The identity every channel of this process uses (MakeChannel); plaintext
// until set.
void SetClientSecurity(ClientSecurity security);
ClientSecurity CurrentClientSecurity();

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_SECURITY_H_
