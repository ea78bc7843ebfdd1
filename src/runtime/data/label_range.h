// How the model's loss reads its integer labels, and a numpy dataset's
// labels checked against it before a job starts: a label outside the
// classes would otherwise stop the job at its first step. The labels are
// followed through the ops that only reshape them (and slices and gathers,
// for the class count); the range is checked only where every value of
// the file reaches the loss as it is (no slice or gather on the way), with
// the loss's ignore_index allowed.
#ifndef QUILT_SRC_RUNTIME_DATA_LABEL_RANGE_H_
#define QUILT_SRC_RUNTIME_DATA_LABEL_RANGE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "src/graph/graph.h"
#include "src/runtime/data/dataset.h"

namespace quilt {

struct LabelUse {
  // The classes the loss reads the labels as: its prediction's extent
  // along its class axis, or a one-hot's depth (0: unknown).
  int64_t classes = 0;
  // Every label value reaches the loss (only reshapes on the way), and the
  // losses that read them agree on the classes and on `ignore`.
  bool every_value = true;
  // A label the loss skips (its ignore_index).
  std::optional<int64_t> ignore;
};

// Of the graph's integer label `label` (a training graph's).
LabelUse LabelsAsTheLossReadsThem(const Graph& graph, const std::string& label);

// OK where the labels are not integers, their classes are unknown, or not
// every value reaches the loss. Errors: INVALID_ARGUMENT naming the file,
// the sample and the label; the file's own errors (npy.h).
absl::Status CheckLabelRange(const Graph& graph, const DataSignature& signature,
                             const std::string& labels_path);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_DATA_LABEL_RANGE_H_
