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
  ASSERT_EQ(both->clients.size(), 5u);
  EXPECT_EQ(both->clients[3].name, "grafana");
  EXPECT_EQ(both->clients[3].role, Role::kViewer);
  absl::StatusOr<ServerSecurity> named =
      LoadServerSecurity(Tls("server.pem"), Tls("server.key"), "", Tls("tokens"));
  ASSERT_THAT(named.status(), IsOk());
  EXPECT_EQ(named->clients.size(), 4u);
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

}  // namespace
}  // namespace quilt::rpc
