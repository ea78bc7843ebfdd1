#include "src/runtime/local_trainer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/common/status.h"

namespace quilt {

absl::StatusOr<LocalTrainResult> TrainLocal(const Graph& g, Dataset* data,
                                            const LocalTrainOptions& options) {
  if (options.batch <= 0) return absl::InvalidArgumentError("the batch size must be positive");
  if (options.steps < 0) return absl::InvalidArgumentError("the step count must be >= 0");
  ASSIGN_OR_RETURN(DataSignature sig, DataSignatureOf(g));
  RunnerOptions ro;
  ro.seed = options.seed;
  ro.profile = options.profile;
  LocalTrainResult result;
  ASSIGN_OR_RETURN(result.runner, GraphRunner::Create(g, ro));
  double timed = 0;
  for (int64_t step = 0; step < options.steps; ++step) {
    std::vector<Tensor> xs;
    Tensor y;
    RETURN_IF_ERROR(data->Batch(step * options.batch, options.batch, &xs, &y));
    std::map<std::string, Tensor> feeds = {{sig.label.name, y}};
    for (size_t j = 0; j < xs.size(); ++j) feeds[sig.inputs[j].name] = xs[j];
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(float loss, result.runner->Step(feeds));
    const double t = absl::ToDoubleSeconds(absl::Now() - start);
    if (step > 0) timed += t;
    if (!std::isfinite(loss)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the loss is ", loss, " at step ", step + 1,
                       ": the data holds non-finite values or the learning rate is too high"));
    }
    result.losses.push_back(loss);
    if (options.on_step) {
      options.on_step({step + 1, loss, t, t > 0 ? options.batch / t : 0});
    }
  }
  if (options.steps > 1) result.mean_step_time_s = timed / (options.steps - 1);
  return result;
}

}  // namespace quilt
