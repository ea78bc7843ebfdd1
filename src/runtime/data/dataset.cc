#include "src/runtime/data/dataset.h"

#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/common/status.h"
#include "src/runtime/counter_random.h"
#include "src/runtime/data/npy.h"

namespace quilt {
namespace {

// Per-sample dims of a tensor whose batch dim is its first (multiple 1).
absl::StatusOr<std::vector<int64_t>> SampleDims(const TensorInfo& t) {
  if (t.shape.rank() == 0 || t.shape.BatchAxis() != 0 || t.shape.dim(0).value != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' ", t.shape.ToString(),
                     " must have the batch as its first dimension to be fed from a dataset"));
  }
  std::vector<int64_t> d = t.shape.Concrete(1);
  d.erase(d.begin());
  return d;
}

int64_t Prod(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

std::vector<int64_t> WithBatch(int64_t b, std::vector<int64_t> d) {
  d.insert(d.begin(), b);
  return d;
}

// Samples read from memory-mapped .npy files, wrapping around at the end.
class NumpyDataset final : public Dataset {
 public:
  NumpyDataset(std::shared_ptr<const NpyMapping> x, std::shared_ptr<const NpyMapping> y)
      : x_(std::move(x)), y_(std::move(y)) {}
  int64_t size() const override { return x_->header().dims[0]; }
  absl::Status Batch(int64_t start, int64_t count, Tensor* input, Tensor* label) override {
    RETURN_IF_ERROR(Copy(*x_, start, count, input));
    return Copy(*y_, start, count, label);
  }

 private:
  static absl::Status Copy(const NpyMapping& src, int64_t start, int64_t count, Tensor* dst) {
    const NpyHeader& h = src.header();
    std::vector<int64_t> dims = h.dims;
    const int64_t n = dims[0];
    dims[0] = count;
    ASSIGN_OR_RETURN(*dst, Tensor::Empty(h.dtype, dims));
    const int64_t row = count == 0 ? 0 : dst->numel() / count;
    const int64_t out_bytes = DTypeSize(h.dtype);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t s = (start + i) % n;
      ConvertNpyElements(h, src.data() + s * row * h.element_bytes, row,
                         static_cast<char*>(dst->raw()) + i * row * out_bytes);
    }
    return absl::OkStatus();
  }
  std::shared_ptr<const NpyMapping> x_, y_;
};

// Class centres above this many floats (classes × features) are computed per
// element instead of kept.
constexpr int64_t kMaxCachedOffsets = int64_t{1} << 22;

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(DataSignature sig, std::vector<int64_t> in_dims, std::vector<int64_t> label_dims,
                   int64_t vocab, int64_t classes, uint64_t seed, bool unit_labels)
      : sig_(std::move(sig)),
        in_dims_(std::move(in_dims)),
        label_dims_(std::move(label_dims)),
        vocab_(vocab),
        classes_(classes),
        seed_(seed),
        mixed_seed_(Mix(seed)),
        unit_labels_(unit_labels) {
    const int64_t f = Prod(in_dims_);
    if (classes_ > 0 && classes_ * f <= kMaxCachedOffsets) {
      offsets_.resize(static_cast<size_t>(classes_ * f));
      for (int64_t c = 0; c < classes_; ++c) {
        for (int64_t e = 0; e < f; ++e) offsets_[c * f + e] = Offset(c, e);
      }
    }
  }

  int64_t size() const override { return 0; }

  absl::Status Batch(int64_t start, int64_t count, Tensor* input, Tensor* label) override {
    ASSIGN_OR_RETURN(*input, Tensor::Empty(sig_.input.dtype, WithBatch(count, in_dims_)));
    ASSIGN_OR_RETURN(*label, Tensor::Empty(sig_.label.dtype, WithBatch(count, label_dims_)));
    const int64_t f = Prod(in_dims_), p = Prod(label_dims_);
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t sample = static_cast<uint64_t>(start + i);
      if (input->dtype() == DType::kI64) {
        for (int64_t e = 0; e < f; ++e) {
          input->i64()[i * f + e] =
              static_cast<int64_t>(CounterUniform(seed_ ^ 0x70c5, sample * f + e) *
                                   static_cast<float>(vocab_)) %
              vocab_;
        }
        const int64_t* tokens = input->i64() + i * f;
        for (int64_t k = 0; k < p; ++k) {
          if (label->dtype() == DType::kI64) {
            // Per-token labels: a function of the token (learnable through
            // the embedding), not the token itself, which a model whose
            // output projection is its embedding predicts from the start.
            label->i64()[i * p + k] = (tokens[k % f] * 3 + 1) % classes_;
            continue;
          }
          // Float targets: tanh of a sum of per-token values (learnable
          // through the embedding, pooled) over up to 32 strided tokens.
          const int64_t used = std::min<int64_t>(f, 32), stride = std::max<int64_t>(1, f / used);
          double s = 0;
          for (int64_t j = 0; j < used; ++j) {
            const uint64_t key =
                (static_cast<uint64_t>(k) << 32) ^ static_cast<uint64_t>(tokens[j * stride]);
            s += 2.0 * CounterUniform(seed_ ^ 0x70f1a7ULL, key) - 1.0;
          }
          label->f32()[i * p + k] = Target(s, used);
        }
        continue;
      }
      float* x = input->f32() + i * f;
      // Class of the sample; every label position of the sample gets it.
      const int64_t cls = classes_ > 0
                              ? static_cast<int64_t>(Mix(seed_ ^ 0xc1a55ULL ^ Mix(sample)) %
                                                     static_cast<uint64_t>(classes_))
                              : 0;
      // Standard normals by Box–Muller, one pair of uniforms giving elements
      // e and e + 1 (cosine and sine): each value is a function of the
      // sample and the element alone, whatever the batching. In float: this
      // runs on the data thread beside the kernels every step.
      const uint64_t first = 2 * sample * static_cast<uint64_t>(f);
      for (int64_t e = 0; e < f; e += 2) {
        const uint64_t k = first + 2 * static_cast<uint64_t>(e);
        const float u1 = std::max(0x1p-25f, CounterUniformMixed(mixed_seed_, k));
        const float u2 = CounterUniformMixed(mixed_seed_, k + 1);
        const float r = std::sqrt(-2.0f * std::log(u1));
        const float angle = 6.28318530718f * u2;
        x[e] = r * std::cos(angle);
        if (e + 1 < f) x[e + 1] = r * std::sin(angle);
      }
      // Classification: Gaussian clusters around ±0.5 class centres.
      if (classes_ > 0) {
        if (!offsets_.empty()) {
          const float* off = offsets_.data() + cls * f;
          for (int64_t e = 0; e < f; ++e) x[e] += off[e];
        } else {
          for (int64_t e = 0; e < f; ++e) x[e] += Offset(cls, e);
        }
      }
      // Regression: tanh of a fixed random projection of 32 strided inputs.
      const int64_t used = std::min<int64_t>(f, 32), stride = std::max<int64_t>(1, f / used);
      for (int64_t k = 0; k < p; ++k) {
        if (label->dtype() == DType::kI64) {
          label->i64()[i * p + k] = cls;
          continue;
        }
        double s = 0;
        for (int64_t j = 0; j < used; ++j) {
          const uint64_t key = (static_cast<uint64_t>(k) << 32) ^ j;
          s += (2.0 * CounterUniform(seed_ ^ 0xabcdefULL, key) - 1.0) * x[j * stride];
        }
        label->f32()[i * p + k] = Target(s, used);
      }
    }
    return absl::OkStatus();
  }

 private:
  // A float target from a sum `s` of `used` terms of unit scale: tanh of
  // it, normalized, in (−1, 1) or, for the model's own loss, (0, 1).
  float Target(double s, int64_t used) const {
    const double t = std::tanh(s / std::sqrt(double(used)) * 2);
    return static_cast<float>(unit_labels_ ? 0.5 * (t + 1) : t);
  }

  // The centre of class `cls` along element `e`: ±0.5.
  float Offset(int64_t cls, int64_t e) const {
    return CounterUniform(seed_ ^ 0xce47e5ULL,
                          (static_cast<uint64_t>(cls) << 32) ^ static_cast<uint64_t>(e)) < 0.5f
               ? -0.5f
               : 0.5f;
  }

  DataSignature sig_;
  std::vector<int64_t> in_dims_, label_dims_;
  int64_t vocab_, classes_;
  uint64_t seed_, mixed_seed_;
  bool unit_labels_;            // float labels in (0, 1) rather than (−1, 1)
  std::vector<float> offsets_;  // per class, per element (empty: too many)
};

}  // namespace

absl::StatusOr<DataSignature> DataSignatureOf(const Graph& graph) {
  if (graph.inputs.size() != 1 || graph.labels.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("datasets feed graphs with one input and one label; this graph has ",
                     graph.inputs.size(), " input(s) (", absl::StrJoin(graph.inputs, ", "),
                     ") and ", graph.labels.size(), " label(s)"));
  }
  DataSignature s;
  s.input = *graph.FindTensor(graph.inputs[0]);
  s.label = *graph.FindTensor(graph.labels[0]);
  const TensorInfo* scores =
      graph.loss.prediction.empty() ? nullptr : graph.FindTensor(graph.loss.prediction);
  s.classes_last = graph.loss.type == LossType::kSoftmaxCrossEntropy && scores != nullptr &&
                   scores->shape.rank() == 3 && s.label.shape.rank() == 2 &&
                   s.label.shape.dim(1) == scores->shape.dim(1);
  return s;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenNumpyDataset(const std::string& inputs_path,
                                                          const std::string& labels_path,
                                                          const DataSignature& sig) {
  ASSIGN_OR_RETURN(std::shared_ptr<const NpyMapping> x, NpyMapping::Open(inputs_path));
  ASSIGN_OR_RETURN(std::shared_ptr<const NpyMapping> y, NpyMapping::Open(labels_path));
  ASSIGN_OR_RETURN(std::vector<int64_t> xd, SampleDims(sig.input));
  ASSIGN_OR_RETURN(std::vector<int64_t> yd, SampleDims(sig.label));
  auto check = [&sig](const NpyHeader& t, const std::vector<int64_t>& dims, DType dtype,
                      const std::string& path, const char* what) -> absl::Status {
    std::vector<int64_t> rest(t.dims.begin() + (t.dims.empty() ? 0 : 1), t.dims.end());
    if (t.dims.empty() || rest != dims) {
      std::string need = "N";
      for (int64_t d : dims) absl::StrAppend(&need, ",", d);
      // Per-position labels of a sequence model whose output's classes are
      // on the last axis.
      const bool positions = std::string(what) == "labels" && sig.classes_last;
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", what, " have shape [", absl::StrJoin(t.dims, ","), "]; the model needs [",
          need, "]",
          positions ? " (a 3-D output [N, T, C] takes its classes on the last axis: an output in "
                      "PyTorch's [N, C, T] layout has to be transposed to [N, T, C] in the model)"
                    : ""));
    }
    if (t.dtype != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", what, " are ", DTypeName(t.dtype),
                                                     "; the model needs ", DTypeName(dtype)));
    }
    if (t.dims[0] == 0) return absl::InvalidArgumentError(path + ": no samples");
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check(x->header(), xd, sig.input.dtype, inputs_path, "inputs"));
  RETURN_IF_ERROR(check(y->header(), yd, sig.label.dtype, labels_path, "labels"));
  if (x->header().dims[0] != y->header().dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(inputs_path, " has ", x->header().dims[0],
                                                   " samples but ", labels_path, " has ",
                                                   y->header().dims[0]));
  }
  return std::unique_ptr<Dataset>(new NumpyDataset(std::move(x), std::move(y)));
}

absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(const Graph& graph,
                                                              const DataSignature& sig,
                                                              uint64_t seed) {
  ASSIGN_OR_RETURN(std::vector<int64_t> xd, SampleDims(sig.input));
  ASSIGN_OR_RETURN(std::vector<int64_t> yd, SampleDims(sig.label));
  int64_t vocab = 0;
  if (sig.input.dtype == DType::kI64) {
    for (const Op& op : graph.ops) {
      if (op.type == "Gather" && op.inputs.size() == 2 && op.inputs[1] == sig.input.name) {
        vocab = graph.FindTensor(op.inputs[0])->shape.dim(0).value;
      }
    }
    if (vocab <= 0) {
      return absl::InvalidArgumentError(
          "synthetic data for an integer input needs the embedding (Gather) that reads it");
    }
  } else if (sig.input.dtype != DType::kF32) {
    return absl::InvalidArgumentError("synthetic data supports f32 and i64 inputs");
  }
  int64_t classes = 0;
  if (sig.label.dtype == DType::kI64) {
    // The labels as the loss reads them: through the reshapes and slices a
    // model with its loss inside applies (y.reshape(-1), y[:, 1:]).
    std::set<std::string> labels = {sig.label.name};
    for (bool grew = true; grew;) {
      grew = false;
      for (const Op& op : graph.ops) {
        const bool view = op.type == "Reshape" || op.type == "Flatten" || op.type == "Squeeze" ||
                          op.type == "Unsqueeze" || op.type == "Slice" || op.type == "Cast" ||
                          op.type == "Identity" || op.type == "Gather";
        if (view && !op.inputs.empty() && labels.count(op.inputs[0]) && !op.outputs.empty() &&
            labels.insert(op.outputs[0]).second) {
          grew = true;
        }
      }
    }
    // The class count: the loss's prediction extent along its class axis.
    for (const Op& op : graph.ops) {
      if (op.type == "SoftmaxCrossEntropyLoss" && op.inputs.size() > 1 &&
          labels.count(op.inputs[1])) {
        const Shape& s = graph.FindTensor(op.inputs[0])->shape;
        int64_t axis = op.attrs.Int("class_axis", 1);
        if (axis < 0) axis += s.rank();
        classes = s.dim(static_cast<int>(axis)).value;
      }
      // A loss written with one-hot rows of the labels (class weights,
      // F.nll_loss, F.one_hot).
      if (op.type == "OneHot" && labels.count(op.inputs[0])) {
        classes = op.attrs.Int("classes", 0);
      }
    }
    if (classes <= 0) {
      return absl::InvalidArgumentError(
          "cannot tell the number of classes of the integer labels (Quilt reads it from a "
          "cross-entropy or a one-hot of them; this model reads them otherwise)");
    }
  }
  return std::unique_ptr<Dataset>(
      new SyntheticDataset(sig, std::move(xd), std::move(yd), vocab, classes, seed,
                           /*unit_labels=*/graph.loss.type == LossType::kModel));
}

}  // namespace quilt
