// ArenaProgram: copies are independent programs, moves hand the program on.
#include "src/planner/arena_program.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace quilt {
namespace {

ArenaProgram WithStrategy(const std::string& name) {
  ArenaProgram p;
  p.Adopt(google::protobuf::Arena::CreateMessage<quilt::v1::DistributedProgram>(p.NewArena()));
  p->mutable_strategy()->set_name(name);
  p->add_devices()->set_device("n/gpu:0");
  return p;
}

TEST(ArenaProgram, ACopyIsItsOwn) {
  ArenaProgram a = WithStrategy("a");
  ArenaProgram b = a;
  b->mutable_strategy()->set_name("b");
  EXPECT_EQ(a->strategy().name(), "a");
  EXPECT_EQ(b->strategy().name(), "b");
  EXPECT_EQ(b->devices(0).device(), "n/gpu:0");
  EXPECT_NE(&*a, &*b);
  ArenaProgram c;
  c = b;
  b = ArenaProgram();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c->strategy().name(), "b");
}

TEST(ArenaProgram, AMoveHandsTheProgramOn) {
  ArenaProgram a = WithStrategy("a");
  const quilt::v1::DistributedProgram* before = &*a;
  ArenaProgram b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(&*b, before);
  EXPECT_EQ(b->strategy().name(), "a");
}

}  // namespace
}  // namespace quilt
