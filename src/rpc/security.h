// Transport security of Quilt's gRPC API: TLS and client tokens. A
// coordinator given a certificate and key serves over TLS; given tokens
// too, every call must carry one ("authorization: Bearer <token>", checked
// in constant time) or is refused UNAUTHENTICATED before any handler runs,
// and one whose client's role does not allow the method (access.h) is
// refused PERMISSION_DENIED, naming the client and its role.
// Clients (workers, executors, quiltctl) trust the CA file they are given
// and send the token; without a CA file they speak plaintext, which the
// daemons allow on loopback only. A process holds one client identity
// (SetClientSecurity), which every channel it makes uses.
#ifndef QUILT_SRC_RPC_SECURITY_H_
#define QUILT_SRC_RPC_SECURITY_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/rpc/access.h"

namespace quilt::rpc {

struct ServerSecurity {
  std::string cert_pem, key_pem;     // empty: plaintext
  std::vector<ClientToken> clients;  // empty: no token asked
};

struct ClientSecurity {
  std::string ca_pem;  // empty: plaintext
  std::string token;   // sent with every call (TLS only)
  // The name the server's certificate must carry, when it is not the
  // address's host (e.g. a certificate for the cluster's DNS name reached
  // by IP).
  std::string server_name;
};

// From PEM files, a token file (its first line: an admin's token, named
// "token") and a tokens file (access.h; empty paths: none). Errors:
// INVALID_ARGUMENT naming the file and the problem (unreadable, not PEM, a
// key without a certificate, tokens without TLS, an empty or multi-line
// token, the token file's token in the tokens file too).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& token_file,
                                                  const std::string& tokens_file = "");
absl::StatusOr<ClientSecurity> LoadClientSecurity(const std::string& ca_file,
                                                  const std::string& token_file,
                                                  const std::string& server_name);

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerSecurity& security);

// What ServerCredentials installs where there are clients: a call's token
// to its client, the client's role against the call's method (":path").
std::shared_ptr<grpc::AuthMetadataProcessor> MakeTokenChecker(std::vector<ClientToken> clients);

// The auth-context property that names the call's client (its tokens-file
// name; "token" for token_file's).
inline constexpr char kClientProperty[] = "quilt-client";
// The name of the client that made the call (kClientProperty); empty where
// the API asks no token.
std::string CallerName(const grpc::ServerContextBase* ctx);
// The auth-context property that lists a worker client's node patterns.
inline constexpr char kNodesProperty[] = "quilt-nodes";
// The node patterns the call's client is bound to (empty: any node, or no
// token asked).
std::vector<std::string> CallerNodes(const grpc::ServerContextBase* ctx);
// OK where the call's client may act for `node` (no token asked, or a
// client bound to no nodes, or to a pattern `node` matches). Errors:
// PERMISSION_DENIED naming the client, its nodes and `node`.
absl::Status CheckCallerNode(const grpc::ServerContextBase* ctx, const std::string& node);

// The identity every channel of this process uses (MakeChannel); plaintext
// until set.
void SetClientSecurity(ClientSecurity security);
ClientSecurity CurrentClientSecurity();

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_SECURITY_H_
