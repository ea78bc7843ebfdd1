// ONNX import (opsets 9–22) of what torch.onnx.export produces for MLPs,
// CNNs and transformer blocks. Initializers become parameters with their
// values (scalars folded by the exporter, named "onnx::...", stay
// constants); shape computations are folded; the batch (every input's first
// dimension) becomes symbolic, including in Reshape targets the exporter
// baked it into. A loss the model computes (a scalar output that reads
// its second input, the labels) becomes the graph's loss (model_loss.h).
// All unsupported ops are reported
// together, by type and node name; truncated or corrupt files get a clear
// error.
#ifndef QUILT_SRC_GRAPH_ONNX_ONNX_IMPORT_H_
#define QUILT_SRC_GRAPH_ONNX_ONNX_IMPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"

namespace quilt {

// In the name of the constant that masks an embedding table's row of zeros
// (nn.Embedding's padding_idx, which the export loses) out of the lookup's
// gradient: "<table>/padding_row_<row>".
inline constexpr char kPaddingRowMark[] = "/padding_row_";

// The constants import folds (shapes, masks, weights transposed) may take
// at most this much each, and in all: an ONNX file holds at most 2 GiB, so
// a fold past these is a malformed shape (a batch of 2^31 rows), refused
// rather than asked of the allocator.
inline constexpr int64_t kMaxFoldedConstantBytes = int64_t{1} << 30;
inline constexpr int64_t kMaxFoldedConstantsBytes = int64_t{4} << 30;

struct OnnxImportOptions {
  // Batch size to record as the graph's reference batch (0 = the exported
  // one). The graph itself is batch-symbolic either way.
  int64_t batch = 0;
  // Name used in errors (e.g. the file path).
  std::string source = "model.onnx";
  // The output that is the model's own loss (model_loss.h); empty: the
  // first that can be.
  std::string loss_output;
};

// Errors: INVALID_ARGUMENT with the reason (corrupt file, unsupported opset,
// ops or data types, dynamic dims other than the batch, inconsistent
// shapes, constants past the bounds above), naming nodes and tensors; the
// model's own text in them (names, op types) printable UTF-8, its control
// characters and broken bytes shown as '?'.
absl::StatusOr<Graph> ImportOnnx(const std::string& bytes, const OnnxImportOptions& options);
// The same, freeing `bytes` once they are parsed (a large model's weights
// are then held twice at most while importing, not three times).
absl::StatusOr<Graph> ImportOnnx(std::string&& bytes, const OnnxImportOptions& options);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_ONNX_ONNX_IMPORT_H_
