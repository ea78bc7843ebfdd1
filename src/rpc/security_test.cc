#include "src/rpc/security.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/subprocess.h"
#include "src/testing/temp_dir.h"

namespace quilt::rpc {
namespace {

using ::testing::HasSubstr;

std::string Tls(const std::string& file) {
  return testing::RunfilePath("test/fixtures/tls/" + file);
}

TEST(Security, LoadsPemAndATokenAndNamesWhatIsWrong) {
  absl::StatusOr<ServerSecurity> s =
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), Tls("token"));
  ASSERT_THAT(s.status(), IsOk());
  ASSERT_EQ(s->clients.size(), 1u);
  EXPECT_EQ(s->clients[0].token, "quilt-test-token-5b1f0e");  // (the trailing newline dropped)
  EXPECT_EQ(s->clients[0].role, Role::kAdmin);
  // With a tokens file: its clients beside token_file's admin; a tokens
  // file alone; either without TLS refused; the token file's token given
  // to a client of the tokens file refused.
  absl::StatusOr<ServerSecurity> both =
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), Tls("token"), Tls("tokens"));
  ASSERT_THAT(both.status(), IsOk());
  ASSERT_EQ(both->clients.size(), 6u);
  EXPECT_EQ(both->clients[3].name, "grafana");
  EXPECT_EQ(both->clients[3].role, Role::kViewer);
  absl::StatusOr<ServerSecurity> named =
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", Tls("tokens"));
  ASSERT_THAT(named.status(), IsOk());
  EXPECT_EQ(named->clients.size(), 5u);
  EXPECT_THAT(LoadServerSecurity("", "", "", Tls("tokens")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need TLS")));
  testing::TempDir taken;
  std::ofstream(taken.File("tokens")) << "x viewer quilt-test-token-5b1f0e\n";
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), Tls("token"), taken.File("tokens"))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gives 'x' the token of token_file")));
  EXPECT_THAT(s->cert_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  // A certificate for a key, a missing file, a token without TLS.
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.key"), Tls("server.key"), "").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(Tls("server.key") + " is not PEM")));
  EXPECT_THAT(LoadServerSecurity(Tls("server.pem"), "/nonexistent/key.pem", "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the key /nonexistent/key.pem cannot be read")));
  EXPECT_THAT(LoadServerSecurity("", "", Tls("token")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need TLS")));
  EXPECT_THAT(LoadClientSecurity("", Tls("token"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
  // Tokens are one printable word.
  testing::TempDir dir;
  std::ofstream(dir.File("empty")) << "\n";
  std::ofstream(dir.File("spaced")) << "two words\n";
  EXPECT_THAT(LoadClientSecurity(Tls("ca.pem"), dir.File("empty"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is empty")));
  EXPECT_THAT(LoadClientSecurity(Tls("ca.pem"), dir.File("spaced"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one token")));
  absl::StatusOr<ClientSecurity> c = LoadClientSecurity(Tls("ca.pem"), Tls("token"), "x.test");
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->server_name, "x.test");
}

// Mutual TLS: a client's certificate and key load together and are
// checked before any handshake (a key of another certificate, an expired
// certificate, a passphrase-protected key, one without the other, one
// without TLS); a coordinator's client CA needs TLS and a certificate;
// the server's own pair is checked the same way.
TEST(Security, ClientCertificatesAreCheckedWhenLoaded) {
  absl::StatusOr<ClientSecurity> c =
      LoadClientSecurity(Tls("ca.pem"), "", "", Tls("alice.pem"), Tls("alice.key"));
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_THAT(c->cert_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(c->key_pem, HasSubstr("PRIVATE KEY-----"));
  EXPECT_THAT(
      LoadClientSecurity(Tls("ca.pem"), "", "", Tls("alice.pem"), Tls("stranger.key")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the key " + Tls("stranger.key") + " is not the key of the certificate " +
                         Tls("alice.pem"))));
  EXPECT_THAT(
      LoadClientSecurity(Tls("ca.pem"), "", "", Tls("expired.pem"), Tls("alice.key")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("the certificate " + Tls("expired.pem") + " expired on ")));
  EXPECT_THAT(
      LoadClientSecurity(Tls("ca.pem"), "", "", Tls("alice.pem"), Tls("alice_encrypted.key"))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is protected by a passphrase")));
  EXPECT_THAT(LoadClientSecurity(Tls("ca.pem"), "", "", Tls("alice.pem"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("go together")));
  EXPECT_THAT(LoadClientSecurity("", "", "", Tls("alice.pem"), Tls("alice.key")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
  // A CA file must hold a certificate (a key is no CA).
  testing::TempDir dir;
  std::ofstream(dir.File("fake.pem")) << "-----BEGIN CERTIFICATE-----\nnot base64\n"
                                         "-----END CERTIFICATE-----\n";
  EXPECT_THAT(
      LoadClientSecurity(dir.File("fake.pem"), "", "").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the CA file " + dir.File("fake.pem") +
                                                             " holds no certificate that parses")));

  absl::StatusOr<ServerSecurity> s =
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", "", Tls("client_ca.pem"));
  ASSERT_THAT(s.status(), IsOk());
  EXPECT_THAT(s->client_ca_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_TRUE(s->clients.empty());
  EXPECT_THAT(LoadServerSecurity("", "", "", "", Tls("client_ca.pem")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", "", dir.File("fake.pem"))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds no certificate that parses")));
  EXPECT_THAT(LoadServerSecurity(Tls("server.pem"), Tls("alice.key"), "").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not the key of the certificate " + Tls("server.pem"))));
}

// An empty iteration (its constructor is the subclasses').
struct NoProperties : grpc::AuthPropertyIterator {
  NoProperties() = default;
};

// An auth context that keeps the properties added to it.
class Properties : public grpc::AuthContext {
 public:
  bool IsPeerAuthenticated() const override { return false; }
  std::vector<grpc::string_ref> GetPeerIdentity() const override { return {}; }
  std::string GetPeerIdentityPropertyName() const override { return ""; }
  std::vector<grpc::string_ref> FindPropertyValues(const std::string& name) const override {
    std::vector<grpc::string_ref> out;
    for (const auto& [k, v] : added) {
      if (k == name) out.emplace_back(v);
    }
    return out;
  }
  grpc::AuthPropertyIterator begin() const override { return NoProperties(); }
  grpc::AuthPropertyIterator end() const override { return NoProperties(); }
  void AddProperty(const std::string& key, const grpc::string_ref& value) override {
    added.emplace_back(key, std::string(value.data(), value.size()));
  }
  bool SetPeerIdentityPropertyName(const std::string&) override { return false; }
  std::vector<std::pair<std::string, std::string>> added;
};

TEST(TokenChecker, TheTokensClientByRoleAndMethod_NamedInTheContext) {
  std::vector<ClientToken> clients = {
      {"ops", Role::kAdmin, "admin-0123456789abcdef", {}},
      {"board", Role::kViewer, "viewer-0123456789abcdef", {}},
      {"rack", Role::kWorker, "worker-0123456789abcde", {"g-*", "h"}}};
  std::shared_ptr<grpc::AuthMetadataProcessor> checker = MakeTokenChecker(clients);
  auto call = [&](const std::string& token, const std::string& path, Properties* context) {
    const std::string bearer = "Bearer " + token;
    grpc::AuthMetadataProcessor::InputMetadata in;
    if (!token.empty()) in.emplace("authorization", bearer);
    if (!path.empty()) in.emplace(":path", path);
    grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
    return checker->Process(in, context, &consumed, &response);
  };
  Properties ctx;
  // The last of several tokens matches; its name goes into the context.
  grpc::Status s = call("worker-0123456789abcde", "/quilt.v1.ClusterService/Heartbeat", &ctx);
  EXPECT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(ctx.FindPropertyValues(kClientProperty).size(), 1u);
  EXPECT_EQ(std::string(ctx.FindPropertyValues(kClientProperty)[0].data(),
                        ctx.FindPropertyValues(kClientProperty)[0].size()),
            "rack");
  // Its nodes go into the context too (the handlers check them).
  EXPECT_EQ(ctx.FindPropertyValues(kNodesProperty).size(), 2u);
  Properties denied;
  s = call("viewer-0123456789abcdef", "/quilt.v1.JobService/CancelJob", &denied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "the client 'board' (role viewer) may not call quilt.v1.JobService/CancelJob");
  EXPECT_TRUE(denied.added.empty());
  // No method to check: refused but for an admin.
  s = call("viewer-0123456789abcdef", "", &denied);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("may not call this method"));
  Properties admin;
  EXPECT_TRUE(call("admin-0123456789abcdef", "", &admin).ok());
  // A token that is a prefix of one, one of another length, none.
  EXPECT_EQ(call("viewer-0123456789abcde", "/quilt.v1.JobService/GetJob", &denied).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("viewer-0123456789abcdefX", "/quilt.v1.JobService/GetJob", &denied).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("", "/quilt.v1.JobService/GetJob", &denied).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// A call with no token: the certificate client its peer's common name
// names, role-checked like a token's; an unlisted name, or no
// certificate, refused saying so. A token client may not be reached by a
// certificate of its name.
TEST(TokenChecker, ACertificateClientByItsCommonName) {
  std::shared_ptr<grpc::AuthMetadataProcessor> checker =
      MakeTokenChecker({{"ops", Role::kAdmin, "admin-0123456789abcdef", {}},
                        {"alice", Role::kViewer, "", {}},
                        {"gpu-7", Role::kWorker, "", {"gpu-7"}}});
  // `authorization`: the header's value, if any.
  auto call = [&](const std::string& common_name, const std::string& path, Properties* context,
                  const std::string* authorization = nullptr) {
    if (!common_name.empty()) context->AddProperty(GRPC_X509_CN_PROPERTY_NAME, common_name);
    grpc::AuthMetadataProcessor::InputMetadata in;
    in.emplace(":path", path);
    if (authorization != nullptr) in.emplace("authorization", *authorization);
    grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
    return checker->Process(in, context, &consumed, &response);
  };
  auto value = [](const Properties& context, const char* name) {
    std::vector<grpc::string_ref> v = context.FindPropertyValues(name);
    return v.size() == 1 ? std::string(v[0].data(), v[0].size()) : "(" + std::to_string(v.size());
  };
  Properties worker;
  grpc::Status s = call("gpu-7", "/quilt.v1.ClusterService/Heartbeat", &worker);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(value(worker, kClientProperty), "gpu-7");
  EXPECT_EQ(value(worker, kNodesProperty), "gpu-7");
  // A token names the client even where the certificate names another.
  Properties both;
  const std::string admin = "Bearer admin-0123456789abcdef";
  s = call("alice", "/quilt.v1.AdminService/SetNodeDraining", &both, &admin);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(value(both, kClientProperty), "ops");
  // An empty or wrong token is no certificate client's way in.
  for (const std::string bad : {"", "Bearer ", "Bearer nope-0123456789abcdef"}) {
    Properties tried;
    s = call("alice", "/quilt.v1.JobService/GetJob", &tried, &bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "'" << bad << "'";
    EXPECT_THAT(s.error_message(), HasSubstr("'alice''s, a certificate client, which sends no "
                                             "token"));
    EXPECT_TRUE(tried.FindPropertyValues(kClientProperty).empty());
  }
  Properties viewer;
  s = call("alice", "/quilt.v1.JobService/CancelJob", &viewer);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("the client 'alice' (role viewer) may not call"));
  Properties unlisted;
  s = call("mallory", "/quilt.v1.JobService/GetJob", &unlisted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("(this one's common name: 'mallory')"));
  Properties token_name;
  EXPECT_EQ(call("ops", "/quilt.v1.JobService/GetJob", &token_name).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  Properties none;
  EXPECT_EQ(call("", "/quilt.v1.JobService/GetJob", &none).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

// Replace swaps the clients: the next call is checked against the new ones.
TEST(TokenChecker, ReplacedClientsCheckTheNextCall) {
  std::shared_ptr<TokenChecker> checker =
      MakeTokenChecker({{"ops", Role::kAdmin, "admin-0123456789abcdef", {}}});
  auto call = [&](const std::string& token) {
    grpc::AuthMetadataProcessor::InputMetadata in;
    const std::string bearer = "Bearer " + token;
    in.emplace("authorization", bearer);
    in.emplace(":path", "/quilt.v1.JobService/GetJob");
    grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
    Properties context;
    return checker->Process(in, &context, &consumed, &response).error_code();
  };
  EXPECT_EQ(call("admin-0123456789abcdef"), grpc::StatusCode::OK);
  EXPECT_EQ(call("user-0123456789abcdefg"), grpc::StatusCode::UNAUTHENTICATED);
  checker->Replace({{"alice", Role::kUser, "user-0123456789abcdefg", {}}});
  EXPECT_EQ(call("admin-0123456789abcdef"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("user-0123456789abcdefg"), grpc::StatusCode::OK);
}

TEST(Security, TokensTheCoordinatorTakesAreLongAndNamedApart) {
  // token_file's token is at least 16 characters; a tokens-file client
  // may not take token_file's name.
  EXPECT_THAT(LoadServerSecurity(Tls("server.pem"), Tls("server.key"), Tls("wrong_token")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs at least 16")));
  testing::TempDir dir;
  std::ofstream(dir.File("tokens")) << "token viewer viewer-0123456789abcdef\n";
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), Tls("token"), dir.File("tokens"))
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names a client 'token'")));
  // A certificate client where no client certificates are asked for.
  std::ofstream(dir.File("certs")) << "alice user certificate\n";
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", dir.File("certs")).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("names 'alice' a certificate client, but no client certificates")));
  EXPECT_THAT(LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", dir.File("certs"),
                                 Tls("client_ca.pem"))
                  .status(),
              IsOk());
  // Certificate clients alone (no token_file): any number of them.
  std::ofstream(dir.File("certs_only")) << "alice user certificate\nbob viewer Certificate\n";
  absl::StatusOr<ServerSecurity> certs = LoadServerSecurity(
      Tls("server.pem"), Tls("server.key"), "", dir.File("certs_only"), Tls("client_ca.pem"));
  ASSERT_THAT(certs.status(), IsOk());
  EXPECT_EQ(certs->clients.size(), 2u);
  // Alone, the tokens file may use the name.
  EXPECT_THAT(
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", dir.File("tokens")).status(),
      IsOk());
}

}  // namespace
}  // namespace quilt::rpc
