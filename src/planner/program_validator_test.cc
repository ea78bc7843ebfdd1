// The validator rejecting corrupted programs with the violation named, and
// the rule for reading partial sums that lowering and validator share.
#include "src/planner/program_validator.h"

#include <algorithm>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/graph/op_registry.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/planner/partial_sums.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using quilt::v1::Strategy;
using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::LowerChecked;
using testing::Make;
using testing::TiedSplit;
using testing::World;

class Corrupted : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = Make("mlp");
    ring_ = LowerChecked(*s_,
                         DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                              quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp"),
                         32);
    ps_ = LowerChecked(*s_,
                       DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                            quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, "ps"),
                       32);
  }
  absl::Status Validate(const DistributedProgram& p) {
    return ValidateProgram(p, s_->graph, s_->topo);
  }
  // The first instruction matching `pred`: (device, position).
  template <typename Pred>
  std::pair<int, int> Find(const DistributedProgram& p, Pred pred) {
    for (int d = 0; d < p.devices_size(); ++d) {
      for (int i = 0; i < p.devices(d).instructions_size(); ++i) {
        if (pred(p.devices(d).instructions(i))) return {d, i};
      }
    }
    ADD_FAILURE() << "no matching instruction";
    return {0, 0};
  }
  Instruction* At(DistributedProgram& p, std::pair<int, int> where) {
    return p.mutable_devices(where.first)->mutable_instructions(where.second);
  }
  int64_t MaxId(const DistributedProgram& p) {
    int64_t m = 0;
    for (const auto& dp : p.devices()) {
      for (const auto& ins : dp.instructions()) m = std::max(m, ins.id());
    }
    return m;
  }

  // A second all-reduce of what `first` sums, after it, on every member.
  void SumAgainAfter(const Instruction& first, DistributedProgram* p) {
    int64_t id = MaxId(*p);
    for (auto& dp : *p->mutable_devices()) {
      int64_t member = -1;
      for (const auto& ins : dp.instructions()) {
        if (ins.has_all_reduce() &&
            ins.all_reduce().collective_id() == first.all_reduce().collective_id()) {
          member = ins.id();
        }
      }
      Instruction* again = dp.add_instructions();
      *again->mutable_all_reduce() = first.all_reduce();
      again->mutable_all_reduce()->set_collective_id(777777);
      again->set_id(++id);
      again->add_deps(member);
    }
  }

  std::unique_ptr<World> s_;
  DistributedProgram ring_, ps_;
};

TEST_F(Corrupted, CollectiveMissingAMember) {
  DistributedProgram p = ring_;
  At(p, Find(p, [](const Instruction& i) { return i.has_all_reduce(); }))
      ->mutable_all_reduce()
      ->set_collective_id(999999);
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("not on each of the 4 devices of group")));
}

// An all-reduce with a method that is no collective's (the simulator and
// the executors would run something else than it says).
TEST_F(Corrupted, AllReduceWithAParameterServersMethod) {
  for (quilt::v1::AggregationMethod m :
       {quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP,
        quilt::v1::AGGREGATION_METHOD_UNSPECIFIED}) {
    DistributedProgram p = ring_;
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (ins.has_all_reduce()) ins.mutable_all_reduce()->set_algorithm(m);
      }
    }
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(quilt::v1::AggregationMethod_Name(m)),
                               HasSubstr("not an all-reduce's (ring, tree, hierarchical or "
                                         "direct)"))));
  }
}

TEST_F(Corrupted, NonFinitePriorityOrABatchItsStrategyDisagreesWith) {
  DistributedProgram p = ring_;
  At(p, Find(p, [](const Instruction& i) { return i.has_all_reduce(); }))
      ->set_priority(std::nan(""));
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("(not a finite number)")));
  p = ring_;
  p.mutable_strategy()->set_global_batch(p.global_batch() / 2);
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("the program's global batch is ", p.global_batch(),
                                              ", its strategy's ", p.global_batch() / 2))));
}

TEST_F(Corrupted, GradientAggregatedTwice) {
  DistributedProgram p = ring_;
  const Instruction first =
      *At(p, Find(p, [](const Instruction& i) { return i.has_all_reduce(); }));
  SumAgainAfter(first, &p);
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aggregated exactly once")));
}

TEST_F(Corrupted, UpdateReadsAnUnaggregatedGradient) {
  DistributedProgram p = ring_;
  // Point an update at the gradient's producer instead of its all-reduce.
  std::map<int64_t, const Instruction*> by_id;
  for (const auto& dp : p.devices()) {
    for (const auto& ins : dp.instructions()) by_id[ins.id()] = &ins;
  }
  Instruction* update = nullptr;
  int64_t allreduce = -1;
  for (auto& dp : *p.mutable_devices()) {
    for (auto& ins : *dp.mutable_instructions()) {
      if (!ins.has_compute() || update != nullptr) continue;
      for (int64_t dep : ins.deps()) {
        if (by_id[dep]->has_all_reduce()) {
          update = &ins;
          allreduce = dep;
        }
      }
    }
  }
  ASSERT_NE(update, nullptr);
  std::vector<int64_t> deps;
  for (int64_t dep : update->deps()) {
    if (dep != allreduce) deps.push_back(dep);
  }
  for (int64_t dep : by_id[allreduce]->deps()) deps.push_back(dep);
  update->clear_deps();
  std::sort(deps.begin(), deps.end());
  for (int64_t dep : deps) update->add_deps(dep);
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("partial sum over part of the batch that was never aggregated")));
}

// A partitioned gradient whose update misses one slice reads rows that
// were never summed; a slice beyond the tensor's rows, or one summed twice,
// is refused too.
TEST_F(Corrupted, PartitionedGradientSlices) {
  Strategy strategy = DataParallelStrategy(s_->graph, s_->topo, {1, 1, 1, 1},
                                           quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "dp");
  for (auto& a : *strategy.mutable_aggregations()) a.set_partition_bytes(2000);
  const DistributedProgram sliced = LowerChecked(*s_, strategy, 32);
  const auto is_slice = [](const Instruction& i) {
    return i.has_all_reduce() && i.all_reduce().end() != 0;
  };
  {
    // The update that depends on a slice drops that dependency.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    bool dropped = false;
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_compute() || dropped) continue;
        std::vector<int64_t> deps(ins.deps().begin(), ins.deps().end());
        auto it = std::find(deps.begin(), deps.end(), slice.id());
        if (it == deps.end()) continue;
        deps.erase(it);
        ins.clear_deps();
        for (int64_t d : deps) ins.add_deps(d);
        dropped = true;
      }
    }
    ASSERT_TRUE(dropped);
    const absl::Status st = Validate(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr(slice.all_reduce().tensors(0)));
  }
  {
    DistributedProgram p = sliced;
    const int64_t cid = At(p, Find(p, is_slice))->all_reduce().collective_id();
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (ins.has_all_reduce() && ins.all_reduce().collective_id() == cid)
          ins.mutable_all_reduce()->set_end(1 << 20);
      }
    }
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("a slice is whole rows of one tensor")));
  }
  {
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    SumAgainAfter(slice, &p);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("aggregated exactly once")));
  }
  {
    // Two slices that overlap and do not depend on each other: each reads
    // a partial sum, and the update sees every row, but the shared rows are
    // summed twice.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    const int64_t cid = slice.all_reduce().collective_id();
    const std::string tensor = slice.all_reduce().tensors(0);
    std::vector<std::pair<int64_t, int64_t>> ranges;  // of this tensor's slices
    for (const auto& ins : p.devices(0).instructions()) {
      if (ins.has_all_reduce() && ins.all_reduce().tensors(0) == tensor)
        ranges.push_back({ins.all_reduce().begin(), ins.all_reduce().end()});
    }
    ASSERT_GE(ranges.size(), 2u);
    std::sort(ranges.begin(), ranges.end());
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_all_reduce() || ins.all_reduce().collective_id() != cid) continue;
        // Widen it over the next slice's first row, bytes to match.
        auto* ar = ins.mutable_all_reduce();
        const int64_t row_bytes = ar->bytes() / (ar->end() - ar->begin());
        if (ar->end() < ranges.back().second) {
          ar->set_end(ar->end() + 1);
        } else {
          ar->set_begin(ar->begin() - 1);
        }
        ar->set_bytes(row_bytes * (ar->end() - ar->begin()));
      }
    }
    const absl::Status st = Validate(p);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(st.message(), HasSubstr("both sum rows"));
    EXPECT_THAT(st.message(), HasSubstr(tensor));
  }
  {
    // A reader that depends on one slice only, and on the gradient's
    // producer: some rows summed, the others still partial.
    DistributedProgram p = sliced;
    const Instruction slice = *At(p, Find(p, is_slice));
    std::map<int64_t, const Instruction*> by_id;
    for (const auto& dp : p.devices()) {
      for (const auto& ins : dp.instructions()) by_id[ins.id()] = &ins;
    }
    bool changed = false;
    for (auto& dp : *p.mutable_devices()) {
      for (auto& ins : *dp.mutable_instructions()) {
        if (!ins.has_compute() || changed) continue;
        std::vector<int64_t> deps(ins.deps().begin(), ins.deps().end());
        if (std::find(deps.begin(), deps.end(), slice.id()) == deps.end()) continue;
        // Drop its other slices of the tensor; depend on their producers.
        std::vector<int64_t> kept;
        for (int64_t d : deps) {
          const Instruction* dep = by_id[d];
          const bool other_slice = d != slice.id() && dep->has_all_reduce() &&
                                   dep->all_reduce().end() != 0 &&
                                   dep->all_reduce().tensors(0) == slice.all_reduce().tensors(0);
          if (!other_slice) {
            kept.push_back(d);
            continue;
          }
          for (int64_t dd : dep->deps()) kept.push_back(dd);
        }
        std::sort(kept.begin(), kept.end());
        kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
        ins.clear_deps();
        for (int64_t d : kept) ins.add_deps(d);
        changed = true;
      }
    }
    ASSERT_TRUE(changed);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("some rows summed and others still partial")));
  }
}

TEST(PartialRule, FollowsWhatEachOpDoesWithItsOperands) {
  auto rule = [](const std::string& type, std::vector<std::string> inputs) {
    Op op;
    op.type = type;
    op.inputs = std::move(inputs);
    const OpSchema* schema = OpRegistry::Global().Find(type);
    EXPECT_NE(schema, nullptr) << type;
    return schema == nullptr ? PartialRule::kNone : PartialRuleOf(op, *schema);
  };
  for (const char* adds : {"Add", "Sub", "Sum", "Concat"}) {
    EXPECT_EQ(rule(adds, {"a", "b"}), PartialRule::kAllOperands) << adds;
  }
  EXPECT_EQ(rule("Div", {"a", "b"}), PartialRule::kFirstOperand);
  EXPECT_EQ(rule("Mul", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("MatMul", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Gemm", {"a", "b"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Gemm", {"a", "b", "c"}), PartialRule::kNone);  // affine: the bias
  EXPECT_EQ(rule("Gemm", {"a", "b", ""}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Neg", {"a"}), PartialRule::kOneOperand);
  EXPECT_EQ(rule("Relu", {"a"}), PartialRule::kNone);
  EXPECT_EQ(rule("Pow", {"a", "b"}), PartialRule::kNone);
  EXPECT_EQ(rule("Log", {"a"}), PartialRule::kNone);
}

// The same program with one part's all-reduce removed: the sum on
// fast/gpu:0 would read only its own partial sum and the other devices'
// parts would be lost.
TEST(Validator, PartialSumsReadOnFewerDevicesThanHoldThem) {
  auto s = Make("transformer");
  absl::StatusOr<DistributedProgram> lowered =
      Lower(s->graph, TiedSplit(s->graph, s->topo), s->topo, s->cost.get(), 8);
  ASSERT_THAT(lowered.status(), IsOk());
  DistributedProgram p = *lowered;
  const std::string part = "grad/logits_grad_1";
  std::map<int64_t, int64_t> producer_of_reduce;  // all-reduce id → its dependency
  for (auto& dp : *p.mutable_devices()) {
    auto* list = dp.mutable_instructions();
    for (int k = list->size() - 1; k >= 0; --k) {
      const Instruction& ins = list->Get(k);
      if (ins.has_all_reduce() && ins.all_reduce().tensors(0) == part) {
        ASSERT_EQ(ins.deps_size(), 1);
        producer_of_reduce[ins.id()] = ins.deps(0);
        list->DeleteSubrange(k, 1);
      }
    }
  }
  ASSERT_EQ(producer_of_reduce.size(), 4u);
  // Ids doubled (room for one more instruction after each); the sum then
  // "aggregated" by an all-reduce over fast/gpu:0 alone, as a lowering that
  // took the sum's own partial sum for the whole would do.
  const std::string sum = "grad/embedding.weight_sum";
  auto* alone = p.add_groups();
  alone->set_id(p.groups_size());
  alone->add_devices("fast/gpu:0");
  for (auto& dp : *p.mutable_devices()) {
    auto* list = dp.mutable_instructions();
    for (int k = 0; k < list->size(); ++k) {
      Instruction& ins = *list->Mutable(k);
      ins.set_id(2 * ins.id());
      for (int j = 0; j < ins.deps_size(); ++j) {
        auto it = producer_of_reduce.find(ins.deps(j));
        ins.set_deps(j, 2 * (it != producer_of_reduce.end() ? it->second : ins.deps(j)));
      }
    }
    for (int k = 0; k < list->size(); ++k) {
      if (!list->Get(k).has_compute() || list->Get(k).compute().op() != sum) continue;
      const int64_t sum_id = list->Get(k).id();
      Instruction reduce;
      reduce.set_id(sum_id + 1);
      reduce.add_deps(sum_id);
      reduce.mutable_all_reduce()->set_collective_id(888888);
      reduce.mutable_all_reduce()->set_group(alone->id());
      reduce.mutable_all_reduce()->add_tensors(sum);
      reduce.mutable_all_reduce()->set_bytes(RangeBytes(*s->graph.FindTensor(sum), 0, 0));
      reduce.mutable_all_reduce()->set_algorithm(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
      for (int j = k + 1; j < list->size(); ++j) {
        Instruction& later = *list->Mutable(j);
        for (int d = 0; d < later.deps_size(); ++d) {
          if (later.deps(d) == sum_id) later.set_deps(d, sum_id + 1);
        }
      }
      *list->Add() = reduce;
      for (int j = list->size() - 1; j > k + 1; --j) list->SwapElements(j, j - 1);
      break;
    }
  }
  EXPECT_THAT(ValidateProgram(p, s->graph, s->topo),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("grad/logits_grad_1"), HasSubstr("on {fast/gpu:0}"),
                             HasSubstr("would never be added"))));
}

// The all-reduce of a partial sum that an op reads as is, no longer
// waiting for that op: the op might read the sum instead.
TEST(Validator, AllReduceReplacingAPartialSumBeforeItsReader) {
  std::unique_ptr<World> w = testing::PartialReadThenSummed();
  absl::StatusOr<DistributedProgram> lowered =
      Lower(w->graph, testing::EvenRing(*w), w->topo, w->cost.get(), 8);
  ASSERT_THAT(lowered.status(), IsOk());
  ASSERT_THAT(ValidateProgram(*lowered, w->graph, w->topo), IsOk());
  DistributedProgram p = *lowered;
  auto& dp = *p.mutable_devices(1);
  int64_t neg = -1;
  bool cut = false;
  for (auto& ins : *dp.mutable_instructions()) {
    if (ins.has_compute() && ins.compute().op() == "n") neg = ins.id();
    if (!ins.has_all_reduce() || neg < 0) continue;
    std::vector<int64_t> deps;
    for (int64_t d : ins.deps()) {
      if (d != neg) deps.push_back(d);
    }
    cut = deps.size() < static_cast<size_t>(ins.deps_size());
    ins.clear_deps();
    for (int64_t d : deps) ins.add_deps(d);
  }
  ASSERT_TRUE(cut);
  EXPECT_THAT(ValidateProgram(p, w->graph, w->topo),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("replaces 't'"), HasSubstr(dp.device()),
                             HasSubstr("without waiting for it"))));
}

TEST_F(Corrupted, ReplicasNotCoveringTheBatch) {
  DistributedProgram p = ring_;
  Instruction* c =
      At(p, Find(p, [](const Instruction& i) { return i.has_compute() && i.compute().end() > 0; }));
  c->mutable_compute()->set_end(c->compute().end() - 1);
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the batch")));
}

TEST_F(Corrupted, InputNeitherResidentNorWritten) {
  DistributedProgram p = ring_;
  Instruction* c =
      At(p, Find(p, [](const Instruction& i) { return i.has_compute() && i.deps_size() > 0; }));
  c->clear_deps();
  EXPECT_THAT(Validate(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("neither resident there nor written by one of its dependencies")));
}

TEST_F(Corrupted, OpRunsWhereItsGroupDoesNotPlaceIt) {
  DistributedProgram p = ring_;
  // Move device 0's first computation to device 1 (with a fresh id at the end).
  const auto where =
      Find(p, [](const Instruction& i) { return i.has_compute() && i.deps_size() == 0; });
  Instruction moved = *At(p, where);
  p.mutable_devices(where.first)->mutable_instructions()->DeleteSubrange(where.second, 1);
  for (auto& dp : *p.mutable_devices()) {
    for (auto& ins : *dp.mutable_instructions()) {
      auto* deps = ins.mutable_deps();
      deps->erase(std::remove(deps->begin(), deps->end(), moved.id()), deps->end());
    }
  }
  moved.set_id(MaxId(p) + 1);
  *p.mutable_devices((where.first + 1) % p.devices_size())->add_instructions() = moved;
  EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(Corrupted, UnmatchedTransfersAndPushes) {
  {
    DistributedProgram p = ps_;
    Instruction* push = At(p, Find(p, [](const Instruction& i) { return i.has_ps_push(); }));
    push->mutable_ps_push()->set_tag(push->ps_push().tag() + 1000000);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("push tag")));
  }
  {
    DistributedProgram p = ps_;
    Instruction* pull = At(p, Find(p, [](const Instruction& i) { return i.has_ps_pull(); }));
    const std::string server = pull->ps_pull().server_device();
    for (const auto& dp : p.devices()) {
      if (dp.device() != server) {
        pull->mutable_ps_pull()->set_server_device(dp.device());
        break;
      }
    }
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("which does not hold it")));
  }
  {
    DistributedProgram p = ring_;
    p.mutable_devices(0)->mutable_instructions(0)->add_deps(MaxId(p) + 5);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing instruction")));
  }
}

// Ranges outside their tensors, and transfers that misstate their bytes.
TEST_F(Corrupted, RangesOutsideTheirTensorsAndMisstatedBytes) {
  {
    DistributedProgram p = ps_;
    Instruction* pull = At(p, Find(p, [](const Instruction& i) { return i.has_ps_pull(); }));
    pull->mutable_ps_pull()->set_bytes(pull->ps_pull().bytes() * 1000000);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("bytes of '" + pull->ps_pull().parameter().tensor())));
  }
  {
    DistributedProgram p = ps_;
    Instruction* pull = At(p, Find(p, [](const Instruction& i) { return i.has_ps_pull(); }));
    pull->mutable_ps_pull()->mutable_parameter()->set_begin(100000);
    pull->mutable_ps_pull()->mutable_parameter()->set_end(100001);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("names rows [100000, 100001)")));
  }
  {
    DistributedProgram p = ps_;
    Instruction* push = At(p, Find(p, [](const Instruction& i) { return i.has_ps_push(); }));
    push->mutable_ps_push()->set_bytes(-1);
    EXPECT_THAT(Validate(p),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("says -1 bytes")));
  }
  {
    DistributedProgram p = ring_;
    ASSERT_GT(p.devices(0).feeds_size(), 0);
    p.mutable_devices(0)->mutable_feeds(0)->set_end(100000);
    EXPECT_THAT(Validate(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("which has 32 (the global batch)")));
  }
}

}  // namespace
}  // namespace quilt
