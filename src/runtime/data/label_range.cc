#include "src/runtime/data/label_range.h"

#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/runtime/data/npy.h"

namespace quilt {

LabelUse LabelsAsTheLossReadsThem(const Graph& graph, const std::string& label) {
  LabelUse use;
  // The labels as the loss reads them: through the reshapes and slices a
  // model with its loss inside applies (y.reshape(-1), y[:, 1:]).
  std::set<std::string> labels = {label};
  for (bool grew = true; grew;) {
    grew = false;
    for (const Op& op : graph.ops) {
      const bool reshape = op.type == "Reshape" || op.type == "Flatten" || op.type == "Squeeze" ||
                           op.type == "Unsqueeze" || op.type == "Cast" || op.type == "Identity";
      const bool subset = op.type == "Slice" || op.type == "Gather";
      if ((reshape || subset) && !op.inputs.empty() && labels.count(op.inputs[0]) &&
          !op.outputs.empty() && labels.insert(op.outputs[0]).second) {
        grew = true;
        use.every_value &= reshape;
      }
    }
  }
  // The class count: the loss's prediction extent along its class axis.
  bool first = true;
  auto found = [&](int64_t classes, std::optional<int64_t> ignore) {
    if (!first && (classes != use.classes || ignore != use.ignore)) use.every_value = false;
    first = false;
    use.classes = classes;
    use.ignore = ignore;
  };
  for (const Op& op : graph.ops) {
    if (op.type == "SoftmaxCrossEntropyLoss" && op.inputs.size() > 1 &&
        labels.count(op.inputs[1])) {
      const Shape& s = graph.FindTensor(op.inputs[0])->shape;
      int64_t axis = op.attrs.Int("class_axis", 1);
      if (axis < 0) axis += s.rank();
      std::optional<int64_t> ignore;
      if (op.attrs.Has("ignore_index")) ignore = op.attrs.Int("ignore_index", -1);
      found(s.dim(static_cast<int>(axis)).value, ignore);
    }
    // A loss written with one-hot rows of the labels (class weights,
    // F.nll_loss, F.one_hot).
    if (op.type == "OneHot" && labels.count(op.inputs[0])) {
      found(op.attrs.Int("classes", 0), std::nullopt);
    }
  }
  return use;
}

absl::Status CheckLabelRange(const Graph& graph, const DataSignature& sig,
                             const std::string& labels_path) {
  if (sig.label.dtype != DType::kI64) return absl::OkStatus();
  const LabelUse use = LabelsAsTheLossReadsThem(graph, sig.label.name);
  if (use.classes <= 0 || !use.every_value) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::shared_ptr<const NpyMapping> y, NpyMapping::Open(labels_path));
  const NpyHeader& h = y->header();
  if (h.dtype != DType::kI64 || h.dims.empty() || h.dims[0] <= 0) return absl::OkStatus();
  int64_t total = 1;
  for (int64_t d : h.dims) total *= d;
  const int64_t per_sample = total / h.dims[0];
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int64_t> values(kChunk);
  for (int64_t at = 0; at < total; at += kChunk) {
    const int64_t n = std::min(kChunk, total - at);
    ConvertNpyElements(h, y->data() + at * h.element_bytes, n, values.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = values[i];
      if ((v >= 0 && v < use.classes) || (use.ignore.has_value() && v == *use.ignore)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          labels_path, ": label ", v, " of sample ", (at + i) / per_sample,
          " is not a class in [0, ", use.classes, ") (the model's loss reads ", use.classes,
          " classes", use.ignore.has_value() ? absl::StrCat(" and skips ", *use.ignore) : "", ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace quilt
