// Training data for a graph's data inputs (one or more) and its label
// tensor: NumPy arrays, a file per input (batches taken in order, wrapping
// around at the end), or a seeded synthetic set that is learnable. Sample i is always the same
// data, so every replica of a distributed run can read exactly its slice of each global batch and
// see what the single-device run sees.
#ifndef QUILT_SRC_RUNTIME_DATA_DATASET_H_
#define QUILT_SRC_RUNTIME_DATA_DATASET_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/graph/graph.h"
#include "src/graph/tensor.h"

namespace quilt {

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Samples before wrap-around (0 = unbounded).
  virtual int64_t size() const = 0;
  // Samples [start, start + count) of the stream (wrapping), shaped for the
  // graph's inputs (in DataSignature::inputs' order) and label at batch
  // `count`.
  virtual absl::Status Batch(int64_t start, int64_t count, std::vector<Tensor>* inputs,
                             Tensor* label) = 0;
};

// The graph's data inputs, in the graph's order, and its label (errors:
// INVALID_ARGUMENT when it has no input or not one label).
struct DataSignature {
  std::vector<TensorInfo> inputs;
  TensorInfo label;
  // Per-position labels of a sequence output [N, T, C] whose classes are on
  // its last axis (Quilt's softmax cross-entropy on a 3-D output).
  bool classes_last = false;
};
absl::StatusOr<DataSignature> DataSignatureOf(const Graph& graph);

// Errors: NOT_FOUND / INVALID_ARGUMENT naming the file, or a shape or type
// that does not fit the graph (the expected per-sample shape is named).
absl::StatusOr<std::unique_ptr<Dataset>> OpenNumpyDataset(
    const std::vector<std::string>& inputs_paths, const std::string& labels_path,
    const DataSignature& signature);
// The same from a --data flag's "INPUTS.npy[,INPUTS2.npy…],LABELS.npy".
absl::StatusOr<std::unique_ptr<Dataset>> OpenNumpyFiles(const std::string& files,
                                                        const DataSignature& signature);

// Seeded synthetic data. Classification with float inputs: each sample has
// a class and its inputs are N(0, 1) around a ±0.5 centre per class (every
// label position gets the class); regression: N(0, 1) inputs and targets
// tanh of a fixed random projection (for a loss the model computes,
// (tanh + 1) / 2: values in (0, 1), as a binary cross-entropy's or a KL
// divergence's targets must be); integer inputs are tokens of the
// vocabulary the graph's embedding (Gather) reads, and per-token labels are
// (3 × token + 1) mod the class count (a sequence classifier's: of its last
// tokens). All learnable. With several inputs, the
// first float input (else the token input of the largest vocabulary, the
// last of equals) sets the labels as above;
// other float inputs are N(0, 1), other token inputs random tokens, and an
// integer input no embedding reads (an attention mask) is all ones.
// Errors: INVALID_ARGUMENT when the input/label kinds are unsupported.
absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(const Graph& graph,
                                                              const DataSignature& signature,
                                                              uint64_t seed);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_DATA_DATASET_H_
