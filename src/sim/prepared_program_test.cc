// PreparedProgram: a program prepared once replays as Simulate simulates
// it, as often as asked until its last replay, and under another program's
// priorities as Simulate simulates that program.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using ::quilt::testing::EvenRing;
using ::quilt::testing::LowerChecked;
using ::quilt::testing::Make;

// Step time, events and every device's busy time and peak memory equal.
void ExpectSame(const SimResult& a, const SimResult& b) {
  EXPECT_EQ(a.step_time_s, b.step_time_s);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.instructions, b.instructions);
  EXPECT_EQ(a.critical_device, b.critical_device);
  ASSERT_EQ(a.devices.size(), b.devices.size());
  for (size_t d = 0; d < a.devices.size(); ++d) {
    EXPECT_EQ(a.devices[d].busy_s, b.devices[d].busy_s) << a.devices[d].device;
    EXPECT_EQ(a.devices[d].peak_memory_bytes, b.devices[d].peak_memory_bytes)
        << a.devices[d].device;
  }
}

TEST(PreparedProgram, ReplaysAsSimulateAndAgain) {
  auto w = Make("resnet50");
  const quilt::v1::DistributedProgram p = LowerChecked(*w, EvenRing(*w), 16);
  ASSERT_GT(p.devices_size(), 0);
  absl::StatusOr<SimResult> direct = Simulate(p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(direct.status(), IsOk());
  absl::StatusOr<PreparedProgram> prepared =
      PreparedProgram::Prepare(p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(prepared.status(), IsOk());
  for (int run = 0; run < 2; ++run) {
    absl::StatusOr<SimResult> r = prepared->Replay();
    ASSERT_THAT(r.status(), IsOk());
    ExpectSame(*r, *direct);
  }
  // The last replay uses the prepared state itself: none after it.
  absl::StatusOr<SimResult> last = prepared->ReplayLast();
  ASSERT_THAT(last.status(), IsOk());
  ExpectSame(*last, *direct);
  EXPECT_THAT(prepared->Replay().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(prepared->ReplayLast().status(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(PreparedProgram, ReplaysUnderAnotherProgramsPriorities) {
  auto w = Make("resnet50");
  quilt::v1::DistributedProgram p = LowerChecked(*w, EvenRing(*w), 16);
  ASSERT_GT(p.devices_size(), 0);
  absl::StatusOr<PreparedProgram> prepared =
      PreparedProgram::Prepare(p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(prepared.status(), IsOk());
  absl::StatusOr<SimResult> own = prepared->Replay();
  ASSERT_THAT(own.status(), IsOk());
  // Reversed priorities: each device runs its ready instructions lowest
  // first, which delays the gradients' all-reduces (the step changes).
  std::vector<double> reversed = Priorities(p);
  for (double& x : reversed) x = -x;
  SetPriorities(reversed, &p);
  absl::StatusOr<SimResult> direct = Simulate(p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(direct.status(), IsOk());
  absl::StatusOr<SimResult> replayed = prepared->Replay(&reversed);
  ASSERT_THAT(replayed.status(), IsOk());
  ExpectSame(*replayed, *direct);
  EXPECT_NE(replayed->step_time_s, own->step_time_s);
  // The other execution order's ranks, as Plan's estimates try them.
  ASSERT_THAT(Reprioritize(w->graph, w->topo, w->cost.get(),
                           quilt::v1::EXECUTION_ORDER_TRANSFERS_FIRST, &p),
              IsOk());
  const std::vector<double> reranked = Priorities(p);
  direct = Simulate(p, w->graph, w->topo, *w->cost);
  ASSERT_THAT(direct.status(), IsOk());
  replayed = prepared->Replay(&reranked);
  ASSERT_THAT(replayed.status(), IsOk());
  ExpectSame(*replayed, *direct);
  // Not one per instruction.
  reversed.pop_back();
  EXPECT_THAT(prepared->Replay(&reversed).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PreparedProgram, BadProgramIsRefusedWhenPrepared) {
  auto w = Make("mlp");
  quilt::v1::DistributedProgram p = LowerChecked(*w, EvenRing(*w), 16);
  ASSERT_GT(p.devices_size(), 0);
  p.mutable_devices(0)->mutable_instructions(0)->add_deps(1 << 30);
  absl::StatusOr<PreparedProgram> prepared =
      PreparedProgram::Prepare(p, w->graph, w->topo, *w->cost);
  EXPECT_THAT(prepared.status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace quilt
