// Planning a job on nodes other jobs already run on: the busy nodes'
// devices are shared (their speed divided, their memory less what the
// running jobs' plans hold), so a plan prefers idle nodes.
#include "src/coordinator/job_submission.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "src/cluster/topology.h"
#include "src/common/fake_clock.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/store/sqlite_store.h"
#include "src/cost/cost_model.h"
#include "src/planner/baselines.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/data/npz.h"
#include "src/testing/node_info.h"
#include "src/testing/temp_dir.h"
#include "src/testing/zoo_training.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::SizeIs;

quilt::v1::JobStatus Job(quilt::v1::JobState state, std::vector<std::string> nodes,
                         int64_t memory_per_node) {
  quilt::v1::JobStatus s;
  s.set_state(state);
  for (const std::string& n : nodes) {
    s.add_nodes(n);
    (*s.mutable_predicted_memory_bytes())[n] = memory_per_node;
  }
  return s;
}

quilt::v1::ClusterSpec Cluster() {
  quilt::v1::ClusterSpec spec;
  *spec.add_nodes() = testing::CpuNodeInfo("a");
  *spec.add_nodes() = testing::CpuNodeInfo("b", 2);
  return spec;
}

TEST(NodeLoads, CountsTheJobsNotEndedAndTheirMemory) {
  const auto loads = NodeLoads({Job(quilt::v1::JOB_STATE_RUNNING, {"a", "b"}, 100),
                                Job(quilt::v1::JOB_STATE_PENDING, {"a"}, 50),
                                Job(quilt::v1::JOB_STATE_SUCCEEDED, {"b"}, 1000)});
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads.at("a").jobs, 2);
  EXPECT_EQ(loads.at("a").memory_bytes, 150);
  EXPECT_EQ(loads.at("b").jobs, 1);
  EXPECT_EQ(loads.at("b").memory_bytes, 100);
}

TEST(ShareBusyNodes, DividesABusyNodesSpeedAndTakesItsJobsMemory) {
  quilt::v1::ClusterSpec spec = Cluster();
  const auto lines = ShareBusyNodes({{"b", {1, int64_t{256} << 20}}}, {}, &spec);
  const quilt::v1::Device& idle = spec.nodes(0).devices(0);
  EXPECT_DOUBLE_EQ(idle.measured_gemm_flops_per_s(), 1e11);
  EXPECT_EQ(idle.memory_bytes(), 1 << 30);
  for (const quilt::v1::Device& d : spec.nodes(1).devices()) {
    EXPECT_DOUBLE_EQ(d.measured_gemm_flops_per_s(), 5e10);
    EXPECT_EQ(d.memory_bytes(), (int64_t{1} << 30) - (int64_t{128} << 20));  // half each
  }
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], HasSubstr("b: shared with 1 running job(s): planned at 1/2"));
  // Figures measured while the job ran already hold its load: memory only.
  quilt::v1::ClusterSpec measured = Cluster();
  ShareBusyNodes({{"b", {1, 0}}}, {"b"}, &measured);
  EXPECT_DOUBLE_EQ(measured.nodes(1).devices(0).measured_gemm_flops_per_s(), 1e11);
}

TEST(ShareBusyNodes, MemoryAJobHoldsOnOneDeviceComesOffThatDevice) {
  // A job on b's second device only (its plan's peak there).
  quilt::v1::JobStatus job = Job(quilt::v1::JOB_STATE_RUNNING, {"b"}, int64_t{300} << 20);
  (*job.mutable_predicted_device_memory_bytes())["b/cpu:1"] = int64_t{300} << 20;
  const auto loads = NodeLoads({job});
  EXPECT_EQ(loads.at("b").memory_bytes, 0);  // not counted twice
  quilt::v1::ClusterSpec spec = Cluster();
  const auto lines = ShareBusyNodes(loads, {}, &spec);
  EXPECT_EQ(spec.nodes(1).devices(0).memory_bytes(), int64_t{1} << 30);
  EXPECT_EQ(spec.nodes(1).devices(1).memory_bytes(), (int64_t{1} << 30) - (int64_t{300} << 20));
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0], HasSubstr("less the 300.0 MiB their plans hold"));
}

TEST(ShareBusyNodes, AOneDevicePlanGoesToTheIdleNode) {
  const Graph g = testing::ZooTrainingGraph("mlp");
  for (const std::string busy : {"", "a"}) {
    quilt::v1::ClusterSpec spec;
    *spec.add_nodes() = testing::CpuNodeInfo("a");
    *spec.add_nodes() = testing::CpuNodeInfo("b");
    spec.mutable_nodes(0)->mutable_devices(0)->set_measured_gemm_flops_per_s(1.2e11);
    std::map<std::string, NodeLoad> loads;
    if (!busy.empty()) loads[busy] = {1, 0};
    ShareBusyNodes(loads, {}, &spec);
    absl::StatusOr<Topology> topo = Topology::Build(spec);
    ASSERT_TRUE(topo.ok()) << topo.status();
    absl::StatusOr<CostModel> cost = CostModel::Create(&g, &*topo);
    ASSERT_TRUE(cost.ok()) << cost.status();
    const std::vector<NamedStrategy> baselines = Baselines(g, *topo, *cost, 32);
    ASSERT_EQ(baselines[0].name, "single-device");
    // a is faster when idle; sharing it with a job, b is.
    EXPECT_EQ(baselines[0].strategy.groups(0).replicas(0).device(),
              busy.empty() ? "a/cpu:0" : "b/cpu:0");
  }
}

// A node registry on a real store, with idle CPU nodes registered.
struct Registry {
  explicit Registry(const std::vector<std::string>& nodes) {
    absl::StatusOr<std::unique_ptr<SqliteStore>> opened = SqliteStore::Open(dir.File("c.db"));
    if (!opened.ok()) {
      ADD_FAILURE() << opened.status();
      return;
    }
    store = std::move(*opened);
    registry = std::make_unique<NodeRegistry>(&clock, store.get(), LivenessOptions{});
    for (size_t i = 0; i < nodes.size(); ++i) {
      EXPECT_TRUE(registry->Register(testing::CpuNodeInfo(nodes[i]), i + 1).ok());
    }
  }
  testing::TempDir dir;
  std::unique_ptr<SqliteStore> store;
  FakeClock clock;
  std::unique_ptr<NodeRegistry> registry;
};

TEST(PrepareJob, SubmissionsAtOnceCountEachOthersJobs) {
  // Two equal idle nodes; four one-device jobs submitted at the same time:
  // each plan counts the jobs placed before it, so they spread two a node
  // (each would take the same node were they planned on one snapshot).
  Registry nodes({"a", "b"});
  ASSERT_NE(nodes.registry, nullptr);
  NodeRegistry& registry = *nodes.registry;
  absl::Mutex planner, placed_mu;
  std::vector<quilt::v1::JobStatus> placed;
  SubmissionOptions options;
  options.planner_lock = &planner;
  options.loads = [&] {
    absl::MutexLock lock(&placed_mu);
    return NodeLoads(placed);
  };
  options.place = [&](NewJob&& job) {
    absl::MutexLock lock(&placed_mu);
    quilt::v1::JobStatus s;
    s.set_state(quilt::v1::JOB_STATE_RUNNING);
    for (const std::string& n : job.world) s.add_nodes(n);
    placed.push_back(s);
    return absl::OkStatus();
  };
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(16);
  spec.set_steps(10);
  spec.set_strategy("single-device");
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  std::vector<std::thread> submitters;
  std::vector<absl::Status> results(4);
  for (int i = 0; i < 4; ++i) {
    submitters.emplace_back(
        [&, i] { results[i] = PrepareJob(spec, registry, nullptr, nullptr, options).status(); });
  }
  for (std::thread& t : submitters) t.join();
  for (const absl::Status& s : results) ASSERT_TRUE(s.ok()) << s;
  const auto loads = NodeLoads(placed);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads.at("a").jobs, 2);
  EXPECT_EQ(loads.at("b").jobs, 2);
}

TEST(PrepareJob, ABatchSmallerThanTheDevices_RunsThePlannersPlanButNoEvenSplit) {
  // One row on two nodes: a data-parallel baseline asked for by name
  // cannot split it; the planner's plans (heterog, auto) place each group
  // on the devices that get its rows (or one device).
  Registry nodes({"a", "b"});
  ASSERT_NE(nodes.registry, nullptr);
  absl::Mutex planner;
  SubmissionOptions options;
  options.planner_lock = &planner;
  options.loads = [] { return std::map<std::string, NodeLoad>(); };
  std::vector<std::string> world;
  options.place = [&](NewJob&& job) {
    world = job.world;
    return absl::OkStatus();
  };
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(1);
  spec.set_steps(2);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  spec.set_strategy("dp-even-ring");
  EXPECT_THAT(PrepareJob(spec, *nodes.registry, nullptr, nullptr, options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a global batch of 1 cannot be split over the 2 devices")));
  for (const std::string strategy : {"heterog", "auto"}) {
    spec.set_strategy(strategy);
    world.clear();
    EXPECT_THAT(PrepareJob(spec, *nodes.registry, nullptr, nullptr, options).status(), IsOk())
        << strategy;
    EXPECT_FALSE(world.empty()) << strategy;
  }
}

// A plan that runs long logs its progress under the job's name (here
// from the start); a quick one logs only its result.
TEST(PrepareJob, APlanThatRunsLongLogsItsProgress) {
  Registry nodes({"a", "b"});
  ASSERT_NE(nodes.registry, nullptr);
  SubmissionOptions options;
  options.loads = [] { return std::map<std::string, NodeLoad>(); };
  options.place = [](NewJob&&) { return absl::OkStatus(); };
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_name("long-plan");
  spec.set_global_batch(16);
  spec.set_steps(2);
  spec.set_strategy("auto");
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  options.log_progress_after = absl::ZeroDuration();
  const absl::Status logged = PrepareJob(spec, *nodes.registry, nullptr, nullptr, options).status();
  const std::string long_plan = log.str();
  log.str("");
  options.log_progress_after = absl::Minutes(10);
  const absl::Status quiet = PrepareJob(spec, *nodes.registry, nullptr, nullptr, options).status();
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_THAT(logged, IsOk());
  ASSERT_THAT(quiet, IsOk());
  EXPECT_THAT(long_plan, HasSubstr("planning job 'long-plan': searching hybrid plans"));
  EXPECT_THAT(long_plan, HasSubstr("planning job 'long-plan': simulating dp-even-ring"));
  EXPECT_THAT(log.str(), ::testing::Not(HasSubstr("planning job")));
  EXPECT_THAT(log.str(), HasSubstr("planned job 'long-plan' on"));
}

// forward(x, y) = mean((float(x)·W − y)²) with int64 x [batch, 3]: integer
// inputs no embedding reads, which synthetic data cannot make.
std::string IntegerInputsWithoutAnEmbedding() {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  for (const auto& [name, type] : {std::pair<const char*, int>{"x", onnx::TensorProto::INT64},
                                   std::pair<const char*, int>{"y", onnx::TensorProto::FLOAT}}) {
    auto* in = g->add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->add_dim()->set_dim_param("batch");
    shape->add_dim()->set_dim_value(3);
  }
  auto* w = g->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->add_dims(3);
  for (int i = 0; i < 9; ++i) w->add_float_data(0.1f * static_cast<float>(i));
  auto node = [&](const char* type, std::vector<std::string> ins, const char* out) {
    auto* n = g->add_node();
    n->set_op_type(type);
    for (const std::string& in : ins) n->add_input(in);
    n->add_output(out);
    return n;
  };
  auto* cast = node("Cast", {"x"}, "xf");
  cast->add_attribute()->set_name("to");
  cast->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  cast->mutable_attribute(0)->set_i(onnx::TensorProto::FLOAT);
  node("MatMul", {"xf", "W"}, "z");
  node("Sub", {"z", "y"}, "d");
  node("Mul", {"d", "d"}, "sq");
  auto* mean = node("ReduceMean", {"sq"}, "loss");
  mean->add_attribute()->set_name("keepdims");
  mean->mutable_attribute(0)->set_type(onnx::AttributeProto::INT);
  mean->mutable_attribute(0)->set_i(0);
  g->add_output()->set_name("loss");
  return m.SerializeAsString();
}

TEST(PrepareJob, SyntheticDataThatCannotBeMade_IsRefusedAtSubmission) {
  // (It failed on the executors, after planning and starting the job.)
  Registry nodes({"a"});
  ASSERT_NE(nodes.registry, nullptr);
  NodeRegistry& registry = *nodes.registry;
  quilt::v1::JobSpec spec;
  spec.set_onnx(IntegerInputsWithoutAnEmbedding());
  spec.set_global_batch(4);
  spec.set_steps(2);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  absl::StatusOr<NewJob> job = PrepareJob(spec, registry, nullptr, nullptr, SubmissionOptions{});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              AllOf(HasSubstr("synthetic data for this model (pass --data X.npy,Y.npy)"),
                    HasSubstr("embedding")));
}

// zoo:mlp for 2 steps of `batch`, SGD.
quilt::v1::JobSpec ZooMlp(int64_t batch) {
  quilt::v1::JobSpec spec;
  spec.set_zoo("mlp");
  spec.set_global_batch(batch);
  spec.set_steps(2);
  spec.mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  return spec;
}

// Labels outside the model's classes are refused at submission, naming
// the file and the sample (they failed the job at its first step).
TEST(PrepareJob, LabelsOutsideTheClasses_AreRefusedAtSubmission) {
  Registry nodes({"a"});
  ASSERT_NE(nodes.registry, nullptr);
  testing::TempDir dir;
  const std::string x = dir.File("x.npy"), y = dir.File("y.npy");
  ASSERT_THAT(WriteNpy(x, Tensor::FromF32({8, 784}, std::vector<float>(8 * 784, 0.5f))), IsOk());
  quilt::v1::JobSpec spec = ZooMlp(4);
  spec.mutable_dataset()->mutable_numpy()->set_inputs_path(x);
  spec.mutable_dataset()->mutable_numpy()->set_labels_path(y);
  ASSERT_THAT(WriteNpy(y, Tensor::FromI64({8}, {0, 1, 2, 3, 4, 12, 6, 7})), IsOk());
  absl::StatusOr<NewJob> job =
      PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
  EXPECT_THAT(job.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("y.npy: label 12 of sample 5"),
                                           HasSubstr("not a class in [0, 10)"))));
  ASSERT_THAT(WriteNpy(y, Tensor::FromI64({8}, {0, 1, 2, 3, 4, 9, 6, 7})), IsOk());
  job = PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
  EXPECT_THAT(job.status(), IsOk());
}

TEST(PrepareJob, APriorityOutOfRangeOrWithoutTheQueue_IsRefused) {
  Registry nodes({"a"});
  ASSERT_NE(nodes.registry, nullptr);
  quilt::v1::JobSpec spec = ZooMlp(4);
  spec.set_priority(3);
  absl::StatusOr<NewJob> job =
      PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
  EXPECT_THAT(job.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("a priority orders the queue: it needs queue")));
  spec.set_queue(true);
  spec.set_priority(1001);
  job = PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
  EXPECT_THAT(job.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("priority must be -1000 to 1000, not 1001")));
  spec.set_priority(0);
  spec.set_keep_checkpoints(-1);
  job = PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
  EXPECT_THAT(job.status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("keep_checkpoints must not be negative (0 keeps every one)")));
}

// A batch whose activations alone outweigh the nodes' memory: the refusal
// says which batch data parallelism fits, and how many rows any plan
// could hold at most, with the sizes.
TEST(PrepareJob, ABatchAboveTheMemoryFloor_IsRefusedSayingHowManyRowsCouldFit) {
  Registry nodes({"a", "b"});  // (1 GiB each)
  ASSERT_NE(nodes.registry, nullptr);
  absl::Mutex planner;
  SubmissionOptions options;
  options.planner_lock = &planner;
  options.loads = [] { return std::map<std::string, NodeLoad>(); };
  options.place = [](NewJob&&) { return absl::OkStatus(); };
  quilt::v1::JobSpec spec = ZooMlp(1 << 20);
  spec.set_strategy("dp-proportional-ring");
  absl::StatusOr<NewJob> job = PrepareJob(spec, *nodes.registry, nullptr, nullptr, options);
  EXPECT_THAT(job.status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(ContainsRegex("a global batch of [1-9][0-9]* fits \\(data "
                                           "parallelism, planned in full\\)"),
                             ContainsRegex("no plan holds more than about [1-9][0-9]* batch "
                                           "rows here at once"),
                             HasSubstr("of the 2.0GiB the devices hold in all"))));
}

TEST(PrepareJob, AResumeFromACheckpointThatIsNotThere_IsRefusedAtSubmission) {
  Registry nodes({"a"});
  ASSERT_NE(nodes.registry, nullptr);
  quilt::v1::JobSpec spec = ZooMlp(16);
  const std::string step = nodes.dir.File("ckpt/step-00000004");
  std::filesystem::create_directories(step + "/rank-0");
  ASSERT_TRUE(std::ofstream(step + "/rank-0/metrics.json").good());
  auto refused = [&](int world, int64_t before, const std::string& dir) -> std::string {
    spec.mutable_resume_from()->set_checkpoint(dir);
    spec.mutable_resume_from()->set_world(world);
    spec.mutable_resume_from()->set_steps_before(before);
    absl::StatusOr<NewJob> job =
        PrepareJob(spec, *nodes.registry, nullptr, nullptr, SubmissionOptions{});
    if (job.ok()) return "";
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(job.status().message());
  };
  EXPECT_EQ(refused(1, 4, step), "");
  EXPECT_THAT(refused(2, 4, step), HasSubstr("no " + step + "/rank-1/metrics.json"));
  EXPECT_THAT(refused(1, -1, step), HasSubstr("steps_before must not be negative"));
  EXPECT_THAT(refused(0, 4, step), HasSubstr("resume_from.world must be 1 to 65536, not 0"));
  EXPECT_THAT(refused(1, 4, "ckpt/step-00000004"), HasSubstr("must be an absolute path"));
  // Initial weights beside a checkpoint (whose values would replace them).
  absl::StatusOr<std::string> no_arrays = NpzArchive({});
  ASSERT_THAT(no_arrays.status(), IsOk());
  spec.set_initial_weights(*no_arrays);
  EXPECT_THAT(refused(1, 4, step), HasSubstr("or starts from initial weights (initial_weights), "
                                             "not both"));
}

}  // namespace
}  // namespace quilt
