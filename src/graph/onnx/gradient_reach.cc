#include "src/graph/onnx/gradient_reach.h"

#include <map>
#include <vector>

namespace quilt::onnx_import {
namespace {

// Ops whose outputs do not vary smoothly with any input.
const std::set<std::string>& Constant() {
  static const auto* ops = new std::set<std::string>{"Shape",
                                                     "Size",
                                                     "Equal",
                                                     "Greater",
                                                     "Less",
                                                     "GreaterOrEqual",
                                                     "LessOrEqual",
                                                     "Not",
                                                     "And",
                                                     "Or",
                                                     "Xor",
                                                     "ArgMax",
                                                     "ArgMin",
                                                     "NonZero",
                                                     "Range",
                                                     "ConstantOfShape",
                                                     "EyeLike",
                                                     "OneHot",
                                                     "IsNaN",
                                                     "IsInf",
                                                     "Sign",
                                                     "Floor",
                                                     "Ceil",
                                                     "Round",
                                                     "RandomNormalLike",
                                                     "RandomUniformLike",
                                                     "Bernoulli"};
  return *ops;
}

// The first input position of an op that is an index, a shape, axes or
// another operand no gradient flows to (all later inputs are alike), or
// the single such position (Where's condition).
bool Smooth(const onnx::NodeProto& node, int i) {
  const std::string& t = node.op_type();
  if (Constant().count(t)) return false;
  if (t == "Cast") {
    for (const auto& a : node.attribute()) {
      if (a.name() == "to") {
        return a.i() == onnx::TensorProto::FLOAT || a.i() == onnx::TensorProto::DOUBLE ||
               a.i() == onnx::TensorProto::FLOAT16 || a.i() == onnx::TensorProto::BFLOAT16;
      }
    }
    return true;
  }
  if (t == "Where") return i != 0;
  static const auto* data_only = new std::map<std::string, int>{{"Reshape", 1},
                                                                {"Expand", 1},
                                                                {"Tile", 1},
                                                                {"Slice", 1},
                                                                {"Squeeze", 1},
                                                                {"Unsqueeze", 1},
                                                                {"Gather", 1},
                                                                {"GatherElements", 1},
                                                                {"GatherND", 1},
                                                                {"Split", 1},
                                                                {"ReduceSum", 1},
                                                                {"ReduceMean", 1},
                                                                {"ReduceMax", 1},
                                                                {"ReduceMin", 1},
                                                                {"TopK", 1},
                                                                {"CumSum", 1},
                                                                {"Resize", 1},
                                                                {"Upsample", 1},
                                                                {"Dropout", 1},
                                                                {"SoftmaxCrossEntropyLoss", 1},
                                                                {"NegativeLogLikelihoodLoss", 1},
                                                                {"Pad", 1},
                                                                {"Clip", 1}};
  auto it = data_only->find(t);
  return it == data_only->end() || i < it->second;
}

}  // namespace

std::set<std::string> GradientReach(const onnx::GraphProto& graph) {
  std::set<std::string> reached;
  for (const auto& out : graph.output()) reached.insert(out.name());
  for (int n = graph.node_size() - 1; n >= 0; --n) {
    const onnx::NodeProto& node = graph.node(n);
    bool live = false;
    for (const std::string& out : node.output()) live = live || reached.count(out) > 0;
    if (!live) continue;
    for (int i = 0; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && Smooth(node, i)) reached.insert(node.input(i));
    }
  }
  return reached;
}

}  // namespace quilt::onnx_import
