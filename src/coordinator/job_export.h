// A job's trained state on disk and the trained model out: the latest
// complete checkpoint (every rank's metrics.json written; steps ordered by
// number, entries not named step-<number> ignored; a newer checkpoint that
// does not read is passed over and said) read back into whole tensors
// (src/runtime/checkpoint.h), and the trained model out: an ONNX model (for
// jobs submitted as ONNX) with its initializers replaced by the trained
// parameters, or any job's parameters as NumPy arrays (.npz).
#ifndef QUILT_SRC_COORDINATOR_JOB_EXPORT_H_
#define QUILT_SRC_COORDINATOR_JOB_EXPORT_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/quilt/v1/job.pb.h"
#include "proto/quilt/v1/services.pb.h"
#include "src/runtime/checkpoint.h"

namespace quilt {

// With `accept`, a checkpoint it refuses is passed over like one that does
// not read; with `wanted`, only the tensors it accepts by name are read.
// Errors: NOT_FOUND (no complete checkpoint in `dir`), DATA_LOSS (none of
// the complete ones reads: the newest one's problem).
absl::StatusOr<Checkpoint> ReadLatestCheckpoint(
    const std::string& dir, int world,
    const std::function<absl::Status(const Checkpoint&)>& accept = nullptr,
    const std::function<bool(const std::string&)>& wanted = nullptr);

// The latest checkpoint of `job` (ReadLatestCheckpoint over its directory
// and world), with `out`'s step and note (newer checkpoints that do not
// read) set from it. Errors: FAILED_PRECONDITION ("job … has no usable
// checkpoint: …").
absl::StatusOr<Checkpoint> ReadJobCheckpoint(
    const quilt::v1::JobRecord& job, quilt::v1::ExportJobResponse* out,
    const std::function<absl::Status(const Checkpoint&)>& accept = nullptr,
    const std::function<bool(const std::string&)>& wanted = nullptr);

// Errors: FAILED_PRECONDITION (not an ONNX job, or no checkpoint yet).
absl::StatusOr<quilt::v1::ExportJobResponse> ExportTrainedOnnx(const quilt::v1::JobRecord& job);

// Any job's trained parameters as a NumPy .npz (ExportJobResponse.npz):
// every parameter of the model by name, trained ones from the latest
// checkpoint that holds them in their types and shapes, those no step
// updates (frozen, or read by no op) at their initial values.
// Errors: FAILED_PRECONDITION (the model does not load, no usable
// checkpoint), DATA_LOSS (a parameter the checkpoint lacks),
// RESOURCE_EXHAUSTED (4 GiB or more).
absl::StatusOr<quilt::v1::ExportJobResponse> ExportTrainedWeights(const quilt::v1::JobRecord& job);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_EXPORT_H_
