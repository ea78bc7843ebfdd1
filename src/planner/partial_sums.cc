#include "src/planner/partial_sums.h"

namespace quilt {

PartialRule PartialRuleOf(const Op& op, const OpSchema& schema) {
  if (!schema.linear) return PartialRule::kNone;
  const std::string& type = op.type;
  if (type == "Add" || type == "Sub" || type == "Sum" || type == "Concat") {
    return PartialRule::kAllOperands;
  }
  if (type == "Div") return PartialRule::kFirstOperand;
  if (type == "Gemm") {
    const bool bias = op.inputs.size() > 2 && !op.inputs[2].empty();
    return bias ? PartialRule::kNone : PartialRule::kOneOperand;
  }
  return PartialRule::kOneOperand;
}

}  // namespace quilt
