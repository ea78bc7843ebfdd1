#include "src/coordinator/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

TEST(CoordinatorConfig, DefaultsAreValidAndRenderedFileLoads) {
  CoordinatorConfig defaults;
  EXPECT_THAT(ValidateCoordinatorConfig(defaults), IsOk());
  const auto& schema = CoordinatorConfigSchema();
  CoordinatorConfig parsed;
  parsed.heartbeat_period_ms = 1;
  ASSERT_THAT(schema.ApplyToml(schema.RenderToml(defaults), "default.toml", &parsed), IsOk());
  EXPECT_EQ(parsed.heartbeat_period_ms, defaults.heartbeat_period_ms);
  EXPECT_EQ(parsed.listen_address, defaults.listen_address);
}

TEST(CoordinatorConfig, TimeoutsMustBeOrdered) {
  CoordinatorConfig c;
  c.not_ready_after_ms = 500;
  c.heartbeat_period_ms = 1000;
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not_ready_after_ms")));
  c = CoordinatorConfig();
  c.down_after_ms = c.not_ready_after_ms;
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("down_after_ms")));
}

TEST(CoordinatorConfig, BadListenAddressRejected) {
  CoordinatorConfig c;
  c.listen_address = "nowhere";
  EXPECT_THAT(ValidateCoordinatorConfig(c), StatusIs(absl::StatusCode::kInvalidArgument));
  c.listen_address = "0.0.0.0:7070";  // plaintext beyond loopback
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("loopback")));
}

TEST(CoordinatorConfig, ABadMetricsAddressIsRejectedByName) {
  CoordinatorConfig c;
  c.metrics_address = "nowhere";
  EXPECT_THAT(ValidateCoordinatorConfig(c), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     ::testing::HasSubstr("metrics_address")));
  c.metrics_address = "127.0.0.1:9464";
  EXPECT_THAT(ValidateCoordinatorConfig(c), IsOk());
}

TEST(CoordinatorConfig, OffLoopbackTheApiNeedsTlsAndAToken) {
  CoordinatorConfig c;
  c.listen_address = "0.0.0.0:7070";
  c.tls_cert_file = "/etc/quilt/api.pem";
  c.tls_key_file = "/etc/quilt/api.key";
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("client token")));
  c.token_file = "/etc/quilt/token";
  EXPECT_THAT(ValidateCoordinatorConfig(c), IsOk());
  c.tls_key_file.clear();
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("go together")));
  // A token over plaintext, even on loopback.
  c = CoordinatorConfig();
  c.token_file = "/etc/quilt/token";
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs TLS")));
}

// Client certificates stand in for tokens off loopback, and need TLS.
TEST(CoordinatorConfig, OffLoopbackClientCertificatesWillDoInsteadOfTokens) {
  CoordinatorConfig c;
  c.listen_address = "0.0.0.0:7070";
  c.tls_cert_file = "/etc/quilt/api.pem";
  c.tls_key_file = "/etc/quilt/api.key";
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("client tokens (token_file or tokens_file) or client "
                                 "certificates (tls_client_ca_file)")));
  c.tls_client_ca_file = "/etc/quilt/clients-ca.pem";
  EXPECT_THAT(ValidateCoordinatorConfig(c), IsOk());
  c.tls_cert_file.clear();
  c.tls_key_file.clear();
  c.listen_address = "127.0.0.1:7070";
  EXPECT_THAT(ValidateCoordinatorConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tls_client_ca_file (client certificates) needs TLS")));
}

}  // namespace
}  // namespace quilt
