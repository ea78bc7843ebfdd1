#include "src/planner/pipelined_plan.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/planner/lower.h"
#include "src/planner/micro_batches.h"

namespace quilt {

bool WorthPipelining(const quilt::v1::StrategyEstimate& plan) {
  return plan.feasible() && plan.strategy().micro_batches() <= 1 && plan.step_time_s() > 0 &&
         plan.compute_s() <= (1 - kPipelineGainShare) * plan.step_time_s();
}

std::vector<NamedStrategy> PipelinedForms(const quilt::v1::Strategy& plan, const std::string& name,
                                          int64_t batch, int micro_batches, bool small) {
  std::vector<int> in_flight;
  if (micro_batches == 2) in_flight = {2};
  if (micro_batches == 4) in_flight = small ? std::vector<int>{2, 4} : std::vector<int>{2};
  std::vector<NamedStrategy> out;
  if (micro_batches > batch) return out;
  for (const int w : in_flight) {
    quilt::v1::Strategy s = plan;
    s.set_micro_batches(micro_batches);
    s.set_micro_batches_in_flight(w);
    out.push_back(
        NamedStrategy{absl::StrCat(name, "+pipeline", micro_batches, "#", w), std::move(s), ""});
  }
  return out;
}

std::string DescribePipelining(const quilt::v1::Strategy& plan, int64_t batch) {
  std::string out = DescribeMicroBatches(batch, plan.micro_batches());
  const std::string in_flight = DescribeInFlight(plan.micro_batches_in_flight());
  if (!in_flight.empty()) absl::StrAppend(&out, ", ", in_flight);
  return out;
}

std::string MicroBatchesRefused(const GraphIndex& index, const Topology& topology) {
  std::vector<int64_t> one(topology.num_devices(), 0);
  one[0] = 1;
  quilt::v1::Strategy probe = DataParallelStrategy(
      index.graph(), topology, one, quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE, "probe");
  probe.set_micro_batches(2);
  absl::StatusOr<quilt::v1::DistributedProgram> p =
      LowerWithoutGraph(index, probe, topology, /*cost=*/nullptr, 2);
  if (!p.ok() && absl::StrContains(p.status().message(), "gradient accumulation")) {
    return std::string(p.status().message());
  }
  return "";
}

}  // namespace quilt
