#include "src/rpc/security.h"

#include <grpcpp/security/auth_metadata_processor.h>

#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/rpc/pem_check.h"

namespace quilt::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what, const char* marker) {
  absl::StatusOr<std::string> pem = ReadFile(path);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " cannot be read: ", pem.status().message()));
  }
  if (!absl::StrContains(*pem, "-----BEGIN ") || !absl::StrContains(*pem, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " is not PEM (no \"-----BEGIN …", marker, "\")"));
  }
  return pem;
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token file ", path, " cannot be read: ", text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  RETURN_IF_ERROR(CheckToken(token, "the token file " + path));
  return token;
}

// Constant time in the token's content (not its length).
bool SameToken(grpc::string_ref got, const std::string& want) {
  if (got.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned char>(got.data()[i]) ^ static_cast<unsigned char>(want[i]);
  }
  return diff == 0;
}

std::mutex& ClientMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

ClientSecurity& ClientIdentity() {
  static auto* identity = new ClientSecurity();
  return *identity;
}

// The certificate client (no token) the peer's certificate names, if any.
const ClientToken* CertificateClient(const std::vector<ClientToken>& clients,
                                     const grpc::AuthContext& context) {
  std::vector<grpc::string_ref> cn = context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  if (cn.empty()) return nullptr;
  for (const ClientToken& c : clients) {
    if (c.token.empty() && cn[0] == c.name) return &c;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<ServerSecurity> LoadServerSecurity(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& token_file,
                                                  const std::string& tokens_file,
                                                  const std::string& client_ca_file) {
  ServerSecurity s;
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together: TLS needs the certificate and its key");
  }
  if (!cert_file.empty()) {
    ASSIGN_OR_RETURN(s.cert_pem, ReadPem(cert_file, "certificate", "CERTIFICATE"));
    ASSIGN_OR_RETURN(s.key_pem, ReadPem(key_file, "key", "PRIVATE KEY"));
    RETURN_IF_ERROR(CheckCertificateAndKey(s.cert_pem, cert_file, s.key_pem, key_file));
  }
  if (!client_ca_file.empty()) {
    if (cert_file.empty()) {
      return absl::InvalidArgumentError(
          "tls_client_ca_file (client certificates) needs TLS (tls_cert_file, tls_key_file)");
    }
    ASSIGN_OR_RETURN(s.client_ca_pem, ReadPem(client_ca_file, "client CA file", "CERTIFICATE"));
    RETURN_IF_ERROR(CheckCaCertificates(s.client_ca_pem, client_ca_file, "client CA file"));
  }
  if ((!token_file.empty() || !tokens_file.empty()) && cert_file.empty()) {
    return absl::InvalidArgumentError(
        "client tokens (token_file, tokens_file) need TLS (tls_cert_file, tls_key_file): over "
        "plaintext anyone on the path could read them");
  }
  if (!token_file.empty()) {
    ClientToken admin;
    admin.name = "token";
    ASSIGN_OR_RETURN(admin.token, ReadToken(token_file));
    RETURN_IF_ERROR(CheckServerToken(admin.token, "the token file " + token_file));
    s.clients.push_back(std::move(admin));
  }
  if (!tokens_file.empty()) {
    ASSIGN_OR_RETURN(std::vector<ClientToken> more, LoadTokensFile(tokens_file));
    for (ClientToken& c : more) {
      if (!token_file.empty() && !c.token.empty() && c.token == s.clients.front().token) {
        return absl::InvalidArgumentError(absl::StrCat("the tokens file ", tokens_file, " gives '",
                                                       c.name, "' the token of token_file ",
                                                       token_file));
      }
      if (!token_file.empty() && c.name == s.clients.front().name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the tokens file ", tokens_file, " names a client 'token', the name of token_file ",
            token_file, "'s client: pick another"));
      }
      if (c.token.empty() && s.client_ca_pem.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the tokens file ", tokens_file, " names '", c.name,
                         "' a certificate client, but no client certificates are asked for "
                         "(tls_client_ca_file)"));
      }
      s.clients.push_back(std::move(c));
    }
  }
  return s;
}

absl::StatusOr<ClientSecurity> LoadClientSecurity(const std::string& ca_file,
                                                  const std::string& token_file,
                                                  const std::string& server_name,
                                                  const std::string& cert_file,
                                                  const std::string& key_file) {
  ClientSecurity s;
  s.server_name = server_name;
  if (!ca_file.empty()) {
    ASSIGN_OR_RETURN(s.ca_pem, ReadPem(ca_file, "CA file", "CERTIFICATE"));
    RETURN_IF_ERROR(CheckCaCertificates(s.ca_pem, ca_file, "CA file"));
  }
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate and its key go together: give both or neither");
  }
  if (!cert_file.empty()) {
    if (ca_file.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs TLS (a CA file to trust the coordinator by)");
    }
    ASSIGN_OR_RETURN(s.cert_pem, ReadPem(cert_file, "certificate", "CERTIFICATE"));
    ASSIGN_OR_RETURN(s.key_pem, ReadPem(key_file, "key", "PRIVATE KEY"));
    RETURN_IF_ERROR(CheckCertificateAndKey(s.cert_pem, cert_file, s.key_pem, key_file));
  }
  if (!token_file.empty()) {
    if (ca_file.empty()) {
      return absl::InvalidArgumentError(
          "a client token needs TLS (a CA file to trust the coordinator by): over plaintext "
          "anyone on the path could read it");
    }
    ASSIGN_OR_RETURN(s.token, ReadToken(token_file));
  }
  if (!server_name.empty() && ca_file.empty()) {
    return absl::InvalidArgumentError("a TLS server name needs TLS (a CA file)");
  }
  return s;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const ServerSecurity& security) {
  if (security.cert_pem.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      security.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                     : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = security.client_ca_pem;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(options);
  if (!security.clients.empty()) {
    creds->SetAuthMetadataProcessor(
        security.checker != nullptr ? security.checker : MakeTokenChecker(security.clients));
  }
  return creds;
}

void TokenChecker::Replace(std::vector<ClientToken> clients) {
  for (ClientToken& c : clients) {
    if (!c.token.empty()) c.token = "Bearer " + c.token;
  }
  auto next = std::make_shared<const Clients>(std::move(clients));
  std::lock_guard<std::mutex> lock(mu_);
  clients_ = std::move(next);
}

std::shared_ptr<const TokenChecker::Clients> TokenChecker::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clients_;
}

// The client a call's token names, then whether its role allows the
// method. The client's name goes into the call's auth context
// (kClientProperty) for the handlers.
grpc::Status TokenChecker::Process(const InputMetadata& metadata, grpc::AuthContext* context,
                                   OutputMetadata* consumed, OutputMetadata* /*response*/) {
  const std::shared_ptr<const Clients> clients = Current();
  auto it = metadata.find("authorization");
  const ClientToken* client = nullptr;
  if (it == metadata.end()) {
    // No token: the client its certificate names, if the tokens file
    // lists it as a certificate client (gRPC gives the subject's first
    // common name).
    client = CertificateClient(*clients, *context);
    if (client == nullptr) {
      std::vector<grpc::string_ref> cn = context->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
      return grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          !cn.empty()
              ? absl::StrCat("this coordinator asks for a client token (quiltctl --token-file, "
                             "a worker's token_file); a client certificate does instead only "
                             "where its tokens file names it as one (this one's common name: '",
                             absl::string_view(cn[0].data(), cn[0].size()), "')")
              : "this coordinator asks for a client token (quiltctl --token-file, a worker's "
                "token_file)");
    }
  } else {
    // Every token compared, in constant time each: which one matched (if
    // any) takes no longer to find.
    for (const ClientToken& c : *clients) {
      if (!c.token.empty() && SameToken(it->second, c.token)) client = &c;
    }
    if (client == nullptr) {
      const ClientToken* by_certificate = CertificateClient(*clients, *context);
      return grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          by_certificate == nullptr
              ? std::string("the client token is not this coordinator's")
              : absl::StrCat("the client token is not this coordinator's (the client "
                             "certificate is '",
                             by_certificate->name,
                             "''s, a certificate client, which sends no token: drop "
                             "--token-file, $QUILT_TOKEN_FILE or token_file)"));
    }
  }
  auto path = metadata.find(":path");
  const std::string method = path == metadata.end()
                                 ? std::string()
                                 : std::string(path->second.data(), path->second.size());
  if (!RoleAllows(client->role, method)) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("the client '", client->name, "' (role ", RoleName(client->role),
                     ") may not call ", method.empty() ? "this method" : method.substr(1)));
  }
  context->AddProperty(kClientProperty, client->name);
  for (const std::string& pattern : client->nodes) context->AddProperty(kNodesProperty, pattern);
  if (it != metadata.end()) {
    consumed->insert(std::make_pair(std::string(it->first.data(), it->first.size()),
                                    std::string(it->second.data(), it->second.size())));
  }
  return grpc::Status::OK;
}

std::shared_ptr<TokenChecker> MakeTokenChecker(std::vector<ClientToken> clients) {
  return std::make_shared<TokenChecker>(std::move(clients));
}

std::string CallerName(const grpc::ServerContextBase* ctx) {
  if (ctx == nullptr) return "";
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr) return "";
  std::vector<grpc::string_ref> names = auth->FindPropertyValues(kClientProperty);
  if (names.empty()) names = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  return names.empty() ? "" : std::string(names.front().data(), names.front().size());
}

std::vector<std::string> CallerNodes(const grpc::ServerContextBase* ctx) {
  std::vector<std::string> patterns;
  if (ctx == nullptr) return patterns;
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr) return patterns;
  for (const grpc::string_ref& p : auth->FindPropertyValues(kNodesProperty)) {
    patterns.emplace_back(p.data(), p.size());
  }
  return patterns;
}

absl::Status CheckCallerNode(const grpc::ServerContextBase* ctx, const std::string& node) {
  const std::vector<std::string> patterns = CallerNodes(ctx);
  if (NodeMatches(patterns, node)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the client '", CallerName(ctx), "' acts only for nodes ",
                   absl::StrJoin(patterns, ","), ", not '", node, "'"));
}

void SetClientSecurity(ClientSecurity security) {
  std::lock_guard<std::mutex> lock(ClientMutex());
  ClientIdentity() = std::move(security);
}

ClientSecurity CurrentClientSecurity() {
  std::lock_guard<std::mutex> lock(ClientMutex());
  return ClientIdentity();
}

}  // namespace quilt::rpc
