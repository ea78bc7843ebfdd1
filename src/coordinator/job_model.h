// The training graph of a job: its model (a TrainingGraph, the bytes of an
// ONNX file, or a model-zoo name) with the job's loss and optimizer added
// and differentiated. Shared by planning (PlanJob) and submission.
#ifndef QUILT_SRC_COORDINATOR_JOB_MODEL_H_
#define QUILT_SRC_COORDINATOR_JOB_MODEL_H_

#include "absl/status/statusor.h"
#include "proto/quilt/v1/job.pb.h"
#include "src/graph/graph.h"

namespace quilt {

// The spec's initial_weights, where it has them, replace the named
// parameters' initial values. Errors: INVALID_ARGUMENT naming the problem
// (no model, unknown zoo name, invalid graph or ONNX, batch < 1, no loss
// where the model defines none, no optimizer, initial weights that are no
// .npz, name no parameter or do not fit one).
absl::StatusOr<Graph> TrainingGraphForJob(const quilt::v1::JobSpec& spec);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_JOB_MODEL_H_
