#include "src/graph/onnx/loss_output.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quilt::onnx_import {
namespace {

constexpr char kLossOp[] = "SoftmaxCrossEntropyLoss";

std::string NodeName(const onnx::NodeProto& n) {
  return n.name().empty() ? n.op_type() : absl::StrCat(n.name(), " (", n.op_type(), ")");
}

}  // namespace

absl::Status CheckLossOutputs(const onnx::GraphProto& graph) {
  std::vector<const onnx::NodeProto*> losses;
  for (const onnx::NodeProto& n : graph.node()) {
    if (n.op_type() == kLossOp) losses.push_back(&n);
  }
  if (losses.empty()) return absl::OkStatus();
  if (losses.size() > 1) {
    std::vector<std::string> names;
    for (const onnx::NodeProto* n : losses) names.push_back(NodeName(*n));
    return absl::InvalidArgumentError(absl::StrCat(
        "the model computes ", losses.size(), " cross-entropy losses (", absl::StrJoin(names, ", "),
        "); Quilt trains one: return a single cross-entropy, or the logits and pass --loss "
        "softmax_cross_entropy"));
  }
  const onnx::NodeProto& loss = *losses[0];
  // The loss itself (and Identity copies of it), and what is computed from
  // it, with the ops that compute it.
  std::set<std::string> same = {loss.output(0)};
  std::set<std::string> derived;
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : graph.node()) {
    if (&n == &loss) continue;
    bool from_same = false, from_derived = false;
    for (const std::string& in : n.input()) {
      from_same = from_same || same.count(in) > 0;
      from_derived = from_derived || derived.count(in) > 0;
    }
    if (!from_same && !from_derived) continue;
    const bool copy = n.op_type() == "Identity" && !from_derived;
    for (const std::string& out : n.output()) (copy ? same : derived).insert(out);
    if (!copy && std::find(ops.begin(), ops.end(), n.op_type()) == ops.end()) {
      ops.push_back(n.op_type());
    }
  }
  for (const onnx::ValueInfoProto& out : graph.output()) {
    if (!derived.count(out.name())) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "output '", out.name(), "' is computed from the cross-entropy loss ", NodeName(loss),
        " (by ", absl::StrJoin(ops, ", "),
        "); Quilt trains the cross-entropy itself, so factors or terms applied to it would be "
        "left out of training: return the cross-entropy alone (an L2 penalty on the weights is "
        "--weight-decay), or the logits and pass --loss softmax_cross_entropy"));
  }
  return absl::OkStatus();
}

}  // namespace quilt::onnx_import
