// Which global batch each planner_bench case plans at. Either rows per
// device (--rows-per-device: the batch is that many rows times the
// cluster's devices, several to compare; without it a per-model default)
// or global batches given outright (--global-batch: one batch for every
// model and MODEL=B for the models that differ, e.g. "24,bert_large=6",
// HeteroG's artifact batches), the same on every cluster.
#ifndef QUILT_BENCH_BATCH_CHOICES_H_
#define QUILT_BENCH_BATCH_CHOICES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace quilt {

struct BatchChoice {
  // Rows per device; 0 with no global batch: the per-model default.
  double rows_per_device = 0;
  // A global batch for every model not in `per_model`; 0: none given
  // (those models then plan at rows per device).
  int64_t global_batch = 0;
  std::map<std::string, int64_t> per_model;

  // The global batch `model` plans at on `devices` devices (at least 1).
  int64_t BatchFor(const std::string& model, int devices) const;
  // The summary line's "batch": {"rows_per_device": R or "per-model
  // default"} or {"global_batch": B}, with each model's own batch beside
  // it ({"global_batch": 24, "bert_large": 6}).
  nlohmann::json Describe() const;
};

// The per-model default rows per device: 8; bert_large 4; gpt2 2;
// gpt2_xl 1/4.
double DefaultRowsPerDevice(const std::string& model);

// The choices the two flags give (either may be empty; not both set).
// Errors: INVALID_ARGUMENT naming the flag and the item that is not a
// positive number (a whole one for a global batch), a model named twice,
// two batches for every model in --global-batch, or both flags set.
absl::StatusOr<std::vector<BatchChoice>> ParseBatchChoices(absl::string_view rows_per_device,
                                                           absl::string_view global_batch);

}  // namespace quilt

#endif  // QUILT_BENCH_BATCH_CHOICES_H_
