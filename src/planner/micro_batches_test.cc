#include "src/planner/micro_batches.h"

#include <map>
#include <set>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using ::testing::HasSubstr;

int64_t Peak(const SimResult& r) {
  int64_t peak = 0;
  for (const auto& u : r.devices) peak = std::max(peak, u.peak_memory_bytes);
  return peak;
}

// Per op with batch rows: the row ranges it runs, by device.
std::map<std::string, std::multiset<std::pair<std::string, std::pair<int64_t, int64_t>>>> Runs(
    const DistributedProgram& p) {
  std::map<std::string, std::multiset<std::pair<std::string, std::pair<int64_t, int64_t>>>> out;
  for (const auto& dp : p.devices()) {
    for (const Instruction& ins : dp.instructions()) {
      if (!ins.has_compute() || ins.compute().end() == 0) continue;
      out[ins.compute().op()].insert({dp.device(), {ins.compute().begin(), ins.compute().end()}});
    }
  }
  return out;
}

// The transformer data parallel over four devices, its batch of 16 as four
// micro-batches of 4: each op with batch rows runs once per micro-batch on
// each device, on the rows the batch of 4 gives it moved to that
// micro-batch's; weight gradients and losses add up from the second
// micro-batch on; the program validates; and the device holds about a
// quarter of the activations: less than the whole batch at once, not less
// than one micro-batch's alone.
TEST(MicroBatches, RepeatsThePassesPerMicroBatchAndHoldsOneAtATime) {
  auto w = testing::Make("transformer");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  const absl::StatusOr<DistributedProgram> four = Lower(w->graph, s, w->topo, w->cost.get(), 4);
  const absl::StatusOr<DistributedProgram> whole = Lower(w->graph, s, w->topo, w->cost.get(), 16);
  s.set_micro_batches(4);
  const absl::StatusOr<DistributedProgram> micro = Lower(w->graph, s, w->topo, w->cost.get(), 16);
  ASSERT_THAT(four.status(), IsOk());
  ASSERT_THAT(whole.status(), IsOk());
  ASSERT_THAT(micro.status(), IsOk());
  EXPECT_EQ(micro->global_batch(), 16);
  EXPECT_EQ(micro->micro_batches(), 4);
  EXPECT_EQ(micro->strategy().micro_batches(), 4);
  ASSERT_THAT(ValidateProgram(*micro, w->graph, w->topo), IsOk());

  const auto once = Runs(*four);
  const auto repeated = Runs(*micro);
  ASSERT_EQ(once.size(), repeated.size());
  for (const auto& [op, runs] : once) {
    std::multiset<std::pair<std::string, std::pair<int64_t, int64_t>>> want;
    for (const auto& [device, rows] : runs) {
      for (int64_t j = 0; j < 4; ++j) {
        want.insert({device, {rows.first + 4 * j, rows.second + 4 * j}});
      }
    }
    EXPECT_EQ(repeated.at(op), want) << op;
  }
  std::set<int64_t> ids;
  int accumulating = 0;
  for (const auto& dp : micro->devices()) {
    for (const Instruction& ins : dp.instructions()) {
      EXPECT_TRUE(ids.insert(ins.id()).second) << "id " << ins.id() << " twice";
      for (int64_t d : ins.deps()) EXPECT_LT(d, ins.id());
      if (!ins.has_compute()) continue;
      if (ins.micro_batch() > 0) {
        EXPECT_GE(ins.compute().begin(), 4 * (ins.micro_batch() - 1)) << ins.compute().op();
        EXPECT_LE(ins.compute().end(), 4 * ins.micro_batch()) << ins.compute().op();
      }
      if (ins.compute().accumulate()) {
        ++accumulating;
        EXPECT_GT(ins.micro_batch(), 1) << ins.compute().op();
      }
    }
  }
  EXPECT_GT(accumulating, 0);

  auto peak = [&](const DistributedProgram& p) {
    absl::StatusOr<SimResult> r = Simulate(p, w->graph, w->topo, *w->cost);
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? Peak(*r) : 0;
  };
  const int64_t p4 = peak(*four), p16 = peak(*whole), pm = peak(*micro);
  EXPECT_LT(pm, p16);
  EXPECT_GE(pm, p4);
}

// Batch norm's statistics are sums over the batch that its rows' pass
// reads: no micro-batch runs without the others, so the lowering refuses,
// naming the op.
TEST(MicroBatches, RefusesAPassThatReadsASumOverTheBatch) {
  auto w = testing::Make("resnet50");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches(2);
  absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 16);
  EXPECT_THAT(p.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gradient accumulation: ")));
  // (It names a batch-norm op.)
  bool named = false;
  for (const Op& op : w->graph.ops) {
    named |= absl::StartsWith(op.type, "BatchNorm") &&
             absl::StrContains(p.status().message(), "op '" + op.name + "'");
  }
  EXPECT_TRUE(named) << p.status().message();
}

TEST(MicroBatches, RefusesCountsThatDoNotSplitTheBatchEvenly) {
  auto w = testing::Make("mlp");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches(3);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the batch 16 does not split into 3 micro-batches")));
  s.set_micro_batches(-1);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Past the most a program holds, refused before any is repeated.
  s.set_micro_batches(kMaxMicroBatches * 2);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), kMaxMicroBatches * 2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 1024")));
}

// A program whose micro-batch counts disagree with its strategy's is
// refused by the validator.
TEST(MicroBatches, TheValidatorRefusesAProgramWhoseCountsDisagree) {
  auto w = testing::Make("mlp");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches(2);
  absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 16);
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
  p->set_micro_batches(1);
  EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("micro-batches")));
}

}  // namespace
}  // namespace quilt
