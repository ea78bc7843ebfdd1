#include "src/common/config.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;

struct TestConfig {
  std::string listen_address = "127.0.0.1:7070";
  int64_t heartbeat_period_ms = 1000;
  double ratio = 0.5;
  bool verbose = false;
  std::string mode = "fast";
};

ConfigSchema<TestConfig> MakeSchema() {
  ConfigSchema<TestConfig> s("QUILT_TEST_", "quilt-test");
  s.String("listen_address", &TestConfig::listen_address, "Where to listen.")
      .Int("heartbeat_period_ms", &TestConfig::heartbeat_period_ms, "Heartbeat period.", 10, 60000)
      .Double("ratio", &TestConfig::ratio, "A ratio.", 0.0, 1.0)
      .Bool("verbose", &TestConfig::verbose, "Say more.")
      .String("mode", &TestConfig::mode, "Mode.", {"fast", "slow"});
  return s;
}

TEST(ConfigSchema, TomlOverridesDefaults) {
  auto schema = MakeSchema();
  TestConfig c;
  ASSERT_THAT(schema.ApplyToml("version = 1\nheartbeat_period_ms = 250\nratio = 1\n"
                               "verbose = true\nmode = \"slow\"\n",
                               "a.toml", &c),
              IsOk());
  EXPECT_EQ(c.heartbeat_period_ms, 250);
  EXPECT_DOUBLE_EQ(c.ratio, 1.0);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.mode, "slow");
  EXPECT_EQ(c.listen_address, "127.0.0.1:7070");
}

TEST(ConfigSchema, UnknownKey_NamesFileLineAndSuggestion) {
  auto schema = MakeSchema();
  TestConfig c;
  absl::Status s = schema.ApplyToml("version = 1\n\nheartbeat_perod_ms = 5\n", "w.toml", &c);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("w.toml:3: unknown key 'heartbeat_perod_ms'")));
  EXPECT_THAT(s.message(), HasSubstr("did you mean 'heartbeat_period_ms'"));
}

TEST(ConfigSchema, WrongType_NamesKeyAndLine) {
  auto schema = MakeSchema();
  TestConfig c;
  EXPECT_THAT(schema.ApplyToml("verbose = 3\n", "t.toml", &c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.toml:1: verbose must be a boolean")));
  EXPECT_THAT(schema.ApplyToml("\nheartbeat_period_ms = \"1s\"\n", "t.toml", &c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.toml:2")));
}

TEST(ConfigSchema, MisspeltEnvironmentVariable_Refused) {
  auto schema = MakeSchema();
  EXPECT_THAT(schema.CheckEnvNames({"PATH", "QUILT_TEST_HEARTBEAT_PERIOD_MS", "QUILT_OTHER_X",
                                    "QUILT_TEST_ARGS"}),  // the systemd units' extra flags
              IsOk());
  EXPECT_THAT(schema.CheckEnvNames({"QUILT_TEST_HEARTBEAT_PERIOD"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("$QUILT_TEST_HEARTBEAT_PERIOD names no quilt-test setting")));
}

TEST(ConfigSchema, OutOfRangeAndBadChoice_Rejected) {
  auto schema = MakeSchema();
  TestConfig c;
  EXPECT_THAT(schema.ApplyToml("heartbeat_period_ms = 5\n", "r.toml", &c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("heartbeat_period_ms = 5 is out of range [10, 60000]")));
  EXPECT_THAT(schema.ApplyToml("mode = \"medium\"\n", "r.toml", &c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not one of: fast, slow")));
  EXPECT_EQ(c.heartbeat_period_ms, 1000);
}

TEST(ConfigSchema, SyntaxErrorAndVersion_Reported) {
  auto schema = MakeSchema();
  TestConfig c;
  EXPECT_THAT(schema.ApplyToml("version = 1\nratio = = 2\n", "s.toml", &c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("s.toml:2")));
  EXPECT_THAT(
      schema.ApplyToml("version = 2\n", "s.toml", &c),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unsupported config version")));
}

TEST(ConfigSchema, Layers_EnvThenFlagsOverrideFile) {
  auto schema = MakeSchema();
  TestConfig c;
  ASSERT_THAT(schema.ApplyToml("heartbeat_period_ms = 250\nratio = 0.25\n", "f.toml", &c), IsOk());
  std::map<std::string, std::string> env = {{"QUILT_TEST_HEARTBEAT_PERIOD_MS", "300"},
                                            {"QUILT_TEST_VERBOSE", "true"}};
  ASSERT_THAT(schema.ApplyEnv(&c,
                              [&](const char* n) -> const char* {
                                auto it = env.find(n);
                                return it == env.end() ? nullptr : it->second.c_str();
                              }),
              IsOk());
  EXPECT_EQ(c.heartbeat_period_ms, 300);
  EXPECT_TRUE(c.verbose);
  ASSERT_THAT(schema.Set("heartbeat_period_ms", "400", &c), IsOk());
  EXPECT_EQ(c.heartbeat_period_ms, 400);
  EXPECT_DOUBLE_EQ(c.ratio, 0.25);
  EXPECT_THAT(schema.Set("heartbeat_period_ms", "4x", &c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--heartbeat_period_ms")));
  EXPECT_THAT(schema.Set("nope", "1", &c), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ConfigSchema, ADirectoryIsNoConfigFile) {
  auto schema = MakeSchema();
  TestConfig c;
  testing::TempDir dir;
  EXPECT_THAT(schema.ApplyTomlFile(dir.path(), &c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory")));
}

TEST(ConfigSchema, BadEnvValue_NamesVariable) {
  auto schema = MakeSchema();
  TestConfig c;
  absl::Status s = schema.ApplyEnv(&c, [](const char* n) -> const char* {
    return std::string(n) == "QUILT_TEST_RATIO" ? "2.5" : nullptr;
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("$QUILT_TEST_RATIO")));
}

TEST(ConfigSchema, RenderedDefaults_RoundTrip) {
  auto schema = MakeSchema();
  TestConfig modified;
  modified.heartbeat_period_ms = 42;
  modified.ratio = 0.125;
  modified.listen_address = "a\"b";
  std::string text = schema.RenderToml(modified);
  EXPECT_THAT(text, HasSubstr("# Heartbeat period.\nheartbeat_period_ms = 42\n"));
  TestConfig parsed;
  ASSERT_THAT(schema.ApplyToml(text, "rendered", &parsed), IsOk());
  EXPECT_EQ(parsed.heartbeat_period_ms, 42);
  EXPECT_DOUBLE_EQ(parsed.ratio, 0.125);
  EXPECT_EQ(parsed.listen_address, "a\"b");
}

}  // namespace
}  // namespace quilt
