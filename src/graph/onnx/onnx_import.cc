#include "src/graph/onnx/onnx_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"
#include "src/common/display_text.h"
#include "src/common/status.h"
#include "src/graph/onnx/gradient_reach.h"
#include "src/graph/onnx/import_context.h"
#include "src/graph/onnx/model_loss.h"
#include "src/graph/onnx/unused_outputs.h"
#include "src/graph/tensor.h"
#include "src/graph/validate.h"

namespace quilt {
namespace {

using onnx_import::Converters;
using onnx_import::ImportContext;

// Opsets 9-12 wrote some of today's inputs as attributes (Slice before 10;
// Clip's bounds and Pad's value before 11; Squeeze, Unsqueeze, Split and
// ReduceSum before 13), had Upsample and Resize with scales as input 1
// (10), a Dropout whose mode was the runtime's (before 12), and a Softmax
// over the trailing dims flattened (before 13); the converters read both.
constexpr int64_t kMinOpset = 9;
// Opsets 18-22 changed the ops Quilt imports in ways the converters follow
// (reduction axes as inputs, Split's num_outputs, Pad's axes, Resize's
// antialias, GroupNormalization's and Gelu's arrival) or only added types.
constexpr int64_t kMaxOpset = 22;

// What PyTorch code exports an op the import does not support, where its
// name alone would not tell a user ("" when it does).
std::string WhatExportsIt(const std::string& op) {
  static const auto* hints = new std::map<std::string, std::string>{
      {"If", "control flow: PyTorch exports nn.LocalResponseNorm and torch.diagonal with it"},
      {"Loop", "a loop over data: nn.EmbeddingBag, Python loops over tensor values"},
      {"TopK", "torch.topk, torch.sort"},
      {"ArgMax", "argmax takes no gradient: compute metrics outside the model"},
      {"ArgMin", "argmin takes no gradient: compute metrics outside the model"},
      {"NonZero", "boolean indexing x[mask], torch.nonzero: shapes that depend on the data"},
      {"Unique", "torch.unique: a shape that depends on the data"},
      {"SplitToSequence", "a list of tensors (torch.chunk or split of an uneven size)"},
      {"SequenceConstruct", "a list of tensors"},
      {"ConcatFromSequence", "torch.stack or cat of a list built in a loop"},
      {"ScatterElements", "indexed writes (x[idx] = v, scatter_)"},
      {"RandomNormalLike", "random numbers drawn in the model (torch.randn_like)"},
      {"RandomUniformLike", "random numbers drawn in the model (torch.rand_like)"},
      {"Bernoulli", "random numbers drawn in the model (torch.bernoulli)"},
      {"LRN", "local response normalization"},
      {"GridSample", "F.grid_sample"},
  };
  auto it = hints->find(op);
  return it == hints->end() ? "" : it->second;
}

absl::Status Fail(const std::string& source, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(source, ": ", s.message()));
}

absl::StatusOr<DType> InputType(int32_t elem_type) {
  switch (elem_type) {
    case onnx::TensorProto::FLOAT:
      return DType::kF32;
    case onnx::TensorProto::INT64:
      return DType::kI64;
    default: {
      const std::string name = onnx::TensorProto::DataType_IsValid(elem_type)
                                   ? absl::AsciiStrToLower(onnx::TensorProto::DataType_Name(
                                         static_cast<onnx::TensorProto::DataType>(elem_type)))
                                   : absl::StrCat("number ", elem_type);
      return absl::InvalidArgumentError(absl::StrCat(
          "input element type ", name,
          " is not supported (float32 or int64: cast the data, or .float() / .long() the "
          "example inputs of the export)"));
    }
  }
}

// Whether the export shows it was made in training mode, where tensors
// merged behind Identity nodes are one weight used in several places (a
// layer applied twice): an eval-mode export merges equal values too (every
// LayerNorm's ones, deep-copied layers), which train apart. Training mode
// shows in Dropout nodes (eval exports drop them), batch norm's
// training_mode, or two initializers of equal values left unmerged; an
// eval-mode export shows in named parameters merged.
bool TrainingModeExport(const onnx::GraphProto& gp, int64_t opset) {
  std::set<std::string> initializers;
  for (const auto& t : gp.initializer()) initializers.insert(t.name());
  bool training = false;
  for (const onnx::NodeProto& n : gp.node()) {
    if (n.op_type() == "Identity" && n.input_size() == 1 && initializers.count(n.input(0)) > 0 &&
        !absl::StartsWith(n.input(0), "onnx::")) {
      return false;  // named parameters merged: eval mode
    }
    // Dropout's mode is an input from opset 12; before it any Dropout is a
    // training export's. Batch norm says so by an attribute from opset 14,
    // before it by its running statistics' outputs.
    training |=
        n.op_type() == "Dropout" && ((n.input_size() >= 3 && !n.input(2).empty()) || opset < 12);
    for (const auto& a : n.attribute()) {
      training |= n.op_type() == "BatchNormalization" && a.name() == "training_mode" && a.i() == 1;
    }
    training |= n.op_type() == "BatchNormalization" && opset < 14 && n.output_size() > 1 &&
                !n.output(1).empty();
  }
  // Equal contents (type, dims, values) found by a hash of the values,
  // then compared byte for byte: no copy of a model's weights. (Values in
  // the typed fields rather than raw bytes, rare, are compared serialized.)
  std::vector<std::string> typed;  // serialized values of those; never reallocated
  typed.reserve(static_cast<size_t>(gp.initializer_size()));
  std::map<size_t, std::vector<std::pair<const onnx::TensorProto*, absl::string_view>>> seen;
  for (const auto& t : gp.initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    if (n < 2) continue;
    absl::string_view values = t.raw_data();
    if (values.empty()) {
      onnx::TensorProto unnamed = t;
      unnamed.clear_name();
      typed.push_back(unnamed.SerializeAsString());
      values = typed.back();
    }
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    auto& same_hash = seen[absl::HashOf(t.data_type(), dims, values)];
    for (const auto& [other, other_values] : same_hash) {
      training |= other->data_type() == t.data_type() &&
                  std::equal(other->dims().begin(), other->dims().end(), t.dims().begin(),
                             t.dims().end()) &&
                  other_values == values;
    }
    same_hash.emplace_back(&t, values);
  }
  return training;
}

// The batch size a model exported with a dynamic batch is imported with: a
// prime (from 1009 up) that no dim, shape constant or integer attribute of
// the model is a multiple of, so that shape arithmetic folded with it tells
// the batch from every other dim (a batch equal to one, or dividing one,
// was taken for it).
int64_t SymbolicBatch(const onnx::GraphProto& gp) {
  std::set<int64_t> seen;
  auto dims = [&](const onnx::ValueInfoProto& v) {
    for (const auto& d : v.type().tensor_type().shape().dim()) {
      if (d.has_dim_value()) seen.insert(d.dim_value());
    }
  };
  auto tensor = [&](const onnx::TensorProto& t) {
    for (int64_t d : t.dims()) seen.insert(d);
    if (t.data_type() == onnx::TensorProto::INT64) {
      for (int64_t v : t.int64_data()) seen.insert(v);
      if (t.raw_data().size() <= 64 * sizeof(int64_t)) {
        for (size_t i = 0; i + sizeof(int64_t) <= t.raw_data().size(); i += sizeof(int64_t)) {
          int64_t v = 0;
          std::memcpy(&v, t.raw_data().data() + i, sizeof(v));
          seen.insert(v);
        }
      }
    }
  };
  for (const auto& v : gp.input()) dims(v);
  for (const auto& v : gp.output()) dims(v);
  for (const auto& v : gp.value_info()) dims(v);
  for (const auto& t : gp.initializer()) tensor(t);
  for (const onnx::NodeProto& n : gp.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_t()) tensor(a.t());
      if (a.has_i()) seen.insert(a.i());
      for (int64_t v : a.ints()) seen.insert(v);
    }
  }
  auto prime = [](int64_t n) {
    for (int64_t d = 2; d * d <= n; ++d) {
      if (n % d == 0) return false;
    }
    return true;
  };
  for (int64_t p = 1009;; ++p) {
    if (!prime(p)) continue;
    bool divides = false;
    for (int64_t v : seen) divides = divides || (v > 0 && v % p == 0);
    if (!divides) return p;
  }
}

}  // namespace

namespace {

absl::StatusOr<onnx::ModelProto> ParseModel(const std::string& bytes,
                                            const OnnxImportOptions& options) {
  const std::string& src = options.source;
  if (bytes.empty()) return absl::InvalidArgumentError(src + ": the file is empty");
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes) || !model.has_graph()) {
    return absl::InvalidArgumentError(
        src + ": not a valid ONNX model (the file is truncated or corrupt)");
  }
  return model;
}

absl::StatusOr<Graph> ImportParsed(onnx::ModelProto model, const OnnxImportOptions& options) {
  const std::string& src = options.source;
  int64_t opset = -1;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  }
  if (opset < kMinOpset || opset > kMaxOpset) {
    return absl::InvalidArgumentError(absl::StrCat(
        src, ": opset ", opset, " is not supported (supported: ", kMinOpset, "–", kMaxOpset, ")"));
  }
  auto supported = [](const onnx::NodeProto& n) {
    return (n.domain().empty() || n.domain() == "ai.onnx") && Converters().count(n.op_type()) > 0;
  };
  const std::string dropped = onnx_import::DropUnsupportedOutputs(model.mutable_graph(), supported);
  const onnx::GraphProto& gp = model.graph();
  // A node is named by its name, or its place in the graph when it has none.
  auto node_label = [&](int i) {
    const std::string& name = gp.node(i).name();
    return name.empty() ? absl::StrCat("node #", i + 1, " (unnamed)")
                        : absl::StrCat("node '", name, "'");
  };
  // Per unsupported op (in the order first met), the nodes that use it.
  std::vector<std::pair<std::string, std::vector<std::string>>> missing;
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& n = gp.node(i);
    if (supported(n)) continue;
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    const std::string op = absl::StrCat(default_domain ? "" : n.domain() + ":", n.op_type());
    auto it =
        std::find_if(missing.begin(), missing.end(), [&](const auto& m) { return m.first == op; });
    if (it == missing.end()) it = missing.insert(missing.end(), {op, {}});
    it->second.push_back(node_label(i));
  }
  std::vector<std::string> unsupported;
  for (const auto& [op, nodes] : missing) {
    constexpr size_t kShown = 3;
    std::vector<std::string> shown(nodes.begin(), nodes.begin() + std::min(nodes.size(), kShown));
    const std::string hint = WhatExportsIt(op);
    unsupported.push_back(
        absl::StrCat(op, " (", nodes.size() > 1 ? absl::StrCat(nodes.size(), " nodes: ") : "",
                     absl::StrJoin(shown, ", "), nodes.size() > kShown ? ", …" : "", ")",
                     hint.empty() ? "" : " [" + hint + "]"));
  }
  if (!unsupported.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": unsupported ONNX ops: ", absl::StrJoin(unsupported, ", ")));
  }
  // Each name is assigned once: by one node, or as an input or initializer
  // of the graph (a second writer would silently replace the first).
  {
    std::map<std::string, std::string> writer;
    for (const auto& in : gp.input()) writer.emplace(in.name(), "the graph's input");
    for (const auto& t : gp.initializer()) writer.emplace(t.name(), "an initializer");
    for (int i = 0; i < gp.node_size(); ++i) {
      for (const std::string& out : gp.node(i).output()) {
        if (out.empty()) continue;
        auto [it, fresh] = writer.emplace(out, node_label(i));
        if (!fresh) {
          return absl::InvalidArgumentError(
              absl::StrCat(src, ": tensor '", out, "' is written by both ", it->second, " and ",
                           node_label(i), " (an ONNX graph assigns each name once)"));
        }
      }
    }
  }

  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) init_names.insert(t.name());
  std::vector<const onnx::ValueInfoProto*> inputs;
  for (const auto& in : gp.input()) {
    if (!init_names.count(in.name())) inputs.push_back(&in);
  }
  if (inputs.empty()) return absl::InvalidArgumentError(src + ": the model has no inputs");
  // The batch the exporter saw: the first input's first dimension.
  int64_t b0 = 0;
  bool static_batch = false;
  {
    const auto& shape = inputs[0]->type().tensor_type().shape();
    if (shape.dim_size() == 0) {
      return absl::InvalidArgumentError(src + ": input '" + inputs[0]->name() +
                                        "' has no batch dimension");
    }
    b0 = shape.dim(0).has_dim_value() ? shape.dim(0).dim_value() : 0;
    static_batch = b0 > 0;
    if (!static_batch) b0 = SymbolicBatch(gp);
  }

  Graph g;
  g.name = gp.name();
  if (!dropped.empty()) g.import_notes.push_back(dropped);
  ImportContext ctx(&g, b0, !static_batch);
  ctx.set_opset(opset);
  // (Read before the initializers' bytes are let go below.)
  const bool identities_share = TrainingModeExport(gp, opset);
  for (onnx::TensorProto& t : *model.mutable_graph()->mutable_initializer()) {
    absl::StatusOr<Tensor> v = onnx_import::FromTensorProto(t);
    if (!v.ok()) return Fail(src, v.status());
    // NaN is no weight's value, nor a mask's (those hold ±inf): a broken
    // export, refused before it trains to NaN.
    if (v->dtype() == DType::kF32) {
      for (int64_t k = 0; k < v->numel(); ++k) {
        if (std::isnan(v->f32()[k])) {
          return Fail(src, absl::InvalidArgumentError(
                               absl::StrCat("initializer '", t.name(), "' holds NaN (element ", k,
                                            " of ", v->numel(), "): the export is broken")));
        }
      }
    }
    ctx.AddInitializer(t.name(), std::move(*v));
    // The tensor holds the values now: a large model's weights are not kept
    // twice through the rest of the import.
    std::string().swap(*t.mutable_raw_data());
  }
  ctx.TieTransposedCopies();
  ctx.SetGradientReach(onnx_import::GradientReach(gp));
  ctx.set_identities_share(identities_share);
  for (const onnx::ValueInfoProto* in : inputs) {
    if (!in->type().has_tensor_type()) {
      return absl::InvalidArgumentError(src + ": input '" + in->name() + "' is not a tensor");
    }
    absl::StatusOr<DType> dtype = InputType(in->type().tensor_type().elem_type());
    if (!dtype.ok()) return Fail(src, Annotate(dtype.status(), "input '" + in->name() + "'"));
    std::vector<Dim> dims;
    const auto& shape = in->type().tensor_type().shape();
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto& d = shape.dim(i);
      if (i == 0) {
        dims.push_back(Dim::Batch());
        continue;
      }
      if (d.has_dim_value() && d.dim_value() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(src, ": input '", in->name(),
                                                       "' has dimension ", i, " of ", d.dim_value(),
                                                       ": a tensor's sizes are "
                                                       "positive"));
      }
      if (!d.has_dim_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            src, ": input '", in->name(), "' dimension ", i, " ('", d.dim_param(),
            "') is dynamic; only the first (batch) dimension may be — export with fixed sizes",
            i == 1 ? " (a sequence-first model's batch is its second dimension: Quilt takes "
                     "the first for the batch, so export it batch-first, e.g. batch_first=True "
                     "or a transpose in forward)"
                   : ""));
      }
      dims.push_back(Dim::Fixed(d.dim_value()));
    }
    if (dims.empty()) {
      return absl::InvalidArgumentError(src + ": input '" + in->name() + "' is a scalar");
    }
    absl::StatusOr<std::string> name = ctx.b().AddInput(in->name(), *dtype, Shape(std::move(dims)));
    if (!name.ok()) return Fail(src, name.status());
    ctx.SetTensor(in->name(), *name);
  }
  std::set<std::string> read;
  for (const onnx::NodeProto& n : gp.node()) {
    for (const std::string& in : n.input()) read.insert(in);
  }
  for (const auto& out : gp.output()) read.insert(out.name());
  ctx.SetRead(std::move(read));
  // Folding a node's constants makes tensors the model's text sizes: a
  // malformed model could ask for terabytes of the process (a coordinator
  // importing a submitted job) and end it; each fold is bounded instead.
  TensorSizeLimit limit(kMaxFoldedConstantBytes, kMaxFoldedConstantsBytes,
                        "a constant computed while importing");
  for (int i = 0; i < gp.node_size(); ++i) {
    const onnx::NodeProto& n = gp.node(i);
    ctx.BeginNode(n);
    absl::Status s = Converters().at(n.op_type())(ctx, n);
    if (!s.ok()) {
      // A batch baked into the export is told from other dims by its size:
      // a small one, or one equal to another dim, can be mistaken.
      // (Only where the failure is about shapes.)
      const std::string why = absl::AsciiStrToLower(s.message());
      bool about_shapes = false;
      for (const char* word :
           {"shape", "batch", "dim", "broadcast", "expand", "reshape", "does not match"}) {
        about_shapes = about_shapes || absl::StrContains(why, word);
      }
      const std::string hint =
          static_batch && about_shapes
              ? absl::StrCat(" (the model was exported with a fixed batch of ", b0,
                             ": tensors the export built at that size (zeros of the "
                             "batch's shape) stay that size, and another dim of that size "
                             "can be taken for the batch; export with a dynamic batch, e.g. "
                             "torch.onnx.export("
                             "..., dynamic_axes={'",
                             inputs[0]->name(),
                             "': {0: 'batch'}}), or with a batch no other dim has)")
              : "";
      return absl::InvalidArgumentError(
          absl::StrCat(src, ": ", node_label(i), " (", n.op_type(), "): ", s.message(), hint));
    }
  }
  for (const auto& out : gp.output()) {
    onnx::NodeProto probe;
    probe.add_input(out.name());
    absl::StatusOr<std::string> t = ctx.Data(probe, 0);
    if (!t.ok()) return Fail(src, Annotate(t.status(), "output '" + out.name() + "'"));
    g.outputs.push_back(*t);
    g.output_names.push_back(out.name());
  }
  if (!ctx.untied_copies().empty()) {
    const std::vector<std::string>& u = ctx.untied_copies();
    g.import_notes.push_back(absl::StrCat(
        "tensors the export holds once, behind Identity nodes, train as copies of their own: ",
        absl::StrJoin(u.begin(), u.begin() + std::min<size_t>(u.size(), 3), ", "),
        u.size() > 3 ? ", …" : "",
        "; the export merges equal values (in eval mode) as well as a weight used more than "
        "once (a layer applied repeatedly), which PyTorch trains as one: if a layer is shared, "
        "export with do_constant_folding=False"));
  }
  // Batch norms of an eval-mode export (training_mode 0; before opset 14,
  // no running statistics out): trained, they use each step's statistics.
  std::vector<std::string> eval_norms;
  for (const onnx::NodeProto& n : gp.node()) {
    if (n.op_type() != "BatchNormalization") continue;
    bool training = opset < 14 && n.output_size() > 1 && !n.output(1).empty();
    for (const auto& a : n.attribute()) training |= a.name() == "training_mode" && a.i() == 1;
    if (!training) eval_norms.push_back(n.name().empty() ? n.output(0) : n.name());
  }
  if (!eval_norms.empty()) {
    const bool one = eval_norms.size() == 1;
    g.import_notes.push_back(absl::StrCat(
        one ? "batch norm " : "batch norms ",
        absl::StrJoin(eval_norms.begin(),
                      eval_norms.begin() + std::min<size_t>(eval_norms.size(), 3), ", "),
        eval_norms.size() > 3 ? ", …" : "", one ? " was" : " were",
        " exported in eval mode and train as model.train() runs them, normalizing by each "
        "step's batch statistics and updating the running ones (training with the running "
        "statistics fixed, as a fine-tuning in eval mode would, is not supported)"));
  }
  std::vector<std::string> output_names;
  for (const auto& out : gp.output()) output_names.push_back(out.name());
  if (absl::Status s = onnx_import::ResolveModelLoss(&g, output_names, options.loss_output);
      !s.ok()) {
    return Fail(src, s);
  }
  if (!g.labels.empty()) {
    onnx_import::NoteLossConstants(
        static_batch && options.batch > 0 && options.batch != b0 ? b0 : 0, options.batch, &g);
  }
  g.reference_batch = options.batch > 0 ? options.batch : (static_batch ? b0 : 1);
  if (absl::Status s = ValidateGraph(&g); !s.ok()) return Fail(src, s);
  return g;
}

// `s` with its message fit for a terminal and a protobuf string: errors
// quote the model's names and op types, which a corrupt file may fill with
// escapes, newlines or bytes that are not UTF-8.
absl::Status Printable(const absl::Status& s) {
  return absl::Status(s.code(), ToDisplayText(std::string(s.message())));
}

absl::StatusOr<Graph> Printable(absl::StatusOr<Graph> g) {
  if (g.ok()) return g;
  return Printable(g.status());
}

}  // namespace

absl::StatusOr<Graph> ImportOnnx(const std::string& bytes, const OnnxImportOptions& options) {
  absl::StatusOr<onnx::ModelProto> model = ParseModel(bytes, options);
  if (!model.ok()) return Printable(model.status());
  return Printable(ImportParsed(std::move(*model), options));
}

absl::StatusOr<Graph> ImportOnnx(std::string&& bytes, const OnnxImportOptions& options) {
  absl::StatusOr<onnx::ModelProto> model = ParseModel(bytes, options);
  if (!model.ok()) return Printable(model.status());
  std::string().swap(bytes);  // the model holds what it needs of them now
  return Printable(ImportParsed(std::move(*model), options));
}

}  // namespace quilt
