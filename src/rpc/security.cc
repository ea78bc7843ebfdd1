#include "src/rpc/security.h"

#include <grpcpp/security/auth_metadata_processor.h>

#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "src/common/files.h"
#include "src/common/status.h"

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
  if (token.empty()) return absl::InvalidArgumentError("the token file " + path + " is empty");
  for (char c : token) {
    // A header value: printable ASCII, one line.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "the token file " + path +
          " must hold one token of printable characters without spaces (on one line)");
    }
  }
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

class TokenChecker : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenChecker(std::string token) : expected_("Bearer " + std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* consumed, OutputMetadata* /*response*/) override {
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "this coordinator asks for a client token (quiltctl --token-file, a "
                          "worker's token_file)");
    }
    if (!SameToken(it->second, expected_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the client token is not this coordinator's");
    }
    consumed->insert(std::make_pair(std::string(it->first.data(), it->first.size()),
                                    std::string(it->second.data(), it->second.size())));
    return grpc::Status::OK;
  }

 private:
  const std::string expected_;
};

std::mutex& ClientMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

ClientSecurity& ClientIdentity() {
  static auto* identity = new ClientSecurity();
  return *identity;
}

}  // namespace

absl::StatusOr<ServerSecurity> LoadServerSecurity(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& token_file) {
  ServerSecurity s;
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together: TLS needs the certificate and its key");
  }
  if (!cert_file.empty()) {
    ASSIGN_OR_RETURN(s.cert_pem, ReadPem(cert_file, "certificate", "CERTIFICATE"));
    ASSIGN_OR_RETURN(s.key_pem, ReadPem(key_file, "key", "PRIVATE KEY"));
  }
  if (!token_file.empty()) {
    if (cert_file.empty()) {
      return absl::InvalidArgumentError(
          "a client token (token_file) needs TLS (tls_cert_file, tls_key_file): over plaintext "
          "anyone on the path could read it");
    }
    ASSIGN_OR_RETURN(s.token, ReadToken(token_file));
  }
  return s;
}

absl::StatusOr<ClientSecurity> LoadClientSecurity(const std::string& ca_file,
                                                  const std::string& token_file,
                                                  const std::string& server_name) {
  ClientSecurity s;
  s.server_name = server_name;
  if (!ca_file.empty()) {
    ASSIGN_OR_RETURN(s.ca_pem, ReadPem(ca_file, "CA file", "CERTIFICATE"));
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
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(options);
  if (!security.token.empty()) {
    creds->SetAuthMetadataProcessor(std::make_shared<TokenChecker>(security.token));
  }
  return creds;
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
