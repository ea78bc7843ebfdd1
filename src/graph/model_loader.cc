#include "src/graph/model_loader.h"

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

absl::StatusOr<Graph> LoadOnnxBytes(const std::string& bytes, int64_t batch,
                                    const std::string& source) {
  OnnxImportOptions o;
  o.batch = batch;
  o.source = source;
  return ImportOnnx(bytes, o);
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
                                                   " to freeze (`quiltctl graph inspect` lists "
                                                   "them)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Graph> LoadModel(const std::string& spec, int64_t batch) {
  Graph g;
  if (absl::StartsWith(spec, "zoo:")) {
    ASSIGN_OR_RETURN(g, zoo::BuildZooModel(spec.substr(4)));
    RETURN_IF_ERROR(ValidateGraph(&g));
  } else if (absl::EndsWith(spec, ".onnx")) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFile(spec));
    ASSIGN_OR_RETURN(g, LoadOnnxBytes(bytes, batch, spec));
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

}  // namespace quilt
