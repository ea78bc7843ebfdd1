// Which inputs of an op may be partial sums (parts on several devices whose
// sum is the tensor) so that the op's per-device outputs are again parts of
// its output's sum. A linear op may take one partial operand while the
// others are whole; an op that adds or concatenates its operands needs all
// of them partial (a whole one would be counted once per device); a
// quotient only in its numerator; Gemm with a bias none (affine). Lowering
// reads partial sums only as this allows and sums the rest first; the
// validator refuses programs that read them otherwise.
#ifndef QUILT_SRC_PLANNER_PARTIAL_SUMS_H_
#define QUILT_SRC_PLANNER_PARTIAL_SUMS_H_

#include "src/graph/graph.h"
#include "src/graph/op_registry.h"

namespace quilt {

enum class PartialRule {
  kNone,          // every input whole
  kOneOperand,    // at most one partial input, any
  kFirstOperand,  // only input 0 may be partial
  kAllOperands,   // all inputs partial, or none
};

PartialRule PartialRuleOf(const Op& op, const OpSchema& schema);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_PARTIAL_SUMS_H_
