#include "src/coordinator/job_export.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "onnx/onnx_pb.h"
#include "src/common/status.h"
#include "src/coordinator/checkpoint_dir.h"
#include "src/coordinator/job_model.h"
#include "src/graph/onnx/import_context.h"
#include "src/graph/onnx/transposed_copies.h"
#include "src/runtime/data/npz.h"
#include "src/runtime/initializers.h"

namespace quilt {

absl::StatusOr<Checkpoint> ReadLatestCheckpoint(
    const std::string& dir, int world, const std::function<absl::Status(const Checkpoint&)>& accept,
    const std::function<bool(const std::string&)>& wanted) {
  absl::Status newest_problem = absl::OkStatus();
  std::string passed_over;
  std::vector<std::pair<int64_t, std::string>> incomplete;
  const std::vector<std::pair<int64_t, std::string>> complete =
      CompleteSteps(dir, world, &incomplete);
  // Newer incomplete steps than the one taken are named with the others.
  auto newer_incomplete = [&](int64_t than) {
    std::string out;
    for (const auto& [number, why] : incomplete) {
      if (number > than) absl::StrAppend(&out, out.empty() ? "" : "; ", why);
    }
    return out;
  };
  for (const auto& [number, step] : complete) {
    absl::StatusOr<Checkpoint> c = ReadCheckpoint(absl::StrCat(dir, "/", step), world, wanted);
    if (c.ok() && accept != nullptr) {
      if (absl::Status a = accept(*c); !a.ok()) c = a;
    }
    if (c.ok()) {
      c->step = number;
      const std::string skipped = newer_incomplete(number);
      c->passed_over =
          absl::StrCat(skipped, !skipped.empty() && !passed_over.empty() ? "; " : "", passed_over);
      return c;
    }
    if (newest_problem.ok()) newest_problem = absl::DataLossError(c.status().message());
    absl::StrAppend(&passed_over, passed_over.empty() ? "" : "; ", step, ": ",
                    c.status().message());
  }
  if (!newest_problem.ok()) return newest_problem;
  return absl::NotFoundError("no complete checkpoint in " + dir);
}

absl::StatusOr<Checkpoint> ReadJobCheckpoint(
    const quilt::v1::JobRecord& job, quilt::v1::ExportJobResponse* out,
    const std::function<absl::Status(const Checkpoint&)>& accept,
    const std::function<bool(const std::string&)>& wanted) {
  absl::StatusOr<Checkpoint> ckpt =
      ReadLatestCheckpoint(job.spec().checkpoint_dir(), job.world_size(), accept, wanted);
  if (!ckpt.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.status().job_id(), " has no usable checkpoint: ", ckpt.status().message()));
  }
  out->set_step(ckpt->step);
  if (!ckpt->passed_over.empty()) {
    out->set_note("newer checkpoints do not read: " + ckpt->passed_over);
  }
  return ckpt;
}

namespace {

// The initializers training can change: float32 and float64 (read as
// float32); integer ones are tables and indices.
bool Floating(const onnx::TensorProto& init) {
  return init.data_type() == onnx::TensorProto::FLOAT ||
         init.data_type() == onnx::TensorProto::DOUBLE;
}

// Trained float32 `value` into `init`, in the type it holds (float64
// weights were trained as float32, as the import reads them).
void WriteTrained(const Tensor& value, onnx::TensorProto* init) {
  init->clear_float_data();
  init->clear_double_data();
  if (init->data_type() == onnx::TensorProto::DOUBLE) {
    std::vector<double> wide(value.f32(), value.f32() + value.numel());
    init->set_raw_data(
        std::string(reinterpret_cast<const char*>(wide.data()), wide.size() * sizeof(double)));
    return;
  }
  init->set_raw_data(std::string(static_cast<const char*>(value.raw()), value.bytes()));
}

}  // namespace

absl::StatusOr<quilt::v1::ExportJobResponse> ExportTrainedOnnx(const quilt::v1::JobRecord& job) {
  const quilt::v1::JobSpec& spec = job.spec();
  if (spec.model_case() != quilt::v1::JobSpec::kOnnx) {
    return absl::FailedPreconditionError(
        "job " + job.status().job_id() +
        " was not submitted as ONNX: its trained weights export as NumPy arrays (.npz), not as "
        "an ONNX model (quiltctl export -o NAME.npz)");
  }
  onnx::ModelProto model;
  if (!model.ParseFromString(spec.onnx())) {
    return absl::DataLossError("the job's ONNX model does not parse");
  }
  // Every trained initializer must fit the model: a checkpoint that does
  // not is passed over like one that does not read.
  auto fits = [&model](const Checkpoint& c) -> absl::Status {
    int trained = 0;
    for (const onnx::TensorProto& init : model.graph().initializer()) {
      auto it = c.tensors.find(init.name());
      // (Integer tables, position indices: constants, never trained.)
      if (it == c.tensors.end() || !Floating(init)) continue;
      int64_t numel = 1;
      for (int64_t d : init.dims()) numel *= d;
      if (it->second.dtype() != DType::kF32 || numel != it->second.numel()) {
        return absl::DataLossError(absl::StrCat("trained '", init.name(), "' is ",
                                                it->second.TypeString(),
                                                ", which does not fit the model's initializer"));
      }
      ++trained;
    }
    if (trained == 0) return absl::DataLossError("it holds no initializer of the model");
    return absl::OkStatus();
  };
  // Only what the model can take is read (not the optimizer's state): its
  // initializers and the values its Identity nodes share.
  std::set<std::string> wanted;
  for (const onnx::TensorProto& init : model.graph().initializer()) wanted.insert(init.name());
  for (const onnx::NodeProto& n : model.graph().node()) {
    if (n.op_type() == "Identity" && n.output_size() == 1) wanted.insert(n.output(0));
  }
  quilt::v1::ExportJobResponse out;
  ASSIGN_OR_RETURN(Checkpoint ckpt,
                   ReadJobCheckpoint(job, &out, fits, [&wanted](const std::string& name) {
                     return wanted.count(name) > 0;
                   }));
  // The exporter's transposed copies of weights trained as those weights
  // (transposed_copies.h): written as the trained weight's transpose.
  std::map<std::string, Tensor> initial;
  for (const onnx::TensorProto& init : model.graph().initializer()) {
    absl::StatusOr<Tensor> v = onnx_import::FromTensorProto(init);
    if (v.ok()) initial[init.name()] = std::move(*v);
  }
  const std::map<std::string, std::string> copies = TransposedCopies(initial);
  for (onnx::TensorProto& init : *model.mutable_graph()->mutable_initializer()) {
    if (!Floating(init)) continue;
    auto it = ckpt.tensors.find(init.name());
    Tensor value;
    if (it != ckpt.tensors.end()) {
      value = it->second;
    } else if (auto c = copies.find(init.name()); c != copies.end()) {
      auto w = ckpt.tensors.find(c->second);
      if (w == ckpt.tensors.end() || w->second.rank() != 2) continue;
      ASSIGN_OR_RETURN(value, TransposedMatrix(w->second));
    } else {
      continue;
    }
    WriteTrained(value, &init);
  }
  // Values the export shares through Identity nodes (PyTorch merges equal
  // initial values: the ones and zeros of LayerNorms) train as one
  // parameter per use: each trained use becomes an initializer of its own
  // in place of its Identity.
  std::set<std::string> initializers;
  for (const onnx::TensorProto& init : model.graph().initializer())
    initializers.insert(init.name());
  auto* nodes = model.mutable_graph()->mutable_node();
  for (int i = 0; i < nodes->size();) {
    const onnx::NodeProto& n = nodes->Get(i);
    auto it = n.op_type() == "Identity" && n.output_size() == 1 && !initializers.count(n.output(0))
                  ? ckpt.tensors.find(n.output(0))
                  : ckpt.tensors.end();
    if (it == ckpt.tensors.end() || it->second.dtype() != DType::kF32) {
      ++i;
      continue;
    }
    onnx::TensorProto* t = model.mutable_graph()->add_initializer();
    t->set_name(n.output(0));
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : it->second.dims()) t->add_dims(d);
    WriteTrained(it->second, t);
    nodes->DeleteSubrange(i, 1);
  }
  out.set_onnx(model.SerializeAsString());
  return out;
}

absl::StatusOr<quilt::v1::ExportJobResponse> ExportTrainedWeights(const quilt::v1::JobRecord& job) {
  const std::string& id = job.status().job_id();
  absl::StatusOr<Graph> g = TrainingGraphForJob(job.spec());
  if (!g.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, "'s model does not load: ", g.status().message()));
  }
  // A checkpoint must hold the model's parameters in their shapes; one
  // that does not is passed over like one that does not read.
  auto fits = [&g](const Checkpoint& c) -> absl::Status {
    int held = 0;
    for (const ParameterSpec& p : g->parameters) {
      auto it = c.tensors.find(p.tensor);
      if (it == c.tensors.end()) continue;
      const TensorInfo* info = g->FindTensor(p.tensor);
      if (info != nullptr &&
          (info->dtype != it->second.dtype() ||
           (!info->shape.HasBatch() && info->shape.Concrete(1) != it->second.dims()))) {
        return absl::DataLossError(absl::StrCat("'", p.tensor, "' is ", it->second.TypeString(),
                                                ", which does not fit the model's parameter"));
      }
      ++held;
    }
    if (held == 0) return absl::DataLossError("it holds no parameter of the model");
    return absl::OkStatus();
  };
  // The parameters alone are read (not the optimizer's state).
  std::set<std::string> parameters;
  for (const ParameterSpec& p : g->parameters) parameters.insert(p.tensor);
  quilt::v1::ExportJobResponse out;
  ASSIGN_OR_RETURN(Checkpoint ckpt,
                   ReadJobCheckpoint(job, &out, fits, [&parameters](const std::string& name) {
                     return parameters.count(name) > 0;
                   }));
  // Every parameter: trained ones as the checkpoint holds them; those no
  // step updates (frozen, or read by no op, which checkpoints leave out)
  // at their initial values; none is left out unsaid.
  std::set<std::string> updated;
  for (const StateUpdate& u : g->updates) updated.insert(u.target);
  std::vector<std::pair<std::string, Tensor>> arrays;
  std::vector<std::string> missing;
  for (const ParameterSpec& p : g->parameters) {
    const TensorInfo* info = g->FindTensor(p.tensor);
    if (auto it = ckpt.tensors.find(p.tensor); it != ckpt.tensors.end()) {
      arrays.emplace_back(p.tensor, it->second);
    } else if (updated.count(p.tensor) || info == nullptr || info->shape.HasBatch()) {
      missing.push_back(p.tensor);
    } else if (p.value.has_value()) {
      arrays.emplace_back(p.tensor, *p.value);
    } else {
      ASSIGN_OR_RETURN(Tensor initial, InitialValue(p, info->shape.Concrete(1)));
      arrays.emplace_back(p.tensor, std::move(initial));
    }
  }
  if (!missing.empty()) {
    return absl::DataLossError(absl::StrCat("job ", id, "'s checkpoint at step ", ckpt.step,
                                            " lacks ", missing.size(), " of the model's ",
                                            g->parameters.size(), " parameters, the first '",
                                            missing.front(), "'"));
  }
  absl::StatusOr<std::string> npz = NpzArchive(arrays);
  if (!npz.ok()) {
    return absl::Status(npz.status().code(),
                        absl::StrCat("job ", id, "'s weights: ", npz.status().message()));
  }
  out.set_npz(*std::move(npz));
  return out;
}

}  // namespace quilt
