// Bundles of the tensors that cross between the planner's coarse ops
// (coarse_graph.h): tensors with the same producing coarse op (or none: a
// constant or frozen parameter) and the same set of reading coarse ops
// cross as one tensor of all their elements. A group hands its backward op
// dozens of saved activations and batch-norm statistics, each of which
// would otherwise be one read, transfer or collective per device in every
// candidate the search lowers; one bundle moves the same bytes at the same
// points. Left out: trainable parameters and their gradients (the coarse
// graph flattens those), the data, the loss, a replica's local statistics,
// and batch tensors whose samples are interleaved.
#ifndef QUILT_SRC_PLANNER_TENSOR_BUNDLES_H_
#define QUILT_SRC_PLANNER_TENSOR_BUNDLES_H_

#include <map>
#include <string>
#include <vector>

#include "src/graph/graph.h"

namespace quilt {

struct TensorBundle {
  std::string name;
  TensorInfo info;                // F32; [batch, elements per row] or [elements]
  bool frozen_parameter = false;  // of frozen parameters (else produced, or constants)
  std::vector<std::string> members;
};

// `coarse_of`: each fine op's coarse op (-1: none); coarse ops from
// `first_update` on are parameter updates (they read only flat tensors).
// `producer`, `consumers`: each tensor's producing fine op and reading
// fine ops. `flat`: fine tensors the coarse graph replaces by flat ones.
// Bundles of two or more tensors only.
std::vector<TensorBundle> BundleTensors(const Graph& g, const std::vector<int>& coarse_of,
                                        int first_update,
                                        const std::map<std::string, int>& producer,
                                        const std::map<std::string, std::vector<int>>& consumers,
                                        const std::map<std::string, int>& flat);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_TENSOR_BUNDLES_H_
