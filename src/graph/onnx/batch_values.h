// Values a model computes from its batch size as data: x.shape[0] in
// `loss.sum() / x.shape[0]`, kl_div's 'batchmean', an unbiased variance's
// B − 1, numel(). The import folds shape arithmetic with a placeholder
// batch (onnx_import.cc), so such a value would be a wrong constant. Each
// value computed from Shape's batch element carries its form, per element
// a·B + c, followed through what the import folds: selections (Gather,
// Slice, reshapes, Concat, Cast), products and sums of the elements, and
// arithmetic with constants. One used as data becomes a BatchAffine op,
// computed from the batch each step runs with (the global batch: the value
// the single-device program sees); one whose form is not followed is
// refused by name.
#ifndef QUILT_SRC_GRAPH_ONNX_BATCH_VALUES_H_
#define QUILT_SRC_GRAPH_ONNX_BATCH_VALUES_H_

#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "src/graph/tensor.h"

namespace quilt::onnx_import {

struct BatchForm {
  // False: computed from the batch by arithmetic not followed.
  bool affine = true;
  // Per element (row-major), when affine: value = a·B + c.
  std::vector<double> a, c;
  // Whether any element varies with the batch (or the form is unknown).
  bool DependsOnBatch() const;
};

// The form of `node`'s output `out` from its inputs' forms (null for an
// input that does not come from the batch) and values (null when not a
// constant). `batch` is the placeholder batch the values were folded with;
// a form that does not reproduce `out` at it is not affine.
BatchForm DeriveBatchForm(const onnx::NodeProto& node, const std::vector<const BatchForm*>& forms,
                          const std::vector<const Tensor*>& values, const Tensor& out,
                          int64_t batch);

}  // namespace quilt::onnx_import

#endif  // QUILT_SRC_GRAPH_ONNX_BATCH_VALUES_H_
