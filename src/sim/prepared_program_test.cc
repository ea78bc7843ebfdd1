// PreparedProgram: a program prepared once replays as Simulate simulates
// it, as often as asked until its last replay, and under another program's
// priorities as Simulate simulates that program. And the lowering's index
// hints (ComputeInstr.op_index, TensorRange.tensor_index) count only where
// they name the op or tensor: wrong or missing ones validate and simulate
// the same.
#include <functional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/baselines.h"
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

// (All-reduce, and parameter servers: transfers between the nodes that
// wait on ports and NICs, whose waiting classes a replay keeps.)
class PreparedProgramReplays : public ::testing::TestWithParam<quilt::v1::AggregationMethod> {};

TEST_P(PreparedProgramReplays, AsSimulateAndAgain) {
  auto w = Make("resnet50");
  const quilt::v1::Strategy s = DataParallelStrategy(
      w->graph, w->topo, std::vector<int64_t>(w->topo.num_devices(), 1), GetParam(), "dp");
  const quilt::v1::DistributedProgram p = LowerChecked(*w, s, 16);
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

INSTANTIATE_TEST_SUITE_P(Methods, PreparedProgramReplays,
                         ::testing::Values(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE,
                                           quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER));

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

// Every hint in `p` set by `fn` (op index, tensor index → new hint).
template <typename Fn>
void SetHints(quilt::v1::DistributedProgram* p, Fn fn) {
  auto range = [&](quilt::v1::TensorRange* r) { r->set_tensor_index(fn(r->tensor_index())); };
  for (auto& d : *p->mutable_devices()) {
    for (auto& r : *d.mutable_persistent()) range(&r);
    for (auto& r : *d.mutable_feeds()) range(&r);
    for (auto& ins : *d.mutable_instructions()) {
      if (ins.has_compute()) ins.mutable_compute()->set_op_index(fn(ins.compute().op_index()));
      if (ins.has_send()) range(ins.mutable_send()->mutable_range());
      if (ins.has_recv()) range(ins.mutable_recv()->mutable_into());
      if (ins.has_concat()) range(ins.mutable_concat()->mutable_target());
      if (ins.has_ps_push()) range(ins.mutable_ps_push()->mutable_gradient());
      if (ins.has_ps_accumulate()) range(ins.mutable_ps_accumulate()->mutable_gradient());
      if (ins.has_ps_pull()) range(ins.mutable_ps_pull()->mutable_parameter());
    }
  }
}

TEST(ProgramHints, WrongOrMissingHintsSimulateTheSame) {
  auto w = Make("transformer");
  const std::vector<int64_t> ones(w->topo.num_devices(), 1);
  for (const quilt::v1::Strategy& s :
       {EvenRing(*w),
        DataParallelStrategy(w->graph, w->topo, ones,
                             quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps"),
        testing::TiedSplit(w->graph, w->topo)}) {
    SCOPED_TRACE(s.name());
    const quilt::v1::DistributedProgram p = LowerChecked(*w, s, 8);
    // The lowering gives hints, and they name what the names name.
    int hinted = 0;
    for (const auto& d : p.devices()) {
      for (const auto& ins : d.instructions()) {
        if (!ins.has_compute()) continue;
        EXPECT_EQ(w->graph.ops[ins.compute().op_index()].name, ins.compute().op());
        hinted += ins.compute().op_index() > 0 ? 1 : 0;
      }
    }
    EXPECT_GT(hinted, 0);
    absl::StatusOr<SimResult> right = Simulate(p, w->graph, w->topo, *w->cost);
    ASSERT_THAT(right.status(), IsOk());
    const int ops = static_cast<int>(w->graph.ops.size());
    const std::vector<std::function<int(int)>> wrongs = {
        [](int) { return 0; },                   // missing (proto3's default)
        [ops](int h) { return (h + 1) % ops; },  // another op's, another tensor's
        [](int) { return -7; }, [](int) { return 1 << 30; }};
    for (const auto& wrong : wrongs) {
      quilt::v1::DistributedProgram q = p;
      SetHints(&q, wrong);
      EXPECT_THAT(ValidateProgram(q, w->graph, w->topo), IsOk());
      absl::StatusOr<SimResult> r = Simulate(q, w->graph, w->topo, *w->cost);
      ASSERT_THAT(r.status(), IsOk());
      ExpectSame(*right, *r);
    }
  }
}

}  // namespace
}  // namespace quilt
