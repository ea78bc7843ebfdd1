// Op-type calibration: the rates are real measurements of this host (the
// convolution and matrix-product types of the calibration models, within
// what any CPU does), and the cost model prices an op of a measured type at
// its type's rate instead of the device's GEMM rate.
#include "src/worker/kernel_rates.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/cluster/topology.h"
#include "src/common/status_matchers.h"
#include "src/cost/cost_model.h"
#include "src/graph/autodiff.h"
#include "src/graph/zoo/zoo.h"

namespace quilt {
namespace {

TEST(OpTypeRates, MeasuresTheCalibrationModelsArithmeticOps) {
  absl::StatusOr<std::vector<quilt::v1::OpTypeRate>> rates =
      MeasureOpTypeRates(1, absl::Milliseconds(200));
  ASSERT_THAT(rates.status(), IsOk());
  std::map<std::string, double> by_type;
  for (const auto& r : *rates) {
    EXPECT_FALSE(by_type.count(r.op_type())) << r.op_type() << " twice";
    by_type[r.op_type()] = r.flops_per_s();
    // More than 1 MFLOP/s and less than 10 TFLOP/s on one thread.
    EXPECT_GT(r.flops_per_s(), 1e6) << r.op_type();
    EXPECT_LT(r.flops_per_s(), 1e13) << r.op_type();
  }
  EXPECT_TRUE(by_type.count("Conv")) << "the CNN's convolutions";
  EXPECT_TRUE(by_type.count("MatMul") || by_type.count("Gemm")) << "the MLP's layers";
  EXPECT_FALSE(by_type.count("Reshape")) << "no arithmetic, no rate";
}

TEST(OpTypeRates, CostModelPricesOpsOfAMeasuredTypeAtItsRate) {
  absl::StatusOr<Graph> g = zoo::BuildZooModel("cnn");
  ASSERT_THAT(g.status(), IsOk());
  TrainingOptions to;
  to.loss = LossType::kSoftmaxCrossEntropy;
  to.optimizer.kind = OptimizerSpec::Kind::kSgd;
  ASSERT_THAT(BuildTrainingGraph(&*g, to), IsOk());
  auto spec = [](double conv_rate) {
    quilt::v1::ClusterSpec s;
    auto* d = s.add_nodes();
    d->set_node_id("n");
    auto* dev = d->add_devices();
    dev->set_id("n/cpu:0");
    dev->set_kind(quilt::v1::DEVICE_KIND_CPU);
    dev->set_measured_gemm_flops_per_s(1e11);
    dev->set_memory_bandwidth_bytes_per_s(1e15);  // arithmetic-bound
    dev->set_memory_bytes(int64_t{1} << 30);
    if (conv_rate > 0) {
      auto* r = dev->add_measured_op_type_rates();
      r->set_op_type("Conv");
      r->set_flops_per_s(conv_rate);
    }
    return s;
  };
  absl::StatusOr<Topology> plain_topo = Topology::Build(spec(0));
  absl::StatusOr<Topology> rated_topo = Topology::Build(spec(1e10));
  ASSERT_THAT(plain_topo.status(), IsOk());
  ASSERT_THAT(rated_topo.status(), IsOk());
  absl::StatusOr<CostModel> plain = CostModel::Create(&*g, &*plain_topo);
  absl::StatusOr<CostModel> rated = CostModel::Create(&*g, &*rated_topo);
  ASSERT_THAT(plain.status(), IsOk());
  ASSERT_THAT(rated.status(), IsOk());
  int convs = 0;
  for (size_t i = 0; i < g->ops.size(); ++i) {
    const int op = static_cast<int>(i);
    const double flops = plain->Flops(op, 32);
    const double extra = rated->OpTime(op, 0, 32) - plain->OpTime(op, 0, 32);
    if (g->ops[i].type == "Conv") {
      ++convs;
      // flops / 1e10 instead of flops / 1e11.
      EXPECT_NEAR(extra, flops / 1e10 - flops / 1e11, 1e-12) << g->ops[i].name;
    } else {
      EXPECT_EQ(extra, 0) << g->ops[i].name;
    }
  }
  EXPECT_GT(convs, 0);
  // The lower bound may assume the fastest rate any op reaches.
  EXPECT_EQ(rated->PeakFlopsPerS(0), 1e11);
}

}  // namespace
}  // namespace quilt
