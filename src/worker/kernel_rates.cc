#include "src/worker/kernel_rates.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "src/common/status.h"
#include "src/graph/graph_summary.h"
#include "src/graph/zoo_training.h"
#include "src/runtime/data/dataset.h"
#include "src/runtime/local_trainer.h"
#include "src/runtime/parallel.h"

namespace quilt {
namespace {

struct Totals {
  double flops = 0;
  double seconds = 0;
};

// Trains `model` for about `budget` and adds each op type's FLOPs and
// kernel seconds to `totals`.
absl::Status Measure(const std::string& model, int64_t batch, absl::Duration budget,
                     std::map<std::string, Totals>* totals) {
  ASSIGN_OR_RETURN(Graph g, zoo::ZooTrainingGraph(model));
  ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(g));
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> data, MakeSyntheticDataset(g, sig, 1));
  // A first run warms what runs share (the kernels' buffer pools, the
  // thread pool). Each run still starts colder than it goes on (its own
  // tensors' first pages): a two-step run times a step, and its kernel
  // times are taken off those of a run N steps longer.
  LocalTrainOptions o;
  o.batch = batch;
  o.steps = 2;
  RETURN_IF_ERROR(TrainLocal(g, data.get(), o).status());
  o.profile = true;
  ASSIGN_OR_RETURN(LocalTrainResult warm, TrainLocal(g, data.get(), o));
  const double step_s = std::max(warm.mean_step_time_s, 1e-6);
  const int64_t measured = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(budget) / step_s)), 2, 200);
  o.steps = measured + 2;
  ASSIGN_OR_RETURN(LocalTrainResult run, TrainLocal(g, data.get(), o));
  const std::map<std::string, double>& cold = warm.runner->OpTimes();
  ASSIGN_OR_RETURN(GraphSummary step, Summarize(g, batch));  // FLOPs per step and type
  for (const auto& [type, seconds] : run.runner->OpTimes()) {
    auto c = cold.find(type);
    const double warm_seconds = seconds - (c == cold.end() ? 0 : c->second);
    if (warm_seconds <= 0) continue;
    Totals& t = (*totals)[type];
    t.flops += step.flops_by_type[type] * static_cast<double>(measured);
    t.seconds += warm_seconds;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<quilt::v1::OpTypeRate>> MeasureOpTypeRates(int threads,
                                                                      absl::Duration duration) {
  const int before = ComputeThreads();
  SetComputeThreads(std::max(1, threads));
  std::map<std::string, Totals> totals;
  absl::Status st = Measure("cnn", 64, duration / 2, &totals);
  if (st.ok()) st = Measure("mlp", 128, duration / 2, &totals);
  SetComputeThreads(before);
  if (!st.ok()) return absl::InternalError(absl::StrCat("op-type calibration: ", st.message()));
  std::vector<quilt::v1::OpTypeRate> out;
  for (const auto& [type, t] : totals) {
    if (t.flops <= 0 || t.seconds <= 0) continue;
    quilt::v1::OpTypeRate& r = out.emplace_back();
    r.set_op_type(type);
    r.set_flops_per_s(t.flops / t.seconds);
  }
  return out;
}

}  // namespace quilt
