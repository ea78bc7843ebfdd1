#include "src/graph/onnx/unused_outputs.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quilt::onnx_import {
namespace {

// Indices of the nodes `value` is computed by (transitively).
std::set<int> NodesFor(const onnx::GraphProto& g, const std::map<std::string, int>& producer,
                       const std::string& value) {
  std::set<int> nodes;
  std::vector<std::string> todo = {value};
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    auto p = producer.find(v);
    if (p == producer.end() || !nodes.insert(p->second).second) continue;
    const onnx::NodeProto& n = g.node(p->second);
    for (const std::string& in : n.input()) todo.push_back(in);
    // Subgraphs (If, Loop) read outer values too; their nodes are not
    // followed, so such a node is kept whole with what it names.
    for (const auto& a : n.attribute()) {
      for (const onnx::NodeProto& inner : a.g().node()) {
        for (const std::string& in : inner.input()) todo.push_back(in);
      }
    }
  }
  return nodes;
}

bool DeclaredScalar(const onnx::ValueInfoProto& v) {
  return v.type().has_tensor_type() && v.type().tensor_type().has_shape() &&
         v.type().tensor_type().shape().dim_size() == 0;
}

}  // namespace

std::string DropUnsupportedOutputs(onnx::GraphProto* graph,
                                   const std::function<bool(const onnx::NodeProto&)>& supported) {
  if (graph->output_size() < 2) return "";
  std::map<std::string, int> producer;
  for (int i = 0; i < graph->node_size(); ++i) {
    for (const std::string& out : graph->node(i).output()) producer[out] = i;
  }
  std::vector<int> kept, dropped;
  std::set<std::string> ops;
  bool scalar_kept = false;
  for (int k = 0; k < graph->output_size(); ++k) {
    bool blocked = false;
    for (int i : NodesFor(*graph, producer, graph->output(k).name())) {
      if (!supported(graph->node(i))) {
        blocked = true;
        ops.insert(graph->node(i).op_type());
      }
    }
    (blocked ? dropped : kept).push_back(k);
    if (!blocked && DeclaredScalar(graph->output(k))) scalar_kept = true;
  }
  if (dropped.empty() || !scalar_kept) return "";
  std::set<int> needed;
  std::vector<std::string> names;
  for (int k : kept) {
    std::set<int> n = NodesFor(*graph, producer, graph->output(k).name());
    needed.insert(n.begin(), n.end());
  }
  for (int k : dropped) names.push_back("'" + graph->output(k).name() + "'");
  onnx::GraphProto pruned = *graph;
  pruned.clear_node();
  pruned.clear_output();
  for (int i = 0; i < graph->node_size(); ++i) {
    if (needed.count(i)) *pruned.add_node() = graph->node(i);
  }
  for (int k : kept) *pruned.add_output() = graph->output(k);
  *graph = std::move(pruned);
  const bool one = dropped.size() == 1;
  return absl::StrCat(one ? "output " : "outputs ", absl::StrJoin(names, ", "),
                      one ? " uses" : " use", " ops the import does not support (",
                      absl::StrJoin(ops.begin(), ops.end(), ", "), ") and ", one ? "is" : "are",
                      " left out: not needed for training");
}

}  // namespace quilt::onnx_import
