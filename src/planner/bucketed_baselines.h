// Data-parallel all-reduce baselines as frameworks run them. PyTorch's
// DistributedDataParallel (and Horovod's tensor fusion) sum gradients in
// buckets (25 MiB by default), filled in the order the backward pass makes
// them, not one collective per gradient: on many small gradients or slow
// links buckets save most of the collectives' latency, while on fast links
// a gradient summed alone can start sooner. So each all-reduce baseline
// (dp-even-ring, dp-proportional-ring, and those over the fastest nodes
// alone) is simulated both ways and keeps
// the faster, its note saying where the buckets were kept: the best
// data-parallel baseline a plan is compared with is the best a framework's
// data parallelism could do, not a straw man.
#ifndef QUILT_SRC_PLANNER_BUCKETED_BASELINES_H_
#define QUILT_SRC_PLANNER_BUCKETED_BASELINES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "src/graph/graph.h"
#include "src/planner/baselines.h"
#include "src/planner/estimate_many.h"

namespace quilt {

// DistributedDataParallel's default bucket_cap_mb.
inline constexpr int64_t kFrameworkBucketBytes = int64_t{25} << 20;

// The bucketed counterparts of `list`'s all-reduce baselines (those that
// can be built and sum their gradients one by one), named
// BucketedName(name), leaving out those `done` already holds.
std::vector<NamedStrategy> BucketedVariants(const Graph& graph,
                                            const std::vector<NamedStrategy>& list,
                                            const std::map<std::string, Evaluated>& done);

// The name a baseline's bucketed counterpart is simulated under.
std::string BucketedName(const std::string& baseline);

// Each simulated counterpart in `done` merged into its baseline: kept as
// the baseline (under its name, with a note) where it fits and is faster,
// or where the baseline does not fit; removed either way.
void KeepFasterBucketed(std::map<std::string, Evaluated>* done);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_BUCKETED_BASELINES_H_
