// Initializers the exporter folded from a transposed weight. With constant
// folding, torch.onnx.export writes MatMul(x, Transpose(W)) as
// MatMul(x, onnx::MatMul_N) with onnx::MatMul_N = Wᵀ. When W is used
// elsewhere too (a tied embedding: Gather(W) and the output projection),
// the two would train as separate parameters. A copy is a 2-D float
// initializer named "onnx::…" equal, element for element, to the transpose
// of a named 2-D float initializer.
#ifndef QUILT_SRC_GRAPH_ONNX_TRANSPOSED_COPIES_H_
#define QUILT_SRC_GRAPH_ONNX_TRANSPOSED_COPIES_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

// The transpose of a 2-D float tensor (a trained weight, for its copy).
absl::StatusOr<Tensor> TransposedMatrix(const Tensor& w);

// copy name → the weight it is the transpose of.
std::map<std::string, std::string> TransposedCopies(
    const std::map<std::string, Tensor>& initializers);

}  // namespace quilt

#endif  // QUILT_SRC_GRAPH_ONNX_TRANSPOSED_COPIES_H_
