// Transport security of Quilt's gRPC API: TLS, client tokens and client
// certificates. A coordinator given a certificate and key serves over TLS;
// given tokens too, every call must carry one ("authorization: Bearer
// <token>", checked in constant time) or come from a certificate client
// of the tokens file, or is refused UNAUTHENTICATED before any handler
// runs, and one whose client's role does not allow the method (access.h)
// is refused PERMISSION_DENIED, naming the client and its role.
// Given a client CA too (mutual TLS), the coordinator completes a
// handshake only with clients that present a certificate that CA signed;
// with no tokens asked, such a client is an admin named by its
// certificate's common name; with tokens a call's token names its client
// (the certificate is a second factor), and a call without one is the
// tokens file's certificate client of that common name.
// Clients (workers, executors, quiltctl) trust the CA file they are given,
// present their certificate where they have one and send the token;
// without a CA file they speak plaintext, which the daemons allow on
// loopback only. A process holds one client identity (SetClientSecurity),
// which every channel it makes uses.
#ifndef QUILT_SRC_RPC_SECURITY_H_
#define QUILT_SRC_RPC_SECURITY_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/rpc/access.h"

namespace quilt::rpc {

class TokenChecker;

struct ServerSecurity {
  std::string cert_pem, key_pem;     // empty: plaintext
  std::string client_ca_pem;         // empty: no client certificate asked
  std::vector<ClientToken> clients;  // empty: no token asked
  // The checker of `clients` the server installs (made there if null);
  // kept by the owner to replace the clients while the server runs.
  std::shared_ptr<TokenChecker> checker;
};

struct ClientSecurity {
  std::string ca_pem;  // empty: plaintext
  std::string token;   // sent with every call (TLS only)
  // The client's certificate and key, presented in the handshake (TLS
  // only; empty: none).
  std::string cert_pem, key_pem;
  // The name the server's certificate must carry, when it is not the
  // address's host (e.g. a certificate for the cluster's DNS name reached
  // by IP).
  std::string server_name;
};

// From PEM files, a token file (its first line: an admin's token, named
// "token"), a tokens file (access.h) and a client CA file (empty paths:
// none). Errors: INVALID_ARGUMENT naming the file and the problem
// (unreadable, not PEM, a key without a certificate or not its key, a
// certificate out of its validity dates, tokens or a client CA without
// TLS, an empty or multi-line token, the token file's token in the tokens
// file too).
absl::StatusOr<ServerSecurity> LoadServerSecurity(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& token_file,
                                                  const std::string& tokens_file = "",
                                                  const std::string& client_ca_file = "");
// The client's side: the CA to trust, its token, the server's name, its
// own certificate and key (mutual TLS; both or neither). Errors as above.
absl::StatusOr<ClientSecurity> LoadClientSecurity(const std::string& ca_file,
                                                  const std::string& token_file,
                                                  const std::string& server_name,
                                                  const std::string& cert_file = "",
                                                  const std::string& key_file = "");

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerSecurity& security);

// What ServerCredentials installs where there are clients: a call's token
// (or, with none, its certificate) to its client, the client's role against
// the call's method (":path"). Replace() swaps the clients while the
// server runs (calls under way finish with the clients they began with).
// Thread-safe.
class TokenChecker : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenChecker(std::vector<ClientToken> clients) { Replace(std::move(clients)); }
  void Replace(std::vector<ClientToken> clients);
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed, OutputMetadata* response) override;

 private:
  using Clients = std::vector<ClientToken>;  // tokens as "Bearer <token>"
  std::shared_ptr<const Clients> Current() const;
  mutable std::mutex mu_;
  std::shared_ptr<const Clients> clients_;
};
std::shared_ptr<TokenChecker> MakeTokenChecker(std::vector<ClientToken> clients);

// The auth-context property that names the call's client (its tokens-file
// name; "token" for token_file's).
inline constexpr char kClientProperty[] = "quilt-client";
// The name of the client that made the call: its token's (kClientProperty),
// else its certificate's common name (mutual TLS); empty where the API asks
// neither.
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
