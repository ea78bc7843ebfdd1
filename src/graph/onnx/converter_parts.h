// What the ONNX converters share across their files (internal to the
// import): the helpers every converter uses, and the converters of shape
// and constant ops (constant_converters.cc) that Converters() lists.
#ifndef QUILT_SRC_GRAPH_ONNX_CONVERTER_PARTS_H_
#define QUILT_SRC_GRAPH_ONNX_CONVERTER_PARTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "onnx/onnx_pb.h"
#include "src/graph/onnx/import_context.h"

namespace quilt::onnx_import {

using Node = onnx::NodeProto;

// The same-named (or `type`) Quilt op with the node's inputs as data.
absl::Status Direct(ImportContext& ctx, const Node& node, const std::string& type,
                    Attrs attrs = {});
// Element i of a constant of float32, int64, int32 or boolean elements.
double NumberAt(const Tensor& t, int64_t i);
// INVALID_ARGUMENT naming `op` unless NumberAt reads `t`'s elements.
absl::Status CheckNumeric(const Tensor& t, const std::string& op);
// NumPy broadcasting, for folds of element-wise ops on constants: the
// result's dims and, per operand, the element each result element reads.
// Errors: INVALID_ARGUMENT naming the dims when they do not broadcast.
struct Broadcast {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> from;  // [operand][result element]
};
absl::StatusOr<Broadcast> BroadcastDims(const std::vector<std::vector<int64_t>>& operands);
// Input i as data; a constant's infinities become the largest finite
// floats (a mask's fill times a 0 of the mask must be 0, not NaN; softmax
// gives such a score the same zero weight).
absl::StatusOr<std::string> FiniteData(ImportContext& ctx, const Node& node, int i);
// `x` reshaped to `target` (Reshape's convention: -1 is inferred, the batch
// dim's place), named `name`.
absl::StatusOr<std::string> ReshapeTo(ImportContext& ctx, const std::string& x,
                                      std::vector<int64_t> target, const std::string& name);
// A graph constant holding the float32 scalar v.
absl::StatusOr<std::string> ScalarConstant(ImportContext& ctx, const std::string& name, float v);

// Element-wise ops and Expand, folded on constants (elementwise_converters.cc).
absl::Status Binary(ImportContext& ctx, const Node& node);
// Folds an element-wise function of a constant that is not a parameter
// (float32; Abs, Neg and Sign of int64 too: index arithmetic, T5's
// relative position buckets); false for other inputs.
bool FoldUnary(ImportContext& ctx, const Node& node);
absl::Status Unary(ImportContext& ctx, const Node& node);
absl::Status Reciprocal(ImportContext& ctx, const Node& node);
absl::Status ConstantOnlyUnary(ImportContext& ctx, const Node& node);
absl::Status ExpandNode(ImportContext& ctx, const Node& node);
absl::Status Logical(ImportContext& ctx, const Node& node);
// Quilt op `type` of `inputs` computed in float32 (int64 inputs cast to it,
// exact below 2^24) and cast back to int64: integer data (ids, counts).
absl::Status EmitInFloat(ImportContext& ctx, const Node& node, const std::string& type,
                         const std::vector<std::string>& inputs, Attrs attrs);
// The same in two steps, for ops built of several: each int64 tensor of
// `tensors` replaced by its float32 cast (true when any was), then `node`'s
// output as op `type` of `inputs`, cast back to int64 when `integer`.
absl::StatusOr<bool> CastIntsToFloat(ImportContext& ctx, const Node& node,
                                     std::vector<std::string>* tensors);
absl::Status EmitLastOp(ImportContext& ctx, const Node& node, const std::string& type,
                        const std::vector<std::string>& inputs, Attrs attrs, bool integer);
// Activations and windowed layers (layer_converters.cc).
absl::Status LeakyRelu(ImportContext& ctx, const Node& node);
absl::Status HardSigmoidLike(ImportContext& ctx, const Node& node);
absl::Status Composite(ImportContext& ctx, const Node& node);
// Log; of a sigmoid or of 1 − a sigmoid (binary cross-entropy with logits,
// F.logsigmoid) as a stable −softplus.
absl::Status Log(ImportContext& ctx, const Node& node);
absl::Status Clip(ImportContext& ctx, const Node& node);
absl::Status MaxMin(ImportContext& ctx, const Node& node);
absl::Status Conv(ImportContext& ctx, const Node& node);
absl::Status ConvTranspose(ImportContext& ctx, const Node& node);
absl::Status Pool(ImportContext& ctx, const Node& node);
absl::Status Resize(ImportContext& ctx, const Node& node);
// Copies of slices (copy_converters.cc): Tile, Split, and Pad by
// reflection or the edge (`pads` as ONNX orders them).
absl::Status Tile(ImportContext& ctx, const Node& node);
absl::Status Split(ImportContext& ctx, const Node& node);
absl::Status GatherElements(ImportContext& ctx, const Node& node);
absl::Status PadByCopies(ImportContext& ctx, const Node& node, const std::string& mode,
                         const std::vector<int64_t>& pads);
// DepthToSpace and SpaceToDepth as Reshape, Transpose, Reshape
// (block_converters.cc).
absl::Status DepthToSpace(ImportContext& ctx, const Node& node);
absl::Status SpaceToDepth(ImportContext& ctx, const Node& node);
// ScatterND of constants, folded (scatter_converter.cc).
absl::Status ScatterND(ImportContext& ctx, const Node& node);
// Einsum of any number of operands (einsum_converter.cc).
absl::Status Einsum(ImportContext& ctx, const Node& node);
// LSTM and GRU, unrolled (recurrent_converters.cc).
absl::Status Recurrent(ImportContext& ctx, const Node& node);

// Class losses and one-hot labels (class_loss_converters.cc).
absl::Status Sce(ImportContext& ctx, const Node& node);
absl::Status Nll(ImportContext& ctx, const Node& node);
absl::Status OneHotNode(ImportContext& ctx, const Node& node);

// Shape and constant ops: folded on constants, Quilt ops on data.
absl::Status ConstantNode(ImportContext& ctx, const Node& node);
absl::Status Transpose(ImportContext& ctx, const Node& node);
absl::Status Concat(ImportContext& ctx, const Node& node);
absl::Status Slice(ImportContext& ctx, const Node& node);
absl::Status Gather(ImportContext& ctx, const Node& node);
absl::Status ShapeNode(ImportContext& ctx, const Node& node);
absl::Status ConstantOfShape(ImportContext& ctx, const Node& node);
absl::Status EyeLikeNode(ImportContext& ctx, const Node& node);
absl::Status WhereNode(ImportContext& ctx, const Node& node);
absl::Status Cast(ImportContext& ctx, const Node& node);
absl::Status RangeNode(ImportContext& ctx, const Node& node);
absl::Status NotNode(ImportContext& ctx, const Node& node);
absl::Status CompareNode(ImportContext& ctx, const Node& node);
absl::Status TriluNode(ImportContext& ctx, const Node& node);
absl::Status ModNode(ImportContext& ctx, const Node& node);
absl::Status ReduceProdNode(ImportContext& ctx, const Node& node);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_CONVERTER_PARTS_H_
