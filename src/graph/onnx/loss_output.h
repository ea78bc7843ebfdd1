// A model that computes its own loss must return that loss as it is: the
// import trains the cross-entropy node itself (split over replicas with its
// own reduction), so anything computed from it — a factor, an added
// penalty, a second loss — would silently drop out of training. Checked on
// the ONNX graph before conversion: at most one SoftmaxCrossEntropyLoss,
// and no graph output computed from its loss other than through Identity.
#ifndef QUILT_SRC_GRAPH_ONNX_LOSS_OUTPUT_H_
#define QUILT_SRC_GRAPH_ONNX_LOSS_OUTPUT_H_

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"

namespace quilt::onnx_import {

// Errors: INVALID_ARGUMENT naming the losses or the output and the ops
// between it and the loss.
absl::Status CheckLossOutputs(const onnx::GraphProto& graph);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_LOSS_OUTPUT_H_
