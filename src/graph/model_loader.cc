#include "src/graph/model_loader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/text_format.h"
#include "src/common/files.h"
#include "src/common/status.h"
#include "src/graph/onnx/onnx_import.h"
#include "src/graph/validate.h"
#include "src/graph/zoo/zoo.h"

namespace quilt {

namespace {

// `bytes`: a const std::string& or a std::string&& (freed once parsed).
template <typename Bytes>
absl::StatusOr<Graph> LoadOnnx(Bytes&& bytes, int64_t batch, const std::string& source,
                               const std::string& loss_output) {
  RETURN_IF_ERROR(CheckGlobalBatch(batch));
  OnnxImportOptions o;
  o.batch = batch;
  o.source = source;
  o.loss_output = loss_output;
  ASSIGN_OR_RETURN(Graph g, ImportOnnx(std::forward<Bytes>(bytes), o));
  // PyTorch names every exported graph alike ("torch_jit", "main_graph"):
  // a file's name says more.
  if (absl::EndsWith(source, ".onnx") &&
      (g.name.empty() || g.name == "torch_jit" || g.name == "main_graph")) {
    const std::string file = std::filesystem::path(source).stem().string();
    if (!file.empty()) g.name = file;
  }
  return g;
}

}  // namespace

absl::StatusOr<Graph> LoadOnnxBytes(const std::string& bytes, int64_t batch,
                                    const std::string& source, const std::string& loss_output) {
  return LoadOnnx(bytes, batch, source, loss_output);
}

absl::StatusOr<Graph> LoadOnnxBytes(std::string&& bytes, int64_t batch, const std::string& source,
                                    const std::string& loss_output) {
  return LoadOnnx(std::move(bytes), batch, source, loss_output);
}

absl::Status FreezeParameters(Graph* g, const std::vector<std::string>& names) {
  std::vector<std::string> unknown;
  for (const std::string& name : names) {
    bool found = false;
    for (ParameterSpec& p : g->parameters) {
      if (p.tensor != name) continue;
      p.frozen = true;
      found = true;
    }
    if (!found) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no parameter named ",
                                                   absl::StrJoin(unknown, ", "),
                                                   " to freeze (`quiltctl graph inspect "
                                                   "--parameters` lists them)"));
  }
  return absl::OkStatus();
}

namespace {

// "a, b, c and 5 more".
std::string SomeNames(const std::vector<std::string>& names, size_t shown) {
  std::vector<std::string> first(names.begin(), names.begin() + std::min(names.size(), shown));
  return absl::StrCat(
      absl::StrJoin(first, ", "),
      names.size() > shown ? absl::StrCat(" and ", names.size() - shown, " more") : "");
}

// Trained tensors the ONNX exporter computed (constant folding names them
// "onnx::<consumer>_<n>"), but for a MatMul's or a recurrent layer's: those
// are transposed or gate-reordered weights, which train as the weights they
// come from. The rest are expressions of parameters or buffers that now
// train as weights of their own.
std::vector<std::string> FoldedNotes(const Graph& g) {
  std::vector<std::string> conv, other;
  for (const ParameterSpec& p : g.parameters) {
    const bool rearranged =
        absl::StartsWith(p.tensor, "onnx::MatMul_") || absl::StartsWith(p.tensor, "onnx::LSTM_") ||
        absl::StartsWith(p.tensor, "onnx::GRU_") || absl::StartsWith(p.tensor, "onnx::RNN_");
    if (p.frozen || !absl::StartsWith(p.tensor, "onnx::") || rearranged) continue;
    (absl::StartsWith(p.tensor, "onnx::Conv_") ? conv : other).push_back(p.tensor);
  }
  std::vector<std::string> notes;
  if (!conv.empty()) {
    notes.push_back(absl::StrCat(
        "convolution weights computed by the exporter: ", SomeNames(conv, 4),
        "; an export in eval mode (torch.onnx.export's default) folds batch norm into the "
        "convolutions, and the model would train without it: export with "
        "training=torch.onnx.TrainingMode.TRAINING"));
  }
  if (!other.empty()) {
    notes.push_back(absl::StrCat(
        "trained tensors computed by the exporter from parameters or buffers (constant "
        "folding): ",
        SomeNames(other, 4),
        "; each trains as a weight of its own (a weight scaled or normalized in forward, or "
        "a buffer, would not train as in PyTorch): export with do_constant_folding=False, "
        "or pass --frozen for buffers"));
  }
  return notes;
}

}  // namespace

namespace {

// Embedding tables looked up directly with two or more all-zero rows: the
// export drops padding_idx, and with several candidates none is taken.
std::vector<std::string> ZeroRowNotes(const Graph& g) {
  std::vector<std::string> notes;
  std::set<std::string> tables;
  for (const Op& op : g.ops) {
    if (op.type == "Gather" && !op.inputs.empty()) tables.insert(op.inputs[0]);
  }
  for (const ParameterSpec& p : g.parameters) {
    if (!tables.count(p.tensor) || !p.value.has_value()) continue;
    const Tensor& t = *p.value;
    if (t.dtype() != DType::kF32 || t.rank() != 2 || t.dim(0) < 2) continue;
    std::vector<int64_t> zero;
    for (int64_t r = 0; r < t.dim(0); ++r) {
      const float* row = t.f32() + r * t.dim(1);
      if (std::all_of(row, row + t.dim(1), [](float v) { return v == 0.0f; })) zero.push_back(r);
    }
    if (zero.size() < 2) continue;
    notes.push_back(absl::StrCat(
        "embedding ", p.tensor, ": rows ",
        absl::StrJoin(zero.begin(), zero.begin() + std::min<size_t>(zero.size(), 4), ", "),
        zero.size() > 4 ? ", …" : "",
        " are all zeros; the export does not say which, if any, is "
        "nn.Embedding's padding_idx, so every row trains through the lookup (PyTorch gives the "
        "padding_idx row no gradient)"));
  }
  return notes;
}

}  // namespace

std::vector<std::string> ModelNotes(const Graph& g) {
  std::vector<std::string> notes = FoldedNotes(g);
  for (std::string& n : ZeroRowNotes(g)) notes.push_back(std::move(n));
  notes.insert(notes.end(), g.import_notes.begin(), g.import_notes.end());
  for (const auto& [name, value] : g.constants) {
    const size_t at = name.find(kPaddingRowMark);
    if (at == std::string::npos) continue;
    notes.push_back(absl::StrCat("embedding ", name.substr(0, at), ": row ",
                                 name.substr(at + strlen(kPaddingRowMark)),
                                 " is all zeros, taken for nn.Embedding's padding_idx: the lookup "
                                 "gives it no gradient, as PyTorch does"));
  }
  std::vector<std::string> odd;
  for (const ParameterSpec& p : g.parameters) {
    if (p.frozen || absl::StartsWith(p.tensor, "onnx::")) continue;
    const size_t dot = p.tensor.rfind('.');
    const std::string leaf = dot == std::string::npos ? p.tensor : p.tensor.substr(dot + 1);
    if (absl::StrContains(leaf, "weight") || absl::StrContains(leaf, "bias")) continue;
    odd.push_back(p.tensor);
  }
  if (!odd.empty()) {
    constexpr size_t kShown = 8;
    std::vector<std::string> shown(odd.begin(), odd.begin() + std::min(odd.size(), kShown));
    notes.push_back(absl::StrCat(
        "trained as weights: ", SomeNames(odd, kShown),
        " (not named like a layer's weight or bias; ONNX does not mark registered buffers: if ",
        odd.size() == 1 ? "it is one" : "they are buffers", ", pass --frozen ",
        absl::StrJoin(shown, ","), ")"));
  }
  std::vector<std::string> label_only;
  for (const ParameterSpec& p : g.parameters) {
    const auto& named = g.label_only_parameters;
    if (!p.frozen && std::find(named.begin(), named.end(), p.tensor) != named.end()) {
      label_only.push_back("'" + p.tensor + "'");
    }
  }
  if (!label_only.empty()) {
    notes.push_back(absl::StrCat(
        "weights ", SomeNames(label_only, 8),
        " are used only where the loss reads the labels: they train as parameters; if they are "
        "buffers of a loss module (nn.BCEWithLogitsLoss's weight or pos_weight, class "
        "weights), pass them to --frozen"));
  }
  if (g.loss.output.empty() && g.outputs.size() > 1) {
    const bool named = g.output_names.size() == g.outputs.size();
    notes.push_back(absl::StrCat(
        "the model has ", g.outputs.size(), " outputs; the loss is computed on the first ('",
        named ? g.output_names[0] : g.outputs[0], "') and the others take no part in training"));
  }
  return notes;
}

absl::StatusOr<Graph> LoadModel(const std::string& spec, int64_t batch,
                                const std::string& loss_output) {
  RETURN_IF_ERROR(CheckGlobalBatch(batch));
  if (!loss_output.empty() && !absl::EndsWith(spec, ".onnx")) {
    return absl::InvalidArgumentError("--loss-output names an ONNX model's output; " + spec +
                                      " is no ONNX model (its loss is the graph's own, or --loss)");
  }
  Graph g;
  if (absl::StartsWith(spec, "zoo:")) {
    ASSIGN_OR_RETURN(g, zoo::BuildZooModel(spec.substr(4)));
    RETURN_IF_ERROR(ValidateGraph(&g));
  } else if (absl::EndsWith(spec, ".onnx")) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(spec));
    ASSIGN_OR_RETURN(g, LoadOnnxBytes(std::move(bytes), batch, spec, loss_output));
  } else if (absl::EndsWith(spec, ".pb") || absl::EndsWith(spec, ".pbtxt") ||
             absl::EndsWith(spec, ".textproto")) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(spec));
    quilt::v1::TrainingGraph proto;
    const bool text = !absl::EndsWith(spec, ".pb");
    const bool ok = text ? google::protobuf::TextFormat::ParseFromString(bytes, &proto)
                         : proto.ParseFromString(bytes);
    if (!ok) return absl::InvalidArgumentError(spec + ": not a valid quilt.v1.TrainingGraph");
    if (proto.ops_size() == 0) {
      return absl::InvalidArgumentError(spec + ": the graph has no ops (an empty file?)");
    }
    absl::StatusOr<Graph> parsed = Graph::FromProto(proto);
    if (!parsed.ok()) return Annotate(parsed.status(), spec);
    g = std::move(*parsed);
    if (absl::Status s = ValidateGraph(&g); !s.ok()) return Annotate(s, spec);
  } else {
    return absl::InvalidArgumentError(
        "model '" + spec + "': expected zoo:NAME, a .onnx file, or a .pb / .pbtxt TrainingGraph");
  }
  if (batch > 0) g.reference_batch = batch;
  if (g.reference_batch <= 0) g.reference_batch = 1;
  return g;
}

absl::StatusOr<LossType> ChooseLoss(LossType want, const std::string& asked, Graph* g) {
  if (want == LossType::kNone) return LossType::kNone;
  if (!g->loss.output.empty()) {
    const bool has_sce = std::any_of(g->ops.begin(), g->ops.end(), [](const Op& op) {
      return op.type == "SoftmaxCrossEntropyLoss";
    });
    if (g->loss.type == LossType::kModel && want == LossType::kSoftmaxCrossEntropy && has_sce) {
      return LossType::kNone;
    }
    if (g->loss.type == LossType::kModel) {
      return absl::InvalidArgumentError("the model computes its own loss ('" + g->loss.output +
                                        "'); " + asked +
                                        " applies to a model that returns its prediction");
    }
    if (g->loss.type != want) {
      return absl::InvalidArgumentError("the model already computes a different loss than " +
                                        asked);
    }
    return LossType::kNone;
  }
  if (g->loss.type != LossType::kNone && g->loss.type != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model's loss is ", g->loss.type == LossType::kMse ? "mse" : "softmax cross-entropy",
        "; ", asked, " asks for another"));
  }
  g->loss.type = want;
  return want;
}

}  // namespace quilt
