// Outputs a model returns beside its loss (an accuracy from ArgMax, a
// top-k metric) are left out of training; one computed with ops the
// import does not support would fail the whole import. When another output
// is declared a scalar (a loss), such outputs are removed from the ONNX
// graph before conversion, with the nodes only they need, and a note names
// them and the ops.
#ifndef QUILT_SRC_GRAPH_ONNX_UNUSED_OUTPUTS_H_
#define QUILT_SRC_GRAPH_ONNX_UNUSED_OUTPUTS_H_

#include <functional>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace quilt::onnx_import {

// `supported(node)`: whether the import converts the node. Returns the
// note ("" when nothing was removed).
std::string DropUnsupportedOutputs(onnx::GraphProto* graph,
                                   const std::function<bool(const onnx::NodeProto&)>& supported);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_UNUSED_OUTPUTS_H_
