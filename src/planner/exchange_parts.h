// Says which of a program's two-level all-reduces split their exchange
// across nodes by the nodes' bandwidths (src/common/hierarchical_layout.h),
// and the parts of the largest of them, for `quiltctl plan --explain`.
#ifndef QUILT_SRC_PLANNER_EXCHANGE_PARTS_H_
#define QUILT_SRC_PLANNER_EXCHANGE_PARTS_H_

#include <string>

#include "proto/quilt/v1/program.pb.h"
#include "src/cluster/topology.h"

namespace quilt {

// e.g. "3 of the 24 two-level all-reduces; the largest (120 MiB): v100-0
// 70 %, gtx1080ti-0 10 %, gtx1080ti-1 10 %, p100-0 10 %". Empty when none
// does (equal parts, or no two-level all-reduce over three or more nodes).
std::string ExchangePartsText(const quilt::v1::DistributedProgram& program,
                              const Topology& topology);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_EXCHANGE_PARTS_H_
