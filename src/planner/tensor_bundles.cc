#include "src/planner/tensor_bundles.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "src/graph/op_registry.h"
#include "src/planner/placement.h"

namespace quilt {
namespace {

struct BundleKey {
  int producer;  // coarse op; -1: none
  std::vector<int> readers;
  bool batched;
  TensorRole role;
  bool operator<(const BundleKey& o) const {
    return std::tie(producer, readers, batched, role) <
           std::tie(o.producer, o.readers, o.batched, o.role);
  }
};

}  // namespace

std::vector<TensorBundle> BundleTensors(const Graph& g, const std::vector<int>& coarse_of,
                                        int first_update,
                                        const std::map<std::string, int>& producer,
                                        const std::map<std::string, std::vector<int>>& consumers,
                                        const std::map<std::string, int>& flat) {
  std::map<BundleKey, std::vector<std::string>> groups;
  std::set<std::string> seen;
  auto consider = [&](const std::string& t, int from, bool local) {
    if (!seen.insert(t).second || local || flat.count(t) || t == g.loss.output) return;
    const TensorInfo* info = g.FindTensor(t);
    if (info == nullptr || info->interleaved_batch) return;
    const TensorRole role = info->role;
    if (from < 0 ? (role != TensorRole::kConstant && role != TensorRole::kParameter)
                 : (role == TensorRole::kInput || role == TensorRole::kLabel ||
                    role == TensorRole::kParameter || role == TensorRole::kOptimizerState)) {
      return;
    }
    auto r = consumers.find(t);
    if (r == consumers.end()) return;
    BundleKey key{from, {}, info->shape.HasBatch(), from < 0 ? role : TensorRole::kActivation};
    for (int i : r->second) {
      const int c = coarse_of[i];
      if (c >= 0 && c < first_update && c != from) key.readers.push_back(c);
    }
    if (key.readers.empty()) return;
    std::sort(key.readers.begin(), key.readers.end());
    key.readers.erase(std::unique(key.readers.begin(), key.readers.end()), key.readers.end());
    groups[key].push_back(t);
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int c = coarse_of[i];
    if (c < 0 || c >= first_update) continue;
    const Op& op = g.ops[i];
    const OpSchema& schema = *OpRegistry::Global().Find(op.type);
    for (size_t o = 0; o < op.outputs.size(); ++o) {
      consider(op.outputs[o], c, IsLocalOutput(op, schema, static_cast<int>(o)));
    }
    for (const std::string& t : op.inputs) {
      if (!t.empty() && !producer.count(t)) consider(t, -1, false);
    }
  }
  std::vector<TensorBundle> bundles;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    int64_t elements = 0;  // per row for batch tensors
    for (const std::string& t : members) {
      const TensorInfo& info = *g.FindTensor(t);
      elements += (info.shape.NumElements(1) * DTypeSize(info.dtype) + 3) / 4;
    }
    TensorBundle b;
    b.name = absl::StrCat(key.producer < 0 ? "held" : absl::StrCat("coarse", key.producer),
                          "/bundle", bundles.size());
    b.frozen_parameter = key.role == TensorRole::kParameter;
    elements = std::max<int64_t>(1, elements);
    b.info = {b.name, DType::kF32,
              key.batched ? Shape({Dim::Batch(), Dim::Fixed(elements)}) : Shape::Fixed({elements}),
              key.role};
    b.members = members;
    bundles.push_back(std::move(b));
  }
  return bundles;
}

}  // namespace quilt
