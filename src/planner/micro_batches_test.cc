#include "src/planner/micro_batches.h"

#include <map>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/planner/lookups.h"
#include "src/planner/lower.h"
#include "src/planner/planner_test_util.h"
#include "src/planner/program_validator.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

using quilt::v1::DistributedProgram;
using quilt::v1::Instruction;
using ::testing::AllOf;
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

// The batch of 18 as four micro-batches: two of 4 rows, then two of 5.
// Each op with batch rows runs once per micro-batch on the rows the
// lowering at that micro-batch's rows gives it, moved to the micro-batch's
// place in the batch; micro-batches follow one another without gaps; the
// step's per-step instructions (updates) run once; the program validates.
TEST(MicroBatches, CountsThatDoNotDivideTheBatchGiveMicroBatchesOfTwoSizes) {
  EXPECT_EQ(DescribeMicroBatches(18, 4), "4 micro-batches of 4 or 5 rows");
  EXPECT_EQ(DescribeMicroBatches(16, 4), "4 micro-batches of 4 rows");
  auto w = testing::Make("transformer");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  const absl::StatusOr<DistributedProgram> four = Lower(w->graph, s, w->topo, w->cost.get(), 4);
  const absl::StatusOr<DistributedProgram> five = Lower(w->graph, s, w->topo, w->cost.get(), 5);
  s.set_micro_batches(4);
  const absl::StatusOr<DistributedProgram> micro = Lower(w->graph, s, w->topo, w->cost.get(), 18);
  ASSERT_THAT(four.status(), IsOk());
  ASSERT_THAT(five.status(), IsOk());
  ASSERT_THAT(micro.status(), IsOk());
  EXPECT_EQ(micro->global_batch(), 18);
  EXPECT_EQ(micro->micro_batches(), 4);
  ASSERT_THAT(ValidateProgram(*micro, w->graph, w->topo), IsOk());

  const auto at4 = Runs(*four), at5 = Runs(*five), repeated = Runs(*micro);
  const int64_t begins[] = {0, 4, 8, 13}, sizes[] = {4, 4, 5, 5};
  for (int j = 0; j < 4; ++j) {
    const MicroBatchSpan m = MicroBatchRange(18, 4, j);
    EXPECT_EQ(m.begin, begins[j]);
    EXPECT_EQ(m.end - m.begin, sizes[j]);
  }
  ASSERT_EQ(at4.size(), repeated.size());
  for (const auto& [op, runs] : at4) {
    std::multiset<std::pair<std::string, std::pair<int64_t, int64_t>>> want;
    for (int j = 0; j < 4; ++j) {
      for (const auto& [device, rows] : (sizes[j] == 4 ? runs : at5.at(op))) {
        want.insert({device, {rows.first + begins[j], rows.second + begins[j]}});
      }
    }
    EXPECT_EQ(repeated.at(op), want) << op;
  }
  // Updates (no batch rows, run once per step): as often as at 4 rows.
  auto updates = [](const DistributedProgram& p) {
    int n = 0;
    for (const auto& dp : p.devices()) {
      for (const Instruction& ins : dp.instructions()) {
        n += ins.has_compute() && ins.micro_batch() == 0 && ins.compute().end() == 0;
      }
    }
    return n;
  };
  EXPECT_EQ(updates(*micro), updates(*four));
  EXPECT_GT(updates(*micro), 0);
  std::set<int64_t> ids;
  for (const auto& dp : micro->devices()) {
    for (const Instruction& ins : dp.instructions()) {
      EXPECT_TRUE(ids.insert(ins.id()).second) << "id " << ins.id() << " twice";
      for (int64_t d : ins.deps()) EXPECT_LT(d, ins.id());
      if (!ins.has_compute() || ins.micro_batch() == 0) continue;
      const MicroBatchSpan m = MicroBatchRange(18, 4, ins.micro_batch() - 1);
      EXPECT_GE(ins.compute().begin(), m.begin) << ins.compute().op();
      EXPECT_LE(ins.compute().end(), m.end) << ins.compute().op();
    }
  }
  absl::StatusOr<SimResult> r = Simulate(*micro, w->graph, w->topo, *w->cost);
  ASSERT_THAT(r.status(), IsOk());
  absl::StatusOr<SimResult> r5 = Simulate(*five, w->graph, w->topo, *w->cost);
  ASSERT_THAT(r5.status(), IsOk());
  EXPECT_GE(Peak(*r), Peak(*r5));
  EXPECT_GT(r->step_time_s, r5->step_time_s);
}

// The batch of (devices + devices - 1) rows as two micro-batches: the
// smaller one has a row fewer than the devices, so one device runs only in
// the larger micro-batch. Its weight gradients are written there, not
// added to a value no micro-batch wrote; the program validates and runs in
// the simulator.
TEST(MicroBatches, ASmallerMicroBatchMayLeaveADeviceOut) {
  auto w = testing::Make("transformer");
  const int n = w->topo.num_devices();
  ASSERT_GE(n, 2);
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches(2);
  const absl::StatusOr<DistributedProgram> p =
      Lower(w->graph, s, w->topo, w->cost.get(), 2 * n - 1);
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
  int left_out = 0;
  for (const auto& dp : p->devices()) {
    std::set<int> micro;
    for (const Instruction& ins : dp.instructions()) {
      if (ins.has_compute() && ins.micro_batch() > 0) micro.insert(ins.micro_batch());
    }
    if (micro != std::set<int>{2}) continue;
    ++left_out;
    for (const Instruction& ins : dp.instructions()) {
      EXPECT_FALSE(ins.has_compute() && ins.compute().accumulate()) << ins.compute().op();
    }
  }
  EXPECT_EQ(left_out, 1);
  EXPECT_THAT(Simulate(*p, w->graph, w->topo, *w->cost).status(), IsOk());
}

// Transfers run both once per micro-batch (activations from the lookup's
// device) and once per step (the tied embedding's gradient parts): where
// micro-batches differ in size, the two lowerings number their tags and
// collectives alike, and the unrolled program still uses each once.
TEST(MicroBatches, MicroBatchesOfTwoSizesKeepTagsUnique) {
  auto w = testing::Make("transformer");
  quilt::v1::Strategy s = testing::TiedSplit(w->graph, w->topo);
  for (int k : {2, 3, 5}) {
    SCOPED_TRACE(k);
    s.set_micro_batches(k);
    absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 16 + 1);
    ASSERT_THAT(p.status(), IsOk());
    EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
    bool step_send = false, micro_send = false;
    for (const auto& dp : p->devices()) {
      for (const Instruction& ins : dp.instructions()) {
        if (!ins.has_send()) continue;
        (ins.micro_batch() == 0 ? step_send : micro_send) = true;
      }
    }
    EXPECT_TRUE(step_send && micro_send);
  }
}

// Per device, the receives of `tensor` and whether it keeps it.
struct Fetches {
  std::vector<std::string> peers;
  bool kept = false;
};
Fetches FetchesOf(const DistributedProgram& p, const std::string& device,
                  const std::string& tensor) {
  Fetches f;
  for (const auto& dp : p.devices()) {
    if (dp.device() != device) continue;
    for (const Instruction& ins : dp.instructions()) {
      if (ins.has_recv() && ins.recv().range().tensor() == tensor) {
        f.peers.push_back(ins.recv().peer_device());
      }
    }
    for (const auto& r : dp.persistent()) f.kept |= r.tensor() == tensor;
  }
  return f;
}

// The tied embedding's lookup on fast/gpu:0 and slow/gpu:0 in the micro-
// batches of 2 rows, on fast/gpu:0 alone in those of 1 row, the output
// projection on slow/gpu:1 (which fetches the weight from slow/gpu:0, on
// its node, at 2 rows, and from fast/gpu:0 at 1 row) or on slow/gpu:0
// (which keeps it at 2 rows and fetches it at 1: `held`). The batch of 3
// as micro-batches of 1 and 2 rows reads the weight there as the larger
// micro-batches provide it: one receive per step (from their peer), or
// none; the program validates and simulates.
TEST(MicroBatches, MicroBatchesOfTwoSizesShareAWeightFetchedFromOtherHolders) {
  auto w = testing::Make("transformer");
  const std::string weight = w->graph.parameters[0].tensor;
  for (bool held : {false, true}) {
    SCOPED_TRACE(held);
    const std::string rest = held ? "slow/gpu:0" : "slow/gpu:1";
    quilt::v1::Strategy s =
        testing::FirstOpsMoveWithRows(w->graph, 1, "fast/gpu:0", "slow/gpu:0", rest);
    // (The case: the two sizes provide the weight otherwise. The smaller
    // micro-batches' lookup runs on fast/gpu:0 alone, as it does when
    // slow/gpu:0 lists no replica.)
    quilt::v1::Strategy alone = s;
    alone.mutable_groups(0)->mutable_replicas(1)->set_replicas(0);
    const absl::StatusOr<DistributedProgram> one =
        Lower(w->graph, alone, w->topo, w->cost.get(), 1);
    const absl::StatusOr<DistributedProgram> two = Lower(w->graph, s, w->topo, w->cost.get(), 2);
    ASSERT_THAT(one.status(), IsOk());
    ASSERT_THAT(two.status(), IsOk());
    const Fetches at_one = FetchesOf(*one, rest, weight), at_two = FetchesOf(*two, rest, weight);
    ASSERT_EQ(at_one.peers, std::vector<std::string>{"fast/gpu:0"}) << weight;
    ASSERT_FALSE(at_one.kept);
    if (held) {
      ASSERT_TRUE(at_two.kept);
      ASSERT_TRUE(at_two.peers.empty());
    } else {
      ASSERT_EQ(at_two.peers, std::vector<std::string>{"slow/gpu:0"});
    }
    s.set_micro_batches(2);
    const absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 3);
    ASSERT_THAT(p.status(), IsOk());
    const Fetches step = FetchesOf(*p, rest, weight);
    EXPECT_EQ(step.peers, at_two.peers);
    EXPECT_EQ(step.kept, held);
    EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
    EXPECT_THAT(Simulate(*p, w->graph, w->topo, *w->cost).status(), IsOk());
  }
}

// The batch of 7 as micro-batches of 3 and 4 rows, the smaller ones
// lowered by the strategy's own placement at 3 rows (not from the larger
// ones' rows, as Lower places them): UnrollMicroBatches's status.
absl::Status UnrollOwnSplitsOfSeven(const testing::World& w, quilt::v1::Strategy s) {
  s.set_micro_batches(1);
  absl::StatusOr<DistributedProgram> four = Lower(w.graph, s, w.topo, w.cost.get(), 4);
  const absl::StatusOr<DistributedProgram> three = Lower(w.graph, s, w.topo, w.cost.get(), 3);
  ASSIGN_OR_RETURN(const GraphIndex ix, GraphIndex::Build(w.graph));
  RETURN_IF_ERROR(four.status());
  RETURN_IF_ERROR(three.status());
  return UnrollMicroBatches(ix, 7, 2, &*four, &*three);
}

// A split of fewer rows can give a device rows of a group that the larger
// split gives none: 3 rows over counts 1:3:3 give one each, 4 rows give
// 0:2:2. The smaller micro-batches are placed from the larger ones' rows
// instead (one row fewer on a device of the most), so the batch of 7 as
// micro-batches of 3 and 4 rows lowers and validates, fast/gpu:1 running
// the second group in neither. A smaller program lowered by the
// strategy's own split at 3 rows would run it there, its gradients
// missing the step's aggregation: unrolling such a pair is refused, naming
// the op and the device.
TEST(MicroBatches, TheSmallerMicroBatchesRunOnlyWhereTheLargerDo) {
  auto w = testing::Make("mlp");
  const std::vector<std::string> fwd = ForwardOps(w->graph);
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.clear_groups();
  const std::vector<std::vector<std::pair<std::string, int>>> replicas = {
      {{"fast/gpu:0", 2}, {"fast/gpu:1", 1}},
      {{"fast/gpu:1", 1}, {"slow/gpu:0", 3}, {"slow/gpu:1", 3}}};
  std::set<std::string> second;
  for (int k = 0; k < 2; ++k) {
    auto* grp = s.add_groups();
    grp->set_group(k);
    for (size_t i = fwd.size() * k / 2; i < fwd.size() * (k + 1) / 2; ++i) {
      grp->add_ops(fwd[i]);
      if (k == 1) second.insert(fwd[i]);
    }
    for (const auto& [device, count] : replicas[k]) {
      auto* r = grp->add_replicas();
      r->set_device(device);
      r->set_replicas(count);
    }
  }
  s.set_micro_batches(2);
  const absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 7);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
  for (const auto& dp : p->devices()) {
    if (dp.device() != "fast/gpu:1") continue;
    for (const Instruction& ins : dp.instructions()) {
      EXPECT_FALSE(ins.has_compute() && second.count(ins.compute().op()))
          << ins.compute().op() << " in micro-batch " << ins.micro_batch();
    }
  }
  // The strategy's own splits at 3 and 4 rows, unrolled as a pair.
  EXPECT_THAT(UnrollOwnSplitsOfSeven(*w, s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("runs on fast/gpu:1 in the micro-batches of 3 rows"),
                             HasSubstr("at 4 rows"))));
}

// A table gathered by sparse lookup runs its lookups' gradient over the
// whole micro-batch on each of its devices (each for its part of the
// table). Data parallel over the four devices, the batch of 7 as
// micro-batches of 3 and 4 rows: at 3 rows a device has no rows, and the
// table keeps it (the program validates and simulates, the lookups'
// gradient on all four devices in every micro-batch). The strategy's own
// placement at 3 rows would leave the table three devices: unrolling such
// a pair is refused, naming the lookup.
TEST(MicroBatches, ATableGatheredBySparseLookupKeepsItsDevices) {
  auto w = testing::Make("transformer");
  const absl::StatusOr<GraphIndex> ix = GraphIndex::Build(w->graph);
  ASSERT_THAT(ix.status(), IsOk());
  const std::map<std::string, std::vector<int>> tables = LookupTables(*ix);
  ASSERT_FALSE(tables.empty());
  quilt::v1::Strategy s = testing::EvenRing(*w);
  for (auto& a : *s.mutable_aggregations()) {
    if (tables.count(a.parameter())) a.set_method(quilt::v1::AGGREGATION_METHOD_SPARSE_LOOKUP);
  }
  s.set_micro_batches(2);
  const absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 7);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
  EXPECT_THAT(Simulate(*p, w->graph, w->topo, *w->cost).status(), IsOk());
  const std::string lookup_grad = w->graph.ops[tables.begin()->second[0]].name;
  std::map<int, std::set<std::string>> ran;  // micro-batch -> devices
  for (const auto& dp : p->devices()) {
    for (const Instruction& ins : dp.instructions()) {
      if (ins.has_compute() && ins.compute().op() == lookup_grad) {
        ran[ins.micro_batch()].insert(dp.device());
      }
    }
  }
  ASSERT_EQ(ran.size(), 2u) << lookup_grad;
  for (const auto& [micro, devices] : ran) EXPECT_EQ(devices.size(), 4u) << micro;
  // The strategy's own placements at 3 and 4 rows, unrolled as a pair.
  EXPECT_THAT(UnrollOwnSplitsOfSeven(*w, s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("runs over the whole micro-batch on 4 devices"),
                             HasSubstr("gathered by sparse lookup"))));
}

// Seeded random strategies (groups on random device subsets with random
// replica counts, random aggregation methods) over random batches and
// micro-batch counts: each lowering is refused with a reason that names
// micro-batches or gradient accumulation, or validates and simulates;
// with random micro-batches in flight too, refused alike or running the
// same ops on the same rows.
TEST(MicroBatches, RandomStrategiesAreRefusedOrValid) {
  for (const char* model : {"mlp", "transformer"}) {
    SCOPED_TRACE(model);
    auto w = testing::Make(model);
    int lowered = 0;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
      quilt::v1::Strategy s = testing::RandomStrategy(w->graph, w->topo, seed, 4, 4);
      std::mt19937_64 rng(seed * 7);
      const int64_t batch = 5 + static_cast<int64_t>(rng() % 20);
      s.set_micro_batches(2 + static_cast<int>(rng() % (batch - 1)));
      quilt::v1::Strategy pipelined = s;
      pipelined.set_micro_batches_in_flight(static_cast<int>(rng() % (s.micro_batches() + 1)));
      SCOPED_TRACE(absl::StrCat("seed ", seed, ", batch ", batch, " as ", s.micro_batches(), ", ",
                                pipelined.micro_batches_in_flight(), " in flight"));
      const absl::StatusOr<DistributedProgram> p =
          Lower(w->graph, s, w->topo, w->cost.get(), batch);
      const absl::StatusOr<DistributedProgram> q =
          Lower(w->graph, pipelined, w->topo, w->cost.get(), batch);
      EXPECT_EQ(p.status(), q.status());
      if (q.ok()) {
        EXPECT_THAT(ValidateProgram(*q, w->graph, w->topo), IsOk());
        EXPECT_THAT(Simulate(*q, w->graph, w->topo, *w->cost).status(), IsOk());
        if (p.ok()) EXPECT_EQ(Runs(*p), Runs(*q));
      }
      if (!p.ok()) {
        EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                         ::testing::AnyOf(HasSubstr("micro-batches"),
                                                          HasSubstr("gradient accumulation"))));
        continue;
      }
      ++lowered;
      EXPECT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
      EXPECT_THAT(Simulate(*p, w->graph, w->topo, *w->cost).status(), IsOk());
    }
    // (Most lower: the case is not vacuous.)
    EXPECT_GT(lowered, 50);
  }
}

// Layers over the four devices as 8 micro-batches: with 2 and 4 in flight
// a device begins the next micro-batches while the later stages work on
// the earlier ones, so the step is shorter than one at a time; each
// program validates; every added weight gradient is written after the earlier
// micro-batch's write of it on that device (they may no longer run in
// turn); and the earlier micro-batch's instructions outrank the later's.
// The middle stages hold more activations at their peak with more in
// flight.
TEST(MicroBatches, MicroBatchesInFlightOverlapOverTheStages) {
  auto w = testing::Make("transformer");
  quilt::v1::Strategy s = testing::Stages(w->graph, w->topo, {0, 1, 2, 3});
  s.set_micro_batches(8);
  std::map<int, SimResult> sim;
  for (int in_flight : {1, 2, 4}) {
    SCOPED_TRACE(in_flight);
    s.set_micro_batches_in_flight(in_flight);
    absl::StatusOr<DistributedProgram> p = Lower(w->graph, s, w->topo, w->cost.get(), 16);
    ASSERT_THAT(p.status(), IsOk());
    ASSERT_THAT(ValidateProgram(*p, w->graph, w->topo), IsOk());
    absl::StatusOr<SimResult> r = Simulate(*p, w->graph, w->topo, *w->cost);
    ASSERT_THAT(r.status(), IsOk());
    sim[in_flight] = *r;
    for (const auto& dp : p->devices()) {
      std::map<int64_t, const Instruction*> by_id;
      for (const Instruction& ins : dp.instructions()) by_id[ins.id()] = &ins;
      for (const Instruction& ins : dp.instructions()) {
        if (!ins.has_compute() || !ins.compute().accumulate()) continue;
        bool after_earlier = false;
        for (int64_t d : ins.deps()) {
          auto it = by_id.find(d);
          after_earlier |= it != by_id.end() && it->second->has_compute() &&
                           it->second->compute().op() == ins.compute().op() &&
                           it->second->micro_batch() == ins.micro_batch() - 1;
        }
        EXPECT_TRUE(after_earlier || in_flight == 1)
            << ins.compute().op() << " micro-batch " << ins.micro_batch() << " on " << dp.device();
      }
      if (in_flight == 1) continue;
      // (An op of two micro-batches: the earlier first.)
      for (const Instruction& ins : dp.instructions()) {
        if (!ins.has_compute() || ins.micro_batch() < 2) continue;
        const std::string& op = ins.compute().op();
        for (const Instruction& other : dp.instructions()) {
          if (other.has_compute() && other.compute().op() == op &&
              other.micro_batch() == ins.micro_batch() - 1) {
            EXPECT_GT(other.priority(), ins.priority()) << op;
          }
        }
        break;  // one op per device is enough
      }
    }
  }
  EXPECT_LT(sim[2].step_time_s, 0.9 * sim[1].step_time_s);
  EXPECT_LE(sim[4].step_time_s, sim[2].step_time_s);
  // (The middle stages: the first's peak is its embedding's gradient.)
  for (int d : {1, 2}) {
    const std::string device = w->topo.device(d).id;
    auto peak_of = [&](const SimResult& r) {
      for (const auto& u : r.devices) {
        if (u.device == device) return u.peak_memory_bytes;
      }
      return int64_t{0};
    };
    EXPECT_GT(peak_of(sim[2]), peak_of(sim[1])) << device;
    EXPECT_GT(peak_of(sim[4]), peak_of(sim[2])) << device;
  }
}

// Micro-batches in flight below 0, or without micro-batches, are refused
// by name.
TEST(MicroBatches, RefusesMicroBatchesInFlightWithoutMicroBatches) {
  auto w = testing::Make("mlp");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches_in_flight(2);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("micro_batches_in_flight 2 needs more than one micro-batch")));
  s.set_micro_batches(4);
  s.set_micro_batches_in_flight(-1);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("micro_batches_in_flight -1 is below 0")));
  // More than the micro-batches: all of them.
  s.set_micro_batches_in_flight(9);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(), IsOk());
}

TEST(MicroBatches, RefusesCountsOutsideOneToTheBatchRows) {
  auto w = testing::Make("mlp");
  quilt::v1::Strategy s = testing::EvenRing(*w);
  s.set_micro_batches(17);
  EXPECT_THAT(Lower(w->graph, s, w->topo, w->cost.get(), 16).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the batch 16 has fewer rows than 17 micro-batches")));
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
