// Memory repair on the full graph: a layer-wise plan over memory on one
// device by a little is made to fit, by shifting ops to a neighbour with
// room where whole groups are too large to move, and the repaired plan
// fits when lowered, validated and simulated on its own; a plan that fits
// is left as it is; one that cannot fit ends with what is left over;
// ApplyOpMoves keeps every op in one group, in order.
#include "src/planner/memory_repair.h"

#include <algorithm>
#include <set>

#include "src/planner/heterog.h"
#include "src/planner/planner_test_util.h"

namespace quilt {
namespace {

using ::quilt::testing::LowerChecked;
using ::quilt::testing::Make;
using ::quilt::testing::World;

constexpr int64_t kBatch = 16;

// Per device: its peak memory in the full simulation of `s`.
std::vector<int64_t> Peaks(const World& w, const quilt::v1::Strategy& s) {
  quilt::v1::DistributedProgram p = LowerChecked(w, s, kBatch);
  absl::StatusOr<SimResult> r = Simulate(p, w.graph, w.topo, *w.cost);
  EXPECT_THAT(r.status(), IsOk());
  std::vector<int64_t> peaks(w.topo.num_devices(), 0);
  if (!r.ok()) return peaks;
  for (const DeviceUsage& u : r->devices) peaks[w.topo.DeviceIndex(u.device)] = u.peak_memory_bytes;
  return peaks;
}

// The plan, its search space and coarse model on `w`.
struct Searched {
  std::unique_ptr<GraphIndex> index;  // of the full graph
  std::unique_ptr<CoarseModel> coarse;
  std::unique_ptr<SearchSpace> space;
  PlanState layerwise;  // the groups over the four devices in order
};

// `groups`: as CoarsenForSearch takes them (0: its default).
Searched Prepare(const World& w, int groups = 0) {
  Searched s;
  absl::StatusOr<GraphIndex> index = GraphIndex::Build(w.graph);
  EXPECT_THAT(index.status(), IsOk());
  s.index = std::make_unique<GraphIndex>(std::move(*index));
  absl::StatusOr<std::unique_ptr<CoarseModel>> coarse =
      CoarsenForSearch(w.graph, w.topo, *w.cost, kBatch, groups);
  EXPECT_THAT(coarse.status(), IsOk());
  s.coarse = std::move(*coarse);
  s.space = std::make_unique<SearchSpace>(w.topo, *w.cost, *s.coarse, kBatch, 1.0);
  const int n = s.coarse->num_groups();
  for (int k = 0; k < n; ++k) {
    s.layerwise.place.push_back(s.space->SingleOption(k * w.topo.num_devices() / n));
    s.layerwise.method.push_back(Method::kRing);
  }
  return s;
}

// TwoNodes with each device's memory set to `bytes`.
std::unique_ptr<World> WithMemory(const std::vector<int64_t>& bytes) {
  return Make("transformer", testing::TwoNodesWithMemory(bytes));
}

// Each forward op in exactly one group of `s`.
void ExpectPartition(const World& w, const quilt::v1::Strategy& s) {
  std::multiset<std::string> listed;
  for (const auto& g : s.groups()) listed.insert(g.ops().begin(), g.ops().end());
  const std::vector<std::string> forward = ForwardOps(w.graph);
  EXPECT_EQ(listed.size(), forward.size());
  for (const std::string& op : forward) EXPECT_EQ(listed.count(op), 1u) << op;
}

// Device 1 short by `short_permille` of the layer-wise plan's peak there;
// the others with `spare_permille` of theirs to spare. The repaired plan
// fits; checked on its own. Its outcome.
RepairOutcome RepairOneShortDevice(int groups, int64_t short_permille, int64_t spare_permille) {
  // The layer-wise plan's peaks where memory is plenty.
  std::unique_ptr<World> roomy = Make("transformer");
  Searched measured = Prepare(*roomy, groups);
  const std::vector<int64_t> peaks =
      Peaks(*roomy, measured.space->FineStrategy(roomy->graph, measured.layerwise, "layer-wise",
                                                 SearchSpace::kFusePerGroup));
  std::vector<int64_t> memory;
  for (size_t d = 0; d < peaks.size(); ++d) {
    EXPECT_GT(peaks[d], 0) << d;
    memory.push_back(d == 1 ? peaks[d] - peaks[d] * short_permille / 1000
                            : peaks[d] + peaks[d] * spare_permille / 1000);
  }
  std::unique_ptr<World> w = WithMemory(memory);
  Searched s = Prepare(*w, groups);
  absl::StatusOr<RepairOutcome> r = RepairMemory(s.space.get(), *s.index, w->topo, *w->cost, kBatch,
                                                 s.layerwise, absl::InfiniteFuture(), 1000);
  EXPECT_THAT(r.status(), IsOk());
  if (!r.ok()) return {};
  EXPECT_TRUE(r->fits);
  EXPECT_EQ(r->over_bytes, 0);
  EXPECT_EQ(r->shifts, static_cast<int>(r->op_moves.size()));
  // On its own, the repaired plan fits every device.
  quilt::v1::Strategy fine =
      s.space->FineStrategy(w->graph, r->state, "repaired", SearchSpace::kFusePerGroup);
  ApplyOpMoves(*s.index, r->op_moves, &fine);
  ExpectPartition(*w, fine);
  const std::vector<int64_t> after = Peaks(*w, fine);
  for (size_t d = 0; d < after.size(); ++d) EXPECT_LE(after[d], memory[d]) << d;
  EXPECT_GT(after[1], 0);
  return *r;
}

TEST(RepairMemory, MovesWhatItTakesOffADeviceOverItsMemory) {
  const RepairOutcome r = RepairOneShortDevice(/*groups=*/0, 10, 30);
  EXPECT_GT(r.moves + r.shifts, 0);
}

TEST(RepairMemory, ShiftsOpsWhereWholeGroupsAreTooLargeToMove) {
  // One group per device: moving one doubles what its new device holds.
  const RepairOutcome r = RepairOneShortDevice(/*groups=*/4, 10, 12);
  EXPECT_EQ(r.moves, 0);
  EXPECT_GT(r.shifts, 0);
}

TEST(RepairMemory, LeavesAPlanThatFitsAsItIs) {
  std::unique_ptr<World> w = Make("transformer");
  Searched s = Prepare(*w);
  absl::StatusOr<RepairOutcome> r = RepairMemory(s.space.get(), *s.index, w->topo, *w->cost, kBatch,
                                                 s.layerwise, absl::InfiniteFuture(), 1000);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_TRUE(r->fits);
  EXPECT_EQ(r->moves + r->shifts, 0);
  EXPECT_TRUE(r->state == s.layerwise);
  EXPECT_EQ(r->simulated, 1);
}

TEST(RepairMemory, EndsWithWhatIsLeftOverWhereNothingFits) {
  std::unique_ptr<World> w = WithMemory(std::vector<int64_t>(4, int64_t{1} << 20));
  Searched s = Prepare(*w);
  absl::StatusOr<RepairOutcome> r = RepairMemory(s.space.get(), *s.index, w->topo, *w->cost, kBatch,
                                                 s.layerwise, absl::InfiniteFuture(), 50);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_FALSE(r->fits);
  EXPECT_GT(r->over_bytes, 0);
  EXPECT_LE(r->simulated, 51);
}

TEST(DescribeRepair, SaysWhatTheRepairDid) {
  RepairOutcome r;
  r.fits = true;
  r.simulated = 1;
  EXPECT_EQ(DescribeRepair(r, 0.5), "it fits as it is (1 plan simulated in full, 0.50 s)");
  r.moves = 1;
  r.served = 2;
  r.shifts = 3;
  r.simulated = 40;
  EXPECT_EQ(DescribeRepair(r, 1.25),
            "moving 1 group, serving the parameters of 2 groups otherwise and shifting 3 ops to "
            "neighbouring groups off the devices over their memory made it fit (40 plans "
            "simulated in full, 1.25 s)");
  r.fits = false;
  r.moves = 0;
  r.served = 0;
  r.over_bytes = 3 << 20;
  EXPECT_EQ(DescribeRepair(r, 1),
            "shifting 3 ops to neighbouring groups left it 3.0MiB over, in all (40 plans simulated "
            "in full, 1.00 s)");
  r.shifts = 0;
  EXPECT_EQ(DescribeRepair(r, 1),
            "no move off the devices over their memory helped (40 plans simulated in full, 1.00 "
            "s)");
  // Ended by its deadline rather than its simulations: machine-dependent.
  r.ended_by_time = true;
  EXPECT_EQ(DescribeRepair(r, 2.5),
            "no move off the devices over their memory helped (40 plans simulated in full, 2.50 "
            "s; ended by its time limit, so on a faster machine or with a longer --time-budget it "
            "may go further)");
}

TEST(ApplyOpMoves, MovesOpsToTheEndOrFrontOfTheirGroup) {
  quilt::v1::Strategy s;
  auto* a = s.add_groups();
  a->set_group(3);
  for (const char* op : {"a", "b", "c"}) a->add_ops(op);
  auto* b = s.add_groups();
  b->set_group(4);
  for (const char* op : {"d", "e", "f"}) b->add_ops(op);
  // c then b to the front of group 4; f to the end of group 3; an unknown
  // op and an unknown group are passed over.
  const Graph none;
  absl::StatusOr<GraphIndex> index = GraphIndex::Build(none);
  ASSERT_THAT(index.status(), IsOk());
  ApplyOpMoves(*index,
               {{"c", 4, false}, {"b", 4, false}, {"f", 3, true}, {"x", 3, true}, {"a", 9, true}},
               &s);
  EXPECT_THAT(s.groups(0).ops(), ::testing::ElementsAre("a", "f"));
  EXPECT_THAT(s.groups(1).ops(), ::testing::ElementsAre("b", "c", "d", "e"));
}

TEST(ApplyOpMoves, AggregatesAMovedOpsParametersAsItsNewGroupsOthers) {
  // a, b and d each multiply by a parameter of their own.
  Graph g;
  GraphBuilder builder(&g);
  ASSERT_THAT(builder.AddInput("x", DType::kF32, Shape({Dim::Batch(), Dim::Fixed(4)})).status(),
              IsOk());
  std::string rows = "x";
  for (const auto& [name, param] : {std::pair{"a", "wa"}, {"b", "wb"}, {"d", "wd"}}) {
    ASSERT_THAT(builder.AddParameter(param, Shape::Fixed({4, 4}), InitializerSpec{}).status(),
                IsOk());
    absl::StatusOr<std::string> out = builder.Add("MatMul", {rows, param}, {}, name);
    ASSERT_THAT(out.status(), IsOk());
    rows = *out;
  }
  absl::StatusOr<GraphIndex> index = GraphIndex::Build(g);
  ASSERT_THAT(index.status(), IsOk());
  ASSERT_GE(index->OpIndex("b"), 0);
  quilt::v1::Strategy s;
  auto* one = s.add_groups();
  one->set_group(0);
  one->add_ops("a");
  one->add_ops("b");
  auto* two = s.add_groups();
  two->set_group(1);
  two->add_ops("d");
  for (const char* p : {"wa", "wb"}) {
    auto* a = s.add_aggregations();
    a->set_parameter(p);
    a->set_method(quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER);
    a->add_servers("n0/gpu:0");
  }
  auto* d = s.add_aggregations();
  d->set_parameter("wd");
  d->set_method(quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  d->set_bucket(2);
  ApplyOpMoves(*index, {{"b", 1, false}}, &s);
  EXPECT_THAT(s.groups(1).ops(), ::testing::ElementsAre("b", "d"));
  ASSERT_EQ(s.aggregations_size(), 3);
  EXPECT_EQ(s.aggregations(1).parameter(), "wb");
  EXPECT_EQ(s.aggregations(1).method(), quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE);
  EXPECT_EQ(s.aggregations(1).bucket(), 2);
  EXPECT_TRUE(s.aggregations(1).servers().empty());
  // The op left behind keeps its own.
  EXPECT_EQ(s.aggregations(0).method(), quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER);
}

}  // namespace
}  // namespace quilt
