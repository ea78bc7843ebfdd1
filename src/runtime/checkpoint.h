// A checkpoint's files read back: <step dir>/rank-<r>/metrics.json lists
// the tensors (or row ranges of them) each rank held, each in a .npy file
// beside it. The pieces are joined into whole tensors — parameter-server
// shards by rows, replicas (equal) taken once — so a checkpoint written
// under one plan can be read under another.
#ifndef QUILT_SRC_RUNTIME_CHECKPOINT_H_
#define QUILT_SRC_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

struct Checkpoint {
  int64_t step = 0;
  std::map<std::string, Tensor> tensors;  // parameters and optimizer state
  // Newer complete checkpoints that did not read, and why.
  std::string passed_over;
};

// The checkpoint of `world` ranks in `step_dir` (its step is left 0), with
// `wanted` only the tensors it accepts by name. Errors: DATA_LOSS (an
// index or file that does not read, rows no file holds, pieces that do not
// fit together).
absl::StatusOr<Checkpoint> ReadCheckpoint(
    const std::string& step_dir, int world,
    const std::function<bool(const std::string&)>& wanted = nullptr);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_CHECKPOINT_H_
