// planner_bench's batch choices: rows per device scale with the cluster,
// global batches do not, per-model batches override, and bad flags are
// refused naming the item.
#include "bench/batch_choices.h"

#include "gtest/gtest.h"

namespace quilt {
namespace {

TEST(BatchChoices, DefaultIsPerModelRowsTimesDevices) {
  auto c = ParseBatchChoices("", "");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  EXPECT_EQ((*c)[0].BatchFor("resnet50", 8), 64);
  EXPECT_EQ((*c)[0].BatchFor("bert_large", 8), 32);
  EXPECT_EQ((*c)[0].BatchFor("gpt2", 64), 128);
  EXPECT_EQ((*c)[0].BatchFor("gpt2_xl", 8), 2);
  EXPECT_EQ((*c)[0].BatchFor("gpt2_xl", 3), 1);  // at least one row
  EXPECT_EQ((*c)[0].Describe()["rows_per_device"], "per-model default");
}

TEST(BatchChoices, RowsPerDeviceListGivesOneChoiceEach) {
  auto c = ParseBatchChoices("3, 0.75", "");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].BatchFor("vgg19", 8), 24);
  EXPECT_EQ((*c)[0].BatchFor("bert_large", 64), 192);
  EXPECT_EQ((*c)[1].BatchFor("bert_large", 8), 6);
  EXPECT_EQ((*c)[1].Describe()["rows_per_device"], 0.75);
}

TEST(BatchChoices, GlobalBatchIgnoresDevicesAndModelsOverride) {
  auto c = ParseBatchChoices("", "24,bert_large=6");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  for (int devices : {8, 64}) {
    EXPECT_EQ((*c)[0].BatchFor("vgg19", devices), 24);
    EXPECT_EQ((*c)[0].BatchFor("bert_large", devices), 6);
  }
  const nlohmann::json d = (*c)[0].Describe();
  EXPECT_EQ(d["global_batch"], 24);
  EXPECT_EQ(d["bert_large"], 6);
  EXPECT_FALSE(d.contains("rows_per_device"));
}

TEST(BatchChoices, ModelsNotNamedKeepTheirDefaultRows) {
  auto c = ParseBatchChoices("", "bert_large=6");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)[0].BatchFor("bert_large", 8), 6);
  EXPECT_EQ((*c)[0].BatchFor("resnet50", 8), 64);
  EXPECT_EQ((*c)[0].Describe()["rows_per_device"], "per-model default");
  EXPECT_EQ((*c)[0].Describe()["bert_large"], 6);
}

TEST(BatchChoices, BadFlagsNameTheItem) {
  struct Case {
    const char* rows;
    const char* global;
    const char* says;
  } cases[] = {
      {"3,x", "", "'x' is not a positive number"},
      {"-1", "", "'-1' is not a positive number"},
      {"nan", "", "'nan' is not a positive number"},
      {"", "24,0", "'0' is not a whole number"},
      {"", "2.5", "'2.5' is not a whole number"},
      {"", "bert_large=", "'bert_large=' is not a whole number"},
      {"", "=6", "names no model"},
      {"", "24,32", "second batch for every model"},
      {"", "gpt2=4,gpt2=8", "names gpt2 a second time"},
      {"8", "24", "both set"},
  };
  for (const Case& k : cases) {
    auto c = ParseBatchChoices(k.rows, k.global);
    ASSERT_FALSE(c.ok()) << k.rows << " | " << k.global;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(k.says), std::string::npos) << c.status();
  }
}

}  // namespace
}  // namespace quilt
