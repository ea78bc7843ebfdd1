// Reading a job's latest checkpoint back: steps by number, entries that
// are not checkpoints ignored, a newer checkpoint that does not read
// passed over (and said), shards joined by rows; the ONNX export's
// trained initializers; any job's weights as .npz.
#include "src/coordinator/job_export.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "onnx/onnx_pb.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/job_model.h"
#include "src/runtime/data/npy.h"
#include "src/runtime/data/npz.h"
#include "src/runtime/initializers.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Rank `rank` of `step` in `dir`: tensor "w" rows [begin, end) = value.
void WriteRank(const std::string& dir, const std::string& step, int rank, int64_t begin,
               int64_t end, float value) {
  const std::string rank_dir = dir + "/" + step + "/rank-" + std::to_string(rank);
  std::filesystem::create_directories(rank_dir);
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, {end - begin, 2});
  ASSERT_THAT(t.status(), IsOk());
  for (int64_t i = 0; i < t->numel(); ++i) static_cast<float*>(t->raw())[i] = value;
  ASSERT_THAT(WriteNpy(rank_dir + "/w.npy", *t), IsOk());
  nlohmann::json m;
  m["tensors"] =
      nlohmann::json::array({{{"tensor", "w"}, {"begin", begin}, {"end", end}, {"file", "w.npy"}}});
  std::ofstream(rank_dir + "/metrics.json") << m.dump();
}

TEST(ReadLatestCheckpoint, NewestByNumber_SkipsWhatIsNotACheckpoint) {
  testing::TempDir dir;
  for (const auto& [step, value] : std::vector<std::pair<std::string, float>>{
           {"step-00000900", 9}, {"step-00001000", 10}, {"step-100000000", 7}}) {
    WriteRank(dir.path(), step, 0, 0, 2, value);
    WriteRank(dir.path(), step, 1, 2, 4, value);
  }
  // Not checkpoints: a link by a common convention, a stray copy, a step
  // that one rank has not finished.
  std::filesystem::create_directory_symlink(dir.path() + "/step-00001000",
                                            dir.path() + "/step-latest");
  WriteRank(dir.path(), "step-old", 0, 0, 2, 1);
  WriteRank(dir.path(), "step-old", 1, 2, 4, 1);
  WriteRank(dir.path(), "step-200000000", 0, 0, 2, 1);
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(dir.path(), 2);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->step, 100000000);  // by number, not by name
  // The newer step one rank did not finish is named.
  EXPECT_EQ(c->passed_over, "step-200000000: incomplete (no rank-1/metrics.json)");
  ASSERT_EQ(c->tensors.count("w"), 1u);
  EXPECT_EQ(c->tensors["w"].dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(static_cast<const float*>(c->tensors["w"].raw())[0], 7.0f);
}

TEST(ReadLatestCheckpoint, FilesThatDoNotHoldTheirRows_PassedOver) {
  testing::TempDir dir;
  WriteRank(dir.path(), "step-00000400", 0, 0, 2, 4);
  WriteRank(dir.path(), "step-00000400", 1, 2, 4, 4);
  // Two rows' index entries, but files of two rows each claiming one.
  WriteRank(dir.path(), "step-00000500", 0, 0, 2, 5);
  WriteRank(dir.path(), "step-00000500", 1, 2, 4, 5);
  for (int r = 0; r < 2; ++r) {
    nlohmann::json m;
    m["tensors"] =
        nlohmann::json::array({{{"tensor", "w"}, {"begin", r}, {"end", r + 1}, {"file", "w.npy"}}});
    std::ofstream(dir.path() + "/step-00000500/rank-" + std::to_string(r) + "/metrics.json")
        << m.dump();
  }
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(dir.path(), 2);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->step, 400);
  EXPECT_THAT(c->passed_over, HasSubstr("not those rows"));
  // A checkpoint the caller does not accept is passed over too.
  c = ReadLatestCheckpoint(dir.path(), 2, [](const Checkpoint& k) {
    return k.step == 0 && static_cast<const float*>(k.tensors.at("w").raw())[0] == 4.0f
               ? absl::DataLossError("refused")
               : absl::OkStatus();
  });
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(ReadLatestCheckpoint, UnreadableNewest_OlderOneAndWhy) {
  testing::TempDir dir;
  WriteRank(dir.path(), "step-00000400", 0, 0, 4, 4);
  WriteRank(dir.path(), "step-00000600", 0, 0, 4, 6);
  std::filesystem::resize_file(dir.path() + "/step-00000600/rank-0/w.npy", 20);
  absl::StatusOr<Checkpoint> c = ReadLatestCheckpoint(dir.path(), 1);
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_EQ(c->step, 400);
  EXPECT_THAT(c->passed_over, HasSubstr("step-00000600"));
  // Index entries of the wrong type are a data error, not a crash.
  std::ofstream(dir.path() + "/step-00000400/rank-0/metrics.json")
      << R"({"tensors": [{"tensor": "w", "begin": "zero", "file": "w.npy"}]})";
  EXPECT_THAT(ReadLatestCheckpoint(dir.path(), 1).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("step-00000600")));
  testing::TempDir empty;
  EXPECT_THAT(ReadLatestCheckpoint(empty.path(), 1).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

// A weight the exporter also folded into a transposed copy (a tied
// embedding): the export writes the trained weight and its transpose.
TEST(ExportTrainedOnnx, TransposedCopiesGetTheTrainedWeightTransposed) {
  testing::TempDir dir;
  onnx::ModelProto model;
  auto* g = model.mutable_graph();
  auto add = [&](const std::string& name, std::vector<int64_t> dims, std::vector<float> v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  };
  add("emb.weight", {3, 2}, {1, 2, 3, 4, 5, 6});
  add("onnx::MatMul_7", {2, 3}, {1, 3, 5, 2, 4, 6});
  add("onnx::MatMul_8", {2, 3}, {1, 3, 5, 2, 4, 7});  // not a transpose of any weight
  quilt::v1::JobRecord job;
  job.mutable_status()->set_job_id("j");
  job.mutable_spec()->set_onnx(model.SerializeAsString());
  job.mutable_spec()->set_checkpoint_dir(dir.path());
  job.add_world("n0");
  const std::string rank_dir = dir.path() + "/step-00000010/rank-0";
  std::filesystem::create_directories(rank_dir);
  ASSERT_THAT(WriteNpy(rank_dir + "/w.npy", Tensor::FromF32({3, 2}, {10, 20, 30, 40, 50, 60})),
              IsOk());
  nlohmann::json m;
  m["tensors"] = nlohmann::json::array({{{"tensor", "emb.weight"}, {"file", "w.npy"}}});
  std::ofstream(rank_dir + "/metrics.json") << m.dump();
  absl::StatusOr<quilt::v1::ExportJobResponse> out = ExportTrainedOnnx(job);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_EQ(out->step(), 10);
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(out->onnx()));
  std::map<std::string, std::vector<float>> values;
  for (const auto& t : exported.graph().initializer()) {
    std::vector<float> v(t.float_data().begin(), t.float_data().end());
    if (!t.raw_data().empty()) {
      v.resize(t.raw_data().size() / sizeof(float));
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    }
    values[t.name()] = v;
  }
  EXPECT_EQ(values["emb.weight"], (std::vector<float>{10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(values["onnx::MatMul_7"], (std::vector<float>{10, 30, 50, 20, 40, 60}));
  EXPECT_EQ(values["onnx::MatMul_8"], (std::vector<float>{1, 3, 5, 2, 4, 7}));  // as it was
}

TEST(ExportTrainedOnnx, UsesSharedThroughIdentitiesGetTheirOwnValuesAndIntegersStay) {
  // ln2.weight = Identity(ln1.weight) (PyTorch merged equal initial
  // values; each use trained on its own), and an int64 table of positions.
  testing::TempDir dir;
  onnx::ModelProto model;
  auto* g = model.mutable_graph();
  auto* w = g->add_initializer();
  w->set_name("ln1.weight");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_float_data(1);
  w->add_float_data(1);
  auto* wide = g->add_initializer();  // a float64 weight (model.double())
  wide->set_name("scale");
  wide->set_data_type(onnx::TensorProto::DOUBLE);
  wide->add_dims(1);
  wide->add_double_data(1);
  auto* ids = g->add_initializer();
  ids->set_name("position_ids");
  ids->set_data_type(onnx::TensorProto::INT64);
  ids->add_dims(2);
  ids->add_int64_data(0);
  ids->add_int64_data(1);
  auto* identity = g->add_node();
  identity->set_op_type("Identity");
  identity->add_input("ln1.weight");
  identity->add_output("ln2.weight");
  quilt::v1::JobRecord job;
  job.mutable_status()->set_job_id("j");
  job.mutable_spec()->set_onnx(model.SerializeAsString());
  job.mutable_spec()->set_checkpoint_dir(dir.path());
  job.add_world("n0");
  const std::string rank_dir = dir.path() + "/step-00000004/rank-0";
  std::filesystem::create_directories(rank_dir);
  ASSERT_THAT(WriteNpy(rank_dir + "/a.npy", Tensor::FromF32({2}, {1.5, 0.5})), IsOk());
  ASSERT_THAT(WriteNpy(rank_dir + "/b.npy", Tensor::FromF32({2}, {2.5, -1})), IsOk());
  ASSERT_THAT(WriteNpy(rank_dir + "/c.npy", Tensor::FromI64({2}, {0, 1})), IsOk());
  ASSERT_THAT(WriteNpy(rank_dir + "/d.npy", Tensor::FromF32({1}, {0.25})), IsOk());
  nlohmann::json m;
  m["tensors"] = nlohmann::json::array({{{"tensor", "ln1.weight"}, {"file", "a.npy"}},
                                        {{"tensor", "ln2.weight"}, {"file", "b.npy"}},
                                        {{"tensor", "position_ids"}, {"file", "c.npy"}},
                                        {{"tensor", "scale"}, {"file", "d.npy"}}});
  std::ofstream(rank_dir + "/metrics.json") << m.dump();
  absl::StatusOr<quilt::v1::ExportJobResponse> out = ExportTrainedOnnx(job);
  ASSERT_THAT(out.status(), IsOk());
  onnx::ModelProto exported;
  ASSERT_TRUE(exported.ParseFromString(out->onnx()));
  EXPECT_EQ(exported.graph().node_size(), 0);  // the Identity gave way
  std::map<std::string, std::vector<float>> values;
  for (const auto& t : exported.graph().initializer()) {
    if (t.data_type() == onnx::TensorProto::DOUBLE) {
      ASSERT_EQ(t.raw_data().size(), sizeof(double));
      double v = 0;
      std::memcpy(&v, t.raw_data().data(), sizeof(v));
      EXPECT_EQ(v, 0.25);  // trained, written as the model holds it
      EXPECT_TRUE(t.double_data().empty());
      continue;
    }
    if (t.data_type() != onnx::TensorProto::FLOAT) {
      EXPECT_EQ(t.name(), "position_ids");
      EXPECT_THAT(t.int64_data(), ::testing::ElementsAre(0, 1));
      continue;
    }
    std::vector<float> v(t.raw_data().size() / sizeof(float));
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    values[t.name()] = v;
  }
  EXPECT_EQ(values["ln1.weight"], (std::vector<float>{1.5, 0.5}));
  EXPECT_EQ(values["ln2.weight"], (std::vector<float>{2.5, -1}));
}

// Writes every parameter of `g` but `skip` into rank 0 of `step` in `dir`,
// parameter k's element i = k + i / 1000 (`bad_shape`: the first one
// flattened).
void WriteParameters(const Graph& g, const std::string& dir, const std::string& step,
                     const std::string& skip = "", bool bad_shape = false) {
  const std::string rank_dir = dir + "/" + step + "/rank-0";
  std::filesystem::create_directories(rank_dir);
  nlohmann::json entries = nlohmann::json::array();
  for (size_t k = 0; k < g.parameters.size(); ++k) {
    const std::string& name = g.parameters[k].tensor;
    if (name == skip) continue;
    std::vector<int64_t> dims = g.FindTensor(name)->shape.Concrete(1);
    if (bad_shape && k == 0) dims = {g.FindTensor(name)->shape.NumElements(1)};
    absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, dims);
    ASSERT_THAT(t.status(), IsOk());
    for (int64_t i = 0; i < t->numel(); ++i) t->f32()[i] = static_cast<float>(k) + 0.001f * i;
    const std::string file = absl::StrCat("p", k, ".npy");
    ASSERT_THAT(WriteNpy(rank_dir + "/" + file, *t), IsOk());
    entries.push_back({{"tensor", name}, {"file", file}});
  }
  nlohmann::json m;
  m["tensors"] = entries;
  std::ofstream(rank_dir + "/metrics.json") << m.dump();
}

// A zoo job's weights: every parameter by name, in its shape, with the
// checkpoint's values; a newer checkpoint with a parameter in another
// shape is passed over and said; one lacking a parameter is refused
// naming it; ONNX is refused for it, pointing to .npz.
TEST(ExportTrainedWeights, AZooJobsParametersByNameFromTheCheckpointThatFits) {
  testing::TempDir dir;
  quilt::v1::JobRecord job;
  job.mutable_status()->set_job_id("j");
  job.mutable_spec()->set_zoo("mlp");
  job.mutable_spec()->set_global_batch(8);
  job.mutable_spec()->set_steps(20);
  job.mutable_spec()->mutable_optimizer()->mutable_sgd()->set_learning_rate(0.1);
  job.mutable_spec()->set_checkpoint_dir(dir.path());
  job.add_world("n0");
  absl::StatusOr<Graph> g = TrainingGraphForJob(job.spec());
  ASSERT_THAT(g.status(), IsOk());
  ASSERT_GE(g->parameters.size(), 2u);
  WriteParameters(*g, dir.path(), "step-00000010");
  WriteParameters(*g, dir.path(), "step-00000020", "", /*bad_shape=*/true);
  absl::StatusOr<quilt::v1::ExportJobResponse> out = ExportTrainedWeights(job);
  ASSERT_THAT(out.status(), IsOk());
  EXPECT_EQ(out->step(), 10);
  EXPECT_THAT(out->note(),
              AllOf(HasSubstr("step-00000020"), HasSubstr(g->parameters[0].tensor + "' is f32")));
  absl::StatusOr<std::map<std::string, Tensor>> arrays = ParseNpz(out->npz(), "weights.npz");
  ASSERT_THAT(arrays.status(), IsOk());
  ASSERT_EQ(arrays->size(), g->parameters.size());
  for (size_t k = 0; k < g->parameters.size(); ++k) {
    const std::string& name = g->parameters[k].tensor;
    ASSERT_EQ(arrays->count(name), 1u) << name;
    const Tensor& t = arrays->at(name);
    EXPECT_EQ(t.dims(), g->FindTensor(name)->shape.Concrete(1)) << name;
    for (int64_t i = 0; i < t.numel(); i += 97) {
      ASSERT_EQ(t.f32()[i], static_cast<float>(k) + 0.001f * i) << name << "[" << i << "]";
    }
  }
  EXPECT_THAT(ExportTrainedOnnx(job).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(".npz")));
  // A frozen parameter (which no step updates, so checkpoints need not
  // hold it) is written at its initial value.
  quilt::v1::JobRecord frozen = job;
  frozen.mutable_spec()->add_frozen(g->parameters.back().tensor);
  testing::TempDir frozen_dir;
  frozen.mutable_spec()->set_checkpoint_dir(frozen_dir.path());
  WriteParameters(*g, frozen_dir.path(), "step-00000005", g->parameters.back().tensor);
  absl::StatusOr<quilt::v1::ExportJobResponse> with_frozen = ExportTrainedWeights(frozen);
  ASSERT_THAT(with_frozen.status(), IsOk());
  absl::StatusOr<std::map<std::string, Tensor>> frozen_arrays =
      ParseNpz(with_frozen->npz(), "frozen.npz");
  ASSERT_THAT(frozen_arrays.status(), IsOk());
  ASSERT_EQ(frozen_arrays->size(), g->parameters.size());
  const ParameterSpec& last = g->parameters.back();
  absl::StatusOr<Tensor> initial =
      InitialValue(last, g->FindTensor(last.tensor)->shape.Concrete(1));
  ASSERT_THAT(initial.status(), IsOk());
  const Tensor& got = frozen_arrays->at(last.tensor);
  ASSERT_EQ(got.dims(), initial->dims());
  EXPECT_EQ(std::memcmp(got.raw(), initial->raw(), static_cast<size_t>(got.bytes())), 0);
  EXPECT_EQ(frozen_arrays->at(g->parameters[0].tensor).f32()[1], 0.001f)
      << "trained from the checkpoint";
  // A checkpoint without the last parameter, which training updates:
  // refused, naming it.
  testing::TempDir lacking;
  job.mutable_spec()->set_checkpoint_dir(lacking.path());
  WriteParameters(*g, lacking.path(), "step-00000005", g->parameters.back().tensor);
  EXPECT_THAT(ExportTrainedWeights(job).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("lacks 1 of the model's"),
                             HasSubstr("'" + g->parameters.back().tensor + "'"))));
}

}  // namespace
}  // namespace quilt
