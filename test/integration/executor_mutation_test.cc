// quilt-executor given programs that are well-formed but say wrong things
// (a dim, dtype, id or range changed; an op's output, an instruction or a
// dependency removed or repeated; a group or batch set to an edge value):
// each run ends with success or a clear error (exit status 1 and a
// message), never killed by a signal, never hung.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/planner/baselines.h"
#include "src/testing/proto_mutator.h"
#include "test/integration/executor_fixture.h"

namespace quilt::testing {
namespace {

void RunMutations(const Model& model, quilt::v1::AggregationMethod method, int trials,
                  unsigned seed) {
  // One node of two devices: one process runs the whole program, its
  // communication within it.
  auto s = Prepare(model, Cluster(1, 2));
  absl::StatusOr<quilt::v1::DistributedProgram> clean =
      Program(*s, DataParallelStrategy(s->graph, s->topo, {1, 1}, method, "even"), model.batch);
  ASSERT_THAT(clean.status(), IsOk());
  TempDir dir;
  std::mt19937 rng(seed);
  int failed = 0;
  for (int trial = 0; trial < trials; ++trial) {
    quilt::v1::DistributedProgram p = *clean;
    std::vector<std::string> did;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      did.push_back(MutateMessage(&p, &rng));
    }
    const JobDir job = WriteJob(dir, absl::StrCat("t", trial), p);
    absl::StatusOr<CommandResult> r =
        RunCommand(job.Argv("w0", 0, 2, s->data, {"--threads", "1", "--step-timeout", "20"}),
                   absl::Seconds(60));
    ASSERT_THAT(r.status(), IsOk());
    const std::string what =
        absl::StrCat(model.name, " trial ", trial, " (", absl::StrJoin(did, "; "), "): ", r->err);
    // 0 or 1: a signal shows as 128 + its number, a hang as -1.
    EXPECT_TRUE(r->exit_code == 0 || r->exit_code == 1) << "exit " << r->exit_code << ", " << what;
    if (r->exit_code == 1) {
      ++failed;
      EXPECT_THAT(r->err, ::testing::HasSubstr("quilt-executor: ")) << what;
    }
  }
  // The mutations reach what the executor checks.
  EXPECT_GT(failed, trials / 4) << model.name;
}

TEST(ExecutorMutations, RingPrograms_EndCleanly) {
  RunMutations({"mlp", "sgd", 8}, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, 40, 5);
  RunMutations({"cnn", "adam", 8}, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, 40, 6);
}

TEST(ExecutorMutations, ParameterServerPrograms_EndCleanly) {
  RunMutations({"transformer", "sgd", 8}, quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER, 40, 7);
}

}  // namespace
}  // namespace quilt::testing
