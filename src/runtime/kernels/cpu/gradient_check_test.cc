// Gradient checks for every differentiable op: the gradients autodiff builds
// (with the registered gradient builders and the CPU kernels of the gradient
// ops) must match central finite differences of the forward kernels.
// A registry sweep fails if an op with a gradient has no case here, and if
// any registered op has no CPU kernel.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status.h"
#include "src/common/status_matchers.h"
#include "src/graph/autodiff.h"
#include "src/graph/graph_builder.h"
#include "src/graph/op_registry.h"
#include "src/runtime/graph_runner.h"
#include "src/runtime/kernels/kernel.h"
#include "src/runtime/parallel.h"

namespace quilt {
namespace {

struct Arg {
  std::vector<int64_t> dims;
  float lo = -1, hi = 1;
  bool param = true;  // differentiable input (checked); else a constant
  // Values instead of random ones (e.g. indices, labels).
  std::vector<int64_t> ints;
  bool distinct = false;  // distinct values (no ties, for max pooling)
};

struct Case {
  std::string name;
  std::string type;
  std::vector<Arg> args;
  Attrs attrs;
  int outputs = 1;
  // Outputs of the op that feed the checked loss (default: all float ones).
  std::vector<int> loss_outputs;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

Attrs A(std::initializer_list<std::pair<const char*, AttrValue>> kv) {
  Attrs a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}
using Ints = std::vector<int64_t>;

std::vector<Case> Cases() {
  return {
      {"Add", "Add", {{{2, 3}}, {{3}}}},
      {"Sub", "Sub", {{{2, 3}}, {{2, 1}}}},
      {"Mul", "Mul", {{{2, 3}}, {{1, 3}}}},
      {"Div", "Div", {{{2, 3}}, {{3}, 1, 2}}},
      {"Pow", "Pow", {{{2, 3}, 0.5, 2}, {{}, 2, 2, false}}},
      {"PowFractional", "Pow", {{{2, 3}, 0.5, 2}, {{}, 1.5, 1.5, false}}},
      {"Sum", "Sum", {{{2, 3}}, {{3}}, {{2, 1}}}},
      {"Expand",
       "Expand",
       {{{1, 3}}},
       A({{"shape", Ints{2, 3}}, {"shape_batch_axis", int64_t{-1}}})},
      {"ExpandNewAxes",
       "Expand",
       {{{4, 1}}},
       A({{"shape", Ints{2, 4, 3}}, {"shape_batch_axis", int64_t{-1}}})},
      {"Relu", "Relu", {{{2, 5}}}},
      {"LeakyRelu", "LeakyRelu", {{{2, 5}}}, A({{"alpha", 0.2}})},
      {"Clip", "Clip", {{{2, 5}}}, A({{"min", -0.5}, {"max", 0.5}})},
      {"ClipMinOnly", "Clip", {{{2, 5}}}, A({{"min", 0.0}})},
      {"Abs", "Abs", {{{2, 5}}}},
      {"Gelu", "Gelu", {{{2, 5}, -3, 3}}},
      {"GeluTanh", "Gelu", {{{2, 5}, -3, 3}}, A({{"approximate", std::string("tanh")}})},
      {"Erf", "Erf", {{{2, 5}}}},
      {"Tanh", "Tanh", {{{2, 5}}}},
      {"Sigmoid", "Sigmoid", {{{2, 5}, -3, 3}}},
      {"Sqrt", "Sqrt", {{{2, 5}, 0.5, 2}}},
      {"Exp", "Exp", {{{2, 5}}}},
      {"Log", "Log", {{{2, 5}, 0.5, 2}}},
      {"Neg", "Neg", {{{2, 5}}}},
      {"Identity", "Identity", {{{2, 5}}}},
      {"Cast", "Cast", {{{2, 5}}}, A({{"to", std::string("f32")}})},
      {"MatMul", "MatMul", {{{2, 3, 4}}, {{4, 5}}}},
      {"MatMulBatched", "MatMul", {{{2, 3, 4}}, {{2, 4, 5}}}},
      {"MatMulTransA", "MatMul", {{{4, 3}}, {{4, 5}}}, A({{"trans_a", int64_t{1}}})},
      {"MatMulTransB", "MatMul", {{{2, 3, 4}}, {{5, 4}}}, A({{"trans_b", int64_t{1}}})},
      {"MatMulTransBoth",
       "MatMul",
       {{{2, 4, 3}}, {{2, 5, 4}}},
       A({{"trans_a", int64_t{1}}, {"trans_b", int64_t{1}}})},
      {"Gemm",
       "Gemm",
       {{{3, 4}}, {{5, 4}}, {{5}}},
       A({{"transB", int64_t{1}}, {"alpha", 0.5}, {"beta", 2.0}})},
      {"GemmTransA", "Gemm", {{{4, 3}}, {{4, 5}}}, A({{"transA", int64_t{1}}})},
      {"Conv",
       "Conv",
       {{{2, 3, 5, 5}}, {{4, 3, 3, 3}}, {{4}}},
       A({{"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"ConvGroupsDilation",
       "Conv",
       {{{1, 4, 6, 6}}, {{4, 2, 2, 2}}},
       A({{"group", int64_t{2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 0, 0, 1}}})},
      {"ConvPointwise", "Conv", {{{2, 3, 2, 2}}, {{2, 3, 1, 1}}}},
      // Depthwise: one group per channel (groups run side by side).
      {"ConvDepthwise",
       "Conv",
       {{{2, 6, 4, 4}}, {{6, 1, 3, 3}}, {{6}}},
       A({{"group", int64_t{6}}, {"pads", Ints{1, 1, 1, 1}}})},
      // A transposed convolution: X [2,4,3,3] up to [2,3,6,6] (output
      // padding 1) with W [4,3,3,3].
      {"ConvTranspose",
       "ConvGradInput",
       {{{2, 4, 3, 3}}, {{4, 3, 3, 3}}},
       A({{"strides", Ints{2, 2}},
          {"pads", Ints{1, 1, 1, 1}},
          {"input_shape", Ints{2, 3, 6, 6}},
          {"input_shape_batch_axis", int64_t{-1}}})},
      {"MaxPool",
       "MaxPool",
       {{{1, 2, 4, 4}, -1, 1, true, {}, true}},
       A({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})},
      {"MaxPoolPadded",
       "MaxPool",
       {{{1, 1, 5, 5}, -1, 1, true, {}, true}},
       A({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"AveragePool",
       "AveragePool",
       {{{1, 2, 5, 5}}},
       A({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}})},
      {"AveragePoolIncludePad",
       "AveragePool",
       {{{1, 2, 5, 5}}},
       A({{"kernel_shape", Ints{3, 3}},
          {"strides", Ints{2, 2}},
          {"pads", Ints{1, 1, 1, 1}},
          {"count_include_pad", int64_t{1}}})},
      {"GlobalAveragePool", "GlobalAveragePool", {{{2, 3, 2, 3}}}},
      {"BatchNormStats", "BatchNormStats", {{{3, 2, 2, 2}}}, {}, 2},
      // mean in [-0.5, 0.5) and sqmean in [1, 2): the variance stays positive.
      {"BatchNormApply",
       "BatchNormApply",
       {{{3, 2, 2, 2}},
        {{2}, -0.5, 0.5},
        {{2}, 1, 2},
        {{2}, 0.5, 1.5},
        {{2}},
        {{2}, 0, 0, false},
        {{2}, 1, 1, false}},
       {},
       3,
       {0}},
      // About a shift (the running mean), as models build them.
      {"BatchNormStatsShifted", "BatchNormStats", {{{3, 2, 2, 2}}, {{2}, -1, 1, false}}, {}, 2},
      {"BatchNormApplyShifted",
       "BatchNormApply",
       {{{3, 2, 2, 2}},
        {{2}, -0.5, 0.5},
        {{2}, 1, 2},
        {{2}, 0.5, 1.5},
        {{2}},
        {{2}, -1, 1, false},
        {{2}, 1, 1, false}},
       A({{"shifted", int64_t{1}}}),
       3,
       {0}},
      {"LayerNorm", "LayerNormalization", {{{2, 3, 4}}, {{4}, 0.5, 1.5}, {{4}}}, {}, 3, {0}},
      {"LayerNormAxis1",
       "LayerNormalization",
       {{{2, 3, 4}}, {{3, 4}, 0.5, 1.5}, {{4}}},
       A({{"axis", int64_t{1}}}),
       3,
       {0}},
      {"Softmax", "Softmax", {{{2, 3, 4}}}, A({{"axis", int64_t{1}}})},
      {"LogSoftmax", "LogSoftmax", {{{2, 5}}}},
      {"Reshape", "Reshape", {{{2, 3, 4}}}, A({{"shape", Ints{0, -1}}})},
      {"Flatten", "Flatten", {{{2, 3, 4}}}, A({{"axis", int64_t{2}}})},
      {"Transpose", "Transpose", {{{2, 3, 4}}}, A({{"perm", Ints{2, 0, 1}}})},
      {"Squeeze", "Squeeze", {{{2, 1, 3}}}, A({{"axes", Ints{1}}})},
      {"Unsqueeze", "Unsqueeze", {{{2, 3}}}, A({{"axes", Ints{0, 3}}})},
      {"Concat", "Concat", {{{2, 3}}, {{2, 2}}}, A({{"axis", int64_t{1}}})},
      {"Split", "Split", {{{2, 5}}}, A({{"axis", int64_t{1}}, {"split", Ints{2, 3}}}), 2},
      {"SplitOneUsed",
       "Split",
       {{{2, 5}}},
       A({{"axis", int64_t{1}}, {"split", Ints{2, 3}}}),
       2,
       {1}},
      {"Slice",
       "Slice",
       {{{4, 6}}},
       A({{"starts", Ints{1, -1}},
          {"ends", Ints{4, 0}},
          {"axes", Ints{0, 1}},
          {"steps", Ints{2, -2}}})},
      {"Pad", "Pad", {{{2, 3, 2}}}, A({{"pads", Ints{0, 1, 0, 0, 2, 1}}, {"value", 0.5}})},
      {"Gather", "Gather", {{{5, 3}}, {{2, 2}, 0, 0, false, {4, 0, 4, 2}}}},
      {"GatherAxis1",
       "Gather",
       {{{2, 5}}, {{3}, 0, 0, false, {1, 1, -1}}},
       A({{"axis", int64_t{1}}})},
      {"ReduceSum", "ReduceSum", {{{2, 3, 4}}}, A({{"axes", Ints{1}}, {"keepdims", int64_t{0}}})},
      {"ReduceMean", "ReduceMean", {{{2, 3, 4}}}, A({{"axes", Ints{0, 2}}})},
      {"ReduceMeanAll", "ReduceMean", {{{2, 3}}}, A({{"keepdims", int64_t{0}}})},
      {"Upsample", "Upsample", {{{1, 2, 2, 3}}}, A({{"scales", Ints{2, 3}}})},
      {"CumSum", "CumSum", {{{2, 3, 4}}}, A({{"axis", int64_t{1}}})},
      {"CumSumExclusiveReverse",
       "CumSum",
       {{{2, 5}}},
       A({{"axis", int64_t{-1}}, {"exclusive", int64_t{1}}, {"reverse", int64_t{1}}})},
      {"ResizeBilinear",
       "ResizeBilinear",
       {{{1, 2, 3, 4}}},
       A({{"out_h", int64_t{5}}, {"out_w", int64_t{8}}, {"coords", std::string("half_pixel")}})},
      {"ResizeBilinearCorners",
       "ResizeBilinear",
       {{{1, 1, 3, 2}}},
       A({{"out_h", int64_t{4}}, {"out_w", int64_t{5}}, {"coords", std::string("align_corners")}})},
      {"ReduceMax",
       "ReduceMax",
       {{{2, 3, 4}, -1, 1, true, {}, true}},
       A({{"axes", Ints{1}}, {"keepdims", int64_t{0}}})},
      {"ReduceMaxKeep",
       "ReduceMax",
       {{{2, 3, 4}, -1, 1, true, {}, true}},
       A({{"axes", Ints{0, 2}}})},
      {"Dropout", "Dropout", {{{4, 5}}}, A({{"ratio", 0.3}}), 2, {0}},
      {"SoftmaxCrossEntropy",
       "SoftmaxCrossEntropyLoss",
       {{{3, 4}}, {{3}, 0, 0, false, {0, 3, 1}}},
       A({{"class_axis", int64_t{-1}}})},
      {"SoftmaxCrossEntropyClassAxis1",
       "SoftmaxCrossEntropyLoss",
       {
           {{2, 3, 2}},
           {{2, 2}, 0, 0, false, {0, 2, 1, 1}},
       }},
      {"MseLoss", "MseLoss", {{{3, 2}}, {{3, 2}, -1, 1, false}}},
  };
}

// Builds: args → op → loss = Σ_k ReduceSum(out_k · R_k).
absl::StatusOr<Graph> BuildCase(const Case& c, uint64_t seed, std::vector<std::string>* params) {
  Graph g;
  GraphBuilder b(&g);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<std::string> ins;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const Arg& a = c.args[i];
    Tensor t;
    if (!a.ints.empty()) {
      t = Tensor::FromI64(a.dims, a.ints);
    } else {
      int64_t n = 1;
      for (int64_t d : a.dims) n *= d;
      std::vector<float> v(n);
      std::uniform_real_distribution<float> u(a.lo, a.hi);
      for (int64_t k = 0; k < n; ++k) v[k] = u(rng);
      if (a.distinct) {
        for (int64_t k = 0; k < n; ++k) v[k] = a.lo + (a.hi - a.lo) * ((k * 7919) % n) / float(n);
      }
      // Keep Relu and friends away from their kink at 0.
      if (c.type == "Relu" || c.type == "LeakyRelu" || c.type == "Abs" || c.type == "Clip") {
        for (float& x : v) x = x >= 0 ? x + 0.1f : x - 0.1f;
      }
      if (c.type == "Clip") {  // and from the bounds at ±0.5
        for (float& x : v) x = std::fabs(std::fabs(x) - 0.5f) < 0.05f ? x * 1.2f : x;
      }
      t = Tensor::FromF32(a.dims, v);
    }
    std::string name = "arg" + std::to_string(i);
    if (a.param && a.ints.empty()) {
      ASSIGN_OR_RETURN(name, b.AddParameterValue(name, t));
      params->push_back(name);
    } else {
      ASSIGN_OR_RETURN(name, b.AddConstant(name, t));
    }
    ins.push_back(name);
  }
  ASSIGN_OR_RETURN(std::vector<std::string> outs, b.AddOp(c.type, ins, c.attrs, c.outputs, "op"));
  std::vector<int> use = c.loss_outputs;
  if (use.empty()) {
    for (int i = 0; i < c.outputs; ++i) use.push_back(i);
  }
  std::vector<std::string> terms;
  for (int k : use) {
    ASSIGN_OR_RETURN(TensorType t, b.TypeOf(outs[k]));
    std::vector<float> r(t.shape.NumElements(1));
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : r) x = u(rng);
    ASSIGN_OR_RETURN(std::string rc, b.AddConstant("r", Tensor::FromF32(t.shape.Concrete(1), r)));
    ASSIGN_OR_RETURN(std::string prod, b.Add("Mul", {outs[k], rc}));
    Attrs red;
    red.SetInt("keepdims", 0);
    ASSIGN_OR_RETURN(std::string s, b.Add("ReduceSum", {prod}, red));
    terms.push_back(s);
  }
  std::string loss = terms[0];
  if (terms.size() > 1) {
    ASSIGN_OR_RETURN(loss, b.Add("Sum", terms));
  }
  g.loss.output = loss;
  return g;
}

// The case's training graph (SGD at rate 0) and, for each parameter, its
// gradient (input 1 of its update op).
absl::StatusOr<Graph> TrainingCase(const Case& c, uint64_t seed, std::vector<std::string>* params,
                                   std::map<std::string, std::string>* grad_of) {
  ASSIGN_OR_RETURN(Graph g, BuildCase(c, seed, params));
  TrainingOptions opts;
  opts.optimizer.kind = OptimizerSpec::Kind::kSgd;
  opts.optimizer.learning_rate = 0;
  RETURN_IF_ERROR(BuildTrainingGraph(&g, opts));
  for (const Op& op : g.ops) {
    if (op.type == "SgdUpdate") (*grad_of)[op.inputs[0]] = op.inputs[1];
  }
  return g;
}

class GradientCheck : public ::testing::TestWithParam<Case> {};

TEST_P(GradientCheck, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  std::vector<std::string> params;
  std::map<std::string, std::string> grad_of;
  auto built = TrainingCase(c, 1234, &params, &grad_of);
  ASSERT_THAT(built, IsOk());
  Graph g = std::move(*built);
  auto runner = GraphRunner::Create(g, {});
  ASSERT_THAT(runner, IsOk());
  std::vector<std::string> fetch = {g.loss.output};
  for (const auto& p : params) {
    ASSERT_TRUE(grad_of.count(p)) << "no gradient for " << p;
    fetch.push_back(grad_of[p]);
  }
  auto analytic = (*runner)->Evaluate({}, fetch);
  ASSERT_THAT(analytic, IsOk());
  auto loss_at = [&]() -> double {
    auto r = (*runner)->Evaluate({}, {g.loss.output});
    EXPECT_THAT(r, IsOk());
    return r.ok() ? (*r)[g.loss.output].f32()[0] : NAN;
  };
  const float eps = 1e-2f;
  for (const auto& p : params) {
    Tensor base = (*runner)->Persistent(p)->Clone();
    const Tensor& grad = (*analytic)[grad_of[p]];
    ASSERT_EQ(grad.numel(), base.numel());
    for (int64_t i = 0; i < base.numel(); ++i) {
      Tensor plus = base.Clone(), minus = base.Clone();
      plus.f32()[i] += eps;
      minus.f32()[i] -= eps;
      ASSERT_THAT((*runner)->SetPersistent(p, plus), IsOk());
      const double lp = loss_at();
      ASSERT_THAT((*runner)->SetPersistent(p, minus), IsOk());
      const double lm = loss_at();
      const double numeric = (lp - lm) / (2 * eps);
      EXPECT_NEAR(grad.f32()[i], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << c.name << ": d loss / d " << p << "[" << i << "]";
    }
    ASSERT_THAT((*runner)->SetPersistent(p, base), IsOk());
  }
}

TEST_P(GradientCheck, SameOnFourComputeThreadsAsOnOne) {
  // The loss and every gradient, computed with the kernels' loops split
  // across threads (grouped convolutions: groups side by side), against one
  // thread: a chunk run twice or skipped, or two threads writing one
  // buffer, would show.
  const Case& c = GetParam();
  std::vector<std::string> params;
  std::map<std::string, std::string> grad_of;
  auto built = TrainingCase(c, 99, &params, &grad_of);
  ASSERT_THAT(built, IsOk());
  const Graph& g = *built;
  std::vector<std::string> fetch = {g.loss.output};
  for (const auto& [param, grad] : grad_of) fetch.push_back(grad);
  std::vector<std::map<std::string, Tensor>> runs;
  for (int threads : {1, 4}) {
    SetComputeThreads(threads);
    auto runner = GraphRunner::Create(g, {});
    ASSERT_THAT(runner, IsOk());
    auto out = (*runner)->Evaluate({}, fetch);
    ASSERT_THAT(out, IsOk());
    runs.push_back(std::move(*out));
  }
  SetComputeThreads(1);
  for (const std::string& t : fetch) {
    const Tensor &one = runs[0][t], &four = runs[1][t];
    ASSERT_EQ(one.numel(), four.numel()) << t;
    for (int64_t i = 0; i < one.numel(); ++i) {
      EXPECT_NEAR(four.f32()[i], one.f32()[i], 1e-6 + 1e-5 * std::fabs(one.f32()[i]))
          << c.name << ": " << t << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, GradientCheck, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(OpRegistry, EveryDifferentiableOpHasAGradientCheck) {
  std::set<std::string> covered;
  for (const Case& c : Cases()) covered.insert(c.type);
  for (const std::string& type : OpRegistry::Global().Types()) {
    const OpSchema* s = OpRegistry::Global().Find(type);
    if (s->grad) {
      EXPECT_TRUE(covered.count(type)) << type << " has a gradient but no check";
    }
  }
}

TEST(OpRegistry, EveryOpHasACpuKernel) {
  for (const std::string& type : OpRegistry::Global().Types()) {
    if (OpRegistry::Global().Find(type)->planner_only) continue;
    EXPECT_NE(KernelRegistry::Global().Find("cpu", type), nullptr) << type;
  }
}

}  // namespace
}  // namespace quilt
