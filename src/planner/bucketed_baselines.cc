#include "src/planner/bucketed_baselines.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace quilt {
namespace {

constexpr absl::string_view kSuffix = " in buckets";

bool SumsOneByOne(const quilt::v1::Strategy& s) {
  if (s.aggregations().empty()) return false;
  for (const quilt::v1::ParameterAggregation& a : s.aggregations()) {
    if (a.method() != quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE || a.bucket() != 0) return false;
  }
  return true;
}

}  // namespace

std::string BucketedName(const std::string& baseline) { return baseline + std::string(kSuffix); }

std::vector<NamedStrategy> BucketedVariants(const Graph& g, const std::vector<NamedStrategy>& list,
                                            const std::map<std::string, Evaluated>& done) {
  std::vector<NamedStrategy> out;
  std::map<std::string, int> buckets;
  for (const NamedStrategy& ns : list) {
    // (And their counterparts over the fastest nodes alone:
    // node_subset_baselines.h.)
    if (!absl::StartsWith(ns.name, "dp-even-ring") &&
        !absl::StartsWith(ns.name, "dp-proportional-ring")) {
      continue;
    }
    if (!ns.infeasible_reason.empty() || !SumsOneByOne(ns.strategy)) continue;
    if (done.count(ns.name) || done.count(BucketedName(ns.name))) continue;
    if (buckets.empty()) buckets = GradientBuckets(g, kFrameworkBucketBytes);
    NamedStrategy v{BucketedName(ns.name), ns.strategy, ""};
    v.strategy.set_name(v.name);
    for (quilt::v1::ParameterAggregation& a : *v.strategy.mutable_aggregations()) {
      auto b = buckets.find(a.parameter());
      if (b != buckets.end()) a.set_bucket(b->second);
    }
    out.push_back(std::move(v));
  }
  return out;
}

void KeepFasterBucketed(std::map<std::string, Evaluated>* done) {
  for (auto it = done->begin(); it != done->end();) {
    if (!absl::EndsWith(it->first, kSuffix)) {
      ++it;
      continue;
    }
    const std::string base = it->first.substr(0, it->first.size() - kSuffix.size());
    auto b = done->find(base);
    Evaluated& v = it->second;
    if (b != done->end() && FitsAndBeats(v.estimate, b->second.estimate)) {
      const quilt::v1::StrategyEstimate& alone = b->second.estimate;
      const std::string note =
          alone.feasible()
              ? absl::StrFormat(
                    "gradients summed in %d MiB buckets, as data-parallel frameworks do (one "
                    "collective per gradient: %.4g s)",
                    kFrameworkBucketBytes >> 20, alone.step_time_s())
              : absl::StrFormat(
                    "gradients summed in %d MiB buckets, as data-parallel frameworks do (one "
                    "collective per gradient does not fit: %s)",
                    kFrameworkBucketBytes >> 20, alone.infeasible_reason());
      v.Rename(base);
      v.estimate.set_note(note);
      b->second = std::move(v);
    }
    it = done->erase(it);
  }
}

}  // namespace quilt
