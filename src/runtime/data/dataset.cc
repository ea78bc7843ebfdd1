#include "src/runtime/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/common/status.h"
#include "src/runtime/counter_random.h"
#include "src/runtime/data/label_range.h"
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

// Samples read from memory-mapped .npy files (a file per input), wrapping
// around at the end.
class NumpyDataset final : public Dataset {
 public:
  NumpyDataset(std::vector<std::shared_ptr<const NpyMapping>> xs,
               std::shared_ptr<const NpyMapping> y)
      : xs_(std::move(xs)), y_(std::move(y)) {}
  int64_t size() const override { return y_->header().dims[0]; }
  absl::Status Batch(int64_t start, int64_t count, std::vector<Tensor>* inputs,
                     Tensor* label) override {
    inputs->resize(xs_.size());
    for (size_t j = 0; j < xs_.size(); ++j) {
      RETURN_IF_ERROR(Copy(*xs_[j], start, count, &(*inputs)[j]));
    }
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
  std::vector<std::shared_ptr<const NpyMapping>> xs_;
  std::shared_ptr<const NpyMapping> y_;
};

// Class centres above this many floats (classes × features) are computed per
// element instead of kept.
constexpr int64_t kMaxCachedOffsets = int64_t{1} << 22;

// One input of a synthetic dataset.
struct SyntheticInput {
  enum class Kind { kFloat, kTokens, kOnes };
  Kind kind = Kind::kFloat;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;  // per sample
  int64_t vocab = 0;          // kTokens
};

class SyntheticDataset final : public Dataset {
 public:
  // `driver`: the input the labels follow (its seed is the dataset's, so a
  // one-input graph's data does not depend on how many inputs others have).
  SyntheticDataset(std::vector<SyntheticInput> inputs, size_t driver, DType label_dtype,
                   std::vector<int64_t> label_dims, int64_t classes, uint64_t seed,
                   bool unit_labels)
      : inputs_(std::move(inputs)),
        driver_(driver),
        label_dtype_(label_dtype),
        label_dims_(std::move(label_dims)),
        classes_(classes),
        seed_(seed),
        mixed_seed_(Mix(seed)),
        unit_labels_(unit_labels) {
    const SyntheticInput& in = inputs_[driver_];
    const int64_t f = Prod(in.dims);
    if (in.kind == SyntheticInput::Kind::kFloat && classes_ > 0 &&
        classes_ * f <= kMaxCachedOffsets) {
      offsets_.resize(static_cast<size_t>(classes_ * f));
      for (int64_t c = 0; c < classes_; ++c) {
        for (int64_t e = 0; e < f; ++e) offsets_[c * f + e] = Offset(c, e);
      }
    }
  }

  int64_t size() const override { return 0; }

  absl::Status Batch(int64_t start, int64_t count, std::vector<Tensor>* inputs,
                     Tensor* label) override {
    inputs->resize(inputs_.size());
    for (size_t j = 0; j < inputs_.size(); ++j) {
      ASSIGN_OR_RETURN((*inputs)[j],
                       Tensor::Empty(inputs_[j].dtype, WithBatch(count, inputs_[j].dims)));
    }
    ASSIGN_OR_RETURN(*label, Tensor::Empty(label_dtype_, WithBatch(count, label_dims_)));
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t sample = static_cast<uint64_t>(start + i);
      // Class of the sample; every label position of the sample gets it.
      const int64_t cls = classes_ > 0
                              ? static_cast<int64_t>(Mix(seed_ ^ 0xc1a55ULL ^ Mix(sample)) %
                                                     static_cast<uint64_t>(classes_))
                              : 0;
      for (size_t j = 0; j < inputs_.size(); ++j) {
        if (j != driver_) Fill(j, sample, i, -1, &(*inputs)[j]);
      }
      Tensor* x = &(*inputs)[driver_];
      Fill(driver_, sample, i, cls, x);
      const int64_t f = Prod(inputs_[driver_].dims), p = Prod(label_dims_);
      if (x->dtype() == DType::kI64) {
        const int64_t* tokens = x->i64() + i * f;
        for (int64_t k = 0; k < p; ++k) {
          if (label->dtype() == DType::kI64) {
            // Per-token labels: a function of the token (learnable through
            // the embedding), not the token itself, which a model whose
            // output projection is its embedding predicts from the start.
            // Fewer labels than tokens (a sequence classifier) read the
            // last tokens: the ones a recurrent or causal model's last
            // state has seen most recently.
            const int64_t at = p <= f ? f - p + k : k % f;
            label->i64()[i * p + k] = (tokens[at] * 3 + 1) % classes_;
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
      const float* xs = x->f32() + i * f;
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
          s += (2.0 * CounterUniform(seed_ ^ 0xabcdefULL, key) - 1.0) * xs[j * stride];
        }
        label->f32()[i * p + k] = Target(s, used);
      }
    }
    return absl::OkStatus();
  }

 private:
  // Row `i` of input `j` for `sample`; `cls` >= 0: the driver of a
  // classification, whose floats cluster around the class's centre.
  void Fill(size_t j, uint64_t sample, int64_t i, int64_t cls, Tensor* t) const {
    const SyntheticInput& in = inputs_[j];
    const int64_t f = Prod(in.dims);
    // The driver's streams are the dataset's own; the others' are mixed
    // with their index.
    const uint64_t seed = j == driver_ ? seed_ : seed_ ^ Mix(0x1a9u + j);
    switch (in.kind) {
      case SyntheticInput::Kind::kOnes:
        std::fill(t->i64() + i * f, t->i64() + (i + 1) * f, int64_t{1});
        return;
      case SyntheticInput::Kind::kTokens:
        for (int64_t e = 0; e < f; ++e) {
          t->i64()[i * f + e] = static_cast<int64_t>(CounterUniform(seed ^ 0x70c5, sample * f + e) *
                                                     static_cast<float>(in.vocab)) %
                                in.vocab;
        }
        return;
      case SyntheticInput::Kind::kFloat:
        break;
    }
    float* x = t->f32() + i * f;
    // Standard normals by Box–Muller, one pair of uniforms giving elements
    // e and e + 1 (cosine and sine): each value is a function of the
    // sample and the element alone, whatever the batching. In float: this
    // runs on the data thread beside the kernels every step.
    const uint64_t mixed = j == driver_ ? mixed_seed_ : Mix(seed);
    const uint64_t first = 2 * sample * static_cast<uint64_t>(f);
    for (int64_t e = 0; e < f; e += 2) {
      const uint64_t k = first + 2 * static_cast<uint64_t>(e);
      const float u1 = std::max(0x1p-25f, CounterUniformMixed(mixed, k));
      const float u2 = CounterUniformMixed(mixed, k + 1);
      const float r = std::sqrt(-2.0f * std::log(u1));
      const float angle = 6.28318530718f * u2;
      x[e] = r * std::cos(angle);
      if (e + 1 < f) x[e + 1] = r * std::sin(angle);
    }
    // Classification: Gaussian clusters around ±0.5 class centres.
    if (cls >= 0 && classes_ > 0) {
      if (!offsets_.empty()) {
        const float* off = offsets_.data() + cls * f;
        for (int64_t e = 0; e < f; ++e) x[e] += off[e];
      } else {
        for (int64_t e = 0; e < f; ++e) x[e] += Offset(cls, e);
      }
    }
  }

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

  std::vector<SyntheticInput> inputs_;
  size_t driver_;
  DType label_dtype_;
  std::vector<int64_t> label_dims_;
  int64_t classes_;
  uint64_t seed_, mixed_seed_;
  bool unit_labels_;            // float labels in (0, 1) rather than (−1, 1)
  std::vector<float> offsets_;  // the driver's, per class, per element (empty: too many)
};

}  // namespace

absl::StatusOr<DataSignature> DataSignatureOf(const Graph& graph) {
  if (graph.inputs.empty() || graph.labels.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("datasets feed graphs with at least one input and one label; this graph has ",
                     graph.inputs.size(), " input(s) (", absl::StrJoin(graph.inputs, ", "),
                     ") and ", graph.labels.size(), " label(s)"));
  }
  DataSignature s;
  for (const std::string& name : graph.inputs) {
    const TensorInfo* t = graph.FindTensor(name);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph's input '", name, "' is not a tensor of the graph"));
    }
    s.inputs.push_back(*t);
  }
  const TensorInfo* label = graph.FindTensor(graph.labels[0]);
  if (label == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the graph's label '", graph.labels[0], "' is not a tensor of the graph"));
  }
  s.label = *label;
  const TensorInfo* scores =
      graph.loss.prediction.empty() ? nullptr : graph.FindTensor(graph.loss.prediction);
  s.classes_last = graph.loss.type == LossType::kSoftmaxCrossEntropy && scores != nullptr &&
                   scores->shape.rank() == 3 && s.label.shape.rank() == 2 &&
                   s.label.shape.dim(1) == scores->shape.dim(1);
  return s;
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenNumpyDataset(
    const std::vector<std::string>& inputs_paths, const std::string& labels_path,
    const DataSignature& sig) {
  if (inputs_paths.size() != sig.inputs.size()) {
    std::vector<std::string> names;
    for (const TensorInfo& t : sig.inputs) names.push_back(t.name);
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", sig.inputs.size(), " input(s) (", absl::StrJoin(names, ", "),
                     "), but ", inputs_paths.size(),
                     " inputs file(s) were given: one .npy file per input, in that order, "
                     "then the labels"));
  }
  auto check = [&sig](const NpyHeader& t, const std::vector<int64_t>& dims, DType dtype,
                      const std::string& path, const std::string& what) -> absl::Status {
    std::vector<int64_t> rest(t.dims.begin() + (t.dims.empty() ? 0 : 1), t.dims.end());
    if (t.dims.empty() || rest != dims) {
      std::string need = "N";
      for (int64_t d : dims) absl::StrAppend(&need, ",", d);
      // Per-position labels of a sequence model whose output's classes are
      // on the last axis.
      const bool positions = what == "labels" && sig.classes_last;
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
  std::vector<std::shared_ptr<const NpyMapping>> xs;
  for (size_t j = 0; j < inputs_paths.size(); ++j) {
    const std::string& path = inputs_paths[j];
    ASSIGN_OR_RETURN(std::shared_ptr<const NpyMapping> x, NpyMapping::Open(path));
    ASSIGN_OR_RETURN(std::vector<int64_t> xd, SampleDims(sig.inputs[j]));
    RETURN_IF_ERROR(check(
        x->header(), xd, sig.inputs[j].dtype, path,
        sig.inputs.size() == 1 ? std::string("inputs") : "inputs '" + sig.inputs[j].name + "'"));
    xs.push_back(std::move(x));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const NpyMapping> y, NpyMapping::Open(labels_path));
  ASSIGN_OR_RETURN(std::vector<int64_t> yd, SampleDims(sig.label));
  RETURN_IF_ERROR(check(y->header(), yd, sig.label.dtype, labels_path, "labels"));
  for (size_t j = 0; j < xs.size(); ++j) {
    if (xs[j]->header().dims[0] != y->header().dims[0]) {
      return absl::InvalidArgumentError(absl::StrCat(inputs_paths[j], " has ",
                                                     xs[j]->header().dims[0], " samples but ",
                                                     labels_path, " has ", y->header().dims[0]));
    }
  }
  return std::unique_ptr<Dataset>(new NumpyDataset(std::move(xs), std::move(y)));
}

absl::StatusOr<std::unique_ptr<Dataset>> OpenNumpyFiles(const std::string& files,
                                                        const DataSignature& sig) {
  std::vector<std::string> inputs = absl::StrSplit(files, ',');
  if (inputs.size() < 2) {
    return absl::InvalidArgumentError("--data must be INPUTS.npy,LABELS.npy or synthetic[:SEED]");
  }
  const std::string labels = inputs.back();
  inputs.pop_back();
  return OpenNumpyDataset(inputs, labels, sig);
}

absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(const Graph& graph,
                                                              const DataSignature& sig,
                                                              uint64_t seed) {
  ASSIGN_OR_RETURN(std::vector<int64_t> yd, SampleDims(sig.label));
  std::vector<SyntheticInput> inputs;
  for (const TensorInfo& t : sig.inputs) {
    SyntheticInput in;
    in.dtype = t.dtype;
    ASSIGN_OR_RETURN(in.dims, SampleDims(t));
    if (t.dtype == DType::kI64) {
      for (const Op& op : graph.ops) {
        if (op.type == "Gather" && op.inputs.size() == 2 && op.inputs[1] == t.name) {
          in.vocab = graph.FindTensor(op.inputs[0])->shape.dim(0).value;
        }
      }
      in.kind = in.vocab > 0 ? SyntheticInput::Kind::kTokens : SyntheticInput::Kind::kOnes;
    } else if (t.dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "synthetic data supports f32 and i64 inputs; '", t.name, "' is ", DTypeName(t.dtype)));
    }
    inputs.push_back(std::move(in));
  }
  // The labels follow the first float input, else the token input of the
  // largest vocabulary (the words, not their segment ids), the last of
  // equals (a translation's target tokens, after its source's).
  size_t driver = inputs.size();
  for (size_t j = 0; j < inputs.size() && driver == inputs.size(); ++j) {
    if (inputs[j].kind == SyntheticInput::Kind::kFloat) driver = j;
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j].kind == SyntheticInput::Kind::kTokens &&
        (driver == inputs.size() || (inputs[driver].kind == SyntheticInput::Kind::kTokens &&
                                     inputs[j].vocab >= inputs[driver].vocab))) {
      driver = j;
    }
  }
  if (driver == inputs.size()) {
    return absl::InvalidArgumentError(
        "synthetic data for an integer input needs the embedding (Gather) that reads it");
  }
  int64_t classes = 0;
  if (sig.label.dtype == DType::kI64) {
    classes = LabelsAsTheLossReadsThem(graph, sig.label.name).classes;
    if (classes <= 0) {
      return absl::InvalidArgumentError(
          "cannot tell the number of classes of the integer labels (Quilt reads it from a "
          "cross-entropy or a one-hot of them; this model reads them otherwise)");
    }
  }
  return std::unique_ptr<Dataset>(
      new SyntheticDataset(std::move(inputs), driver, sig.label.dtype, std::move(yd), classes, seed,
                           /*unit_labels=*/graph.loss.type == LossType::kModel));
}

}  // namespace quilt
