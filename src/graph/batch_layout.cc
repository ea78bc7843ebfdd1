#include "src/graph/batch_layout.h"

#include <algorithm>
#include <map>
#include <string>

namespace quilt {
namespace {

bool IsView(const std::string& type) {
  return type == "Reshape" || type == "Flatten" || type == "Squeeze" || type == "Unsqueeze";
}

// Product of the (fixed) extents before the batch dim.
int64_t Before(const Shape& s) {
  int64_t p = 1;
  for (int i = 0; i < s.BatchAxis(); ++i) p *= s.dim(i).value;
  return p;
}

}  // namespace

void MarkInterleavedBatches(Graph* g) {
  absl::StatusOr<std::vector<int>> order = g->TopologicalOrder();
  if (!order.ok()) return;
  // Tensor → the extent its batch dim holds outside the batch (the rows
  // are [outer, B, inner] in row-major order); absent = 1.
  std::map<std::string, int64_t> outer;
  auto outer_of = [&](const std::string& t) {
    auto it = outer.find(t);
    return it == outer.end() ? int64_t{1} : it->second;
  };
  for (int i : *order) {
    const Op& op = g->ops[i];
    const bool view = IsView(op.type);
    // The batch input: a view's data; else the most interleaved one.
    const TensorInfo* in = nullptr;
    int64_t in_outer = 1;
    for (size_t k = 0; k < op.inputs.size() && (!view || k == 0); ++k) {
      const TensorInfo* t = g->FindTensor(op.inputs[k]);
      if (t == nullptr || !t->shape.HasBatch()) continue;
      if (in == nullptr || outer_of(t->name) > in_outer) {
        in = t;
        in_outer = outer_of(t->name);
      }
    }
    if (in == nullptr) continue;
    const int64_t in_multiple = in->shape.dim(in->shape.BatchAxis()).value;
    for (const std::string& name : op.outputs) {
      const TensorInfo* t = g->FindTensor(name);
      if (t == nullptr || !t->shape.HasBatch()) continue;
      const int64_t multiple = t->shape.dim(t->shape.BatchAxis()).value;
      int64_t o = in_outer;
      if (view) {
        // Row-major order: what precedes the batch's rows in the input,
        // less the output dims before the batch dim.
        const int64_t p = in_outer * Before(in->shape), q = Before(t->shape);
        o = q > 0 && p % q == 0 ? p / q : std::max<int64_t>(2, p);
      } else if (multiple > in_multiple) {
        o = std::max<int64_t>(2, in_outer);
      }
      if (o > 1) outer[name] = o;
    }
  }
  for (const TensorInfo& t : g->tensors()) {
    g->MutableTensor(t.name)->interleaved_batch = outer_of(t.name) > 1;
  }
}

}  // namespace quilt
