// Which ONNX values a gradient of the model's outputs can reach: walking
// the (topologically sorted) nodes backwards from the graph outputs, a
// node's input is reached when one of its outputs is and the input is one
// the output varies smoothly with. Comparisons, shape ops, casts to
// integers or booleans, indices, shape and axes operands and Where's
// condition stop it. A float initializer the gradient never reaches (a
// causal-mask buffer that only feeds a comparison) cannot train: the
// import keeps it a constant, as PyTorch keeps a registered buffer.
#ifndef QUILT_SRC_GRAPH_ONNX_GRADIENT_REACH_H_
#define QUILT_SRC_GRAPH_ONNX_GRADIENT_REACH_H_

#include <set>
#include <string>

#include "onnx/onnx_pb.h"

namespace quilt::onnx_import {

std::set<std::string> GradientReach(const onnx::GraphProto& graph);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_GRADIENT_REACH_H_
