// A strategy that says something Quilt would not do as written is refused
// by Place, naming what: ops in two groups or in none that exists, group
// ids other than their positions, aggregations of no parameter or twice,
// unknown enum values, negative buckets, and op priorities (never read).
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/planner/placement.h"
#include "src/planner/planner_test_util.h"

namespace quilt::testing {
namespace {

using ::testing::HasSubstr;

TEST(StrategyChecks, EachEditIsRefusedNamingIt) {
  auto w = Make("cnn");
  const quilt::v1::Strategy good = EvenRing(*w);
  ASSERT_GE(good.groups_size(), 1);
  ASSERT_GE(good.aggregations_size(), 1);
  ASSERT_THAT(Place(w->graph, good, w->topo, 16), IsOk());
  // A second group to move ops between: the first group's last op.
  quilt::v1::Strategy two = good;
  auto* second = two.add_groups();
  *second = good.groups(0);
  second->clear_ops();
  two.mutable_groups(0)->mutable_ops()->RemoveLast();
  second->add_ops(good.groups(0).ops(good.groups(0).ops_size() - 1));
  second->set_group(1);
  ASSERT_THAT(Place(w->graph, two, w->topo, 16), IsOk());
  const std::string param = good.aggregations(0).parameter();

  struct Edit {
    std::string what;
    std::function<void(quilt::v1::Strategy*)> apply;
    std::string says;
  };
  const std::vector<Edit> edits = {
      {"an op in two groups",
       [](quilt::v1::Strategy* s) { s->mutable_groups(1)->add_ops(s->groups(0).ops(0)); },
       "is in group 0 and in group 1"},
      {"an op twice in its group",
       [](quilt::v1::Strategy* s) { s->mutable_groups(1)->add_ops(s->groups(1).ops(0)); },
       "group 1 names op '"},
      {"a device twice in a group",
       [](quilt::v1::Strategy* s) {
         *s->mutable_groups(0)->add_replicas() = s->groups(0).replicas(0);
       },
       "' twice (one entry per device: its replica count)"},
      {"an unknown op", [](quilt::v1::Strategy* s) { s->mutable_groups(0)->add_ops("nope"); },
       "names op 'nope', which is no op of the graph"},
      {"a gradient op named as a group's",
       [&](quilt::v1::Strategy* s) {
         for (const Op& op : w->graph.ops) {
           if (!op.forward_op.empty()) {
             s->mutable_groups(0)->add_ops(op.name);
             break;
           }
         }
       },
       "which is not a forward op"},
      {"a duplicate group id", [](quilt::v1::Strategy* s) { s->mutable_groups(0)->set_group(1); },
       "at position 0 has id 1"},
      {"a negative group id", [](quilt::v1::Strategy* s) { s->mutable_groups(1)->set_group(-1); },
       "at position 1 has id -1"},
      {"an aggregation of no parameter",
       [](quilt::v1::Strategy* s) {
         *s->add_aggregations() = s->aggregations(0);
         s->mutable_aggregations(s->aggregations_size() - 1)->set_parameter("nope");
       },
       "aggregates 'nope', which is no parameter"},
      {"an aggregation twice",
       [](quilt::v1::Strategy* s) { *s->add_aggregations() = s->aggregations(0); },
       "aggregates '" + param + "' twice"},
      {"an unknown method",
       [](quilt::v1::Strategy* s) {
         s->mutable_aggregations(0)->set_method(static_cast<quilt::v1::AggregationMethod>(77));
       },
       "aggregation method 77"},
      {"a negative bucket",
       [](quilt::v1::Strategy* s) { s->mutable_aggregations(0)->set_bucket(-3); },
       "negative bucket -3"},
      {"op priorities",
       [](quilt::v1::Strategy* s) {
         auto* p = s->add_priorities();
         p->set_op(s->groups(0).ops(0));
         p->set_priority(1);
       },
       "op priorities, which Quilt does not read"},
      {"an unknown execution order",
       [](quilt::v1::Strategy* s) { s->set_order(static_cast<quilt::v1::ExecutionOrder>(99)); },
       "execution order 99"},
  };
  for (const Edit& e : edits) {
    quilt::v1::Strategy s = two;
    e.apply(&s);
    EXPECT_THAT(Place(w->graph, s, w->topo, 16),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(e.says)))
        << e.what;
  }
}

}  // namespace
}  // namespace quilt::testing
