// MakeOp: an Op with the given name, type, inputs and outputs, for tests
// that build graphs by hand (including graphs the builder would refuse).
#ifndef QUILT_SRC_TESTING_MAKE_OP_H_
#define QUILT_SRC_TESTING_MAKE_OP_H_

#include <string>
#include <utility>
#include <vector>

#include "src/graph/graph.h"

namespace quilt {

inline Op MakeOp(const std::string& name, const std::string& type, std::vector<std::string> in,
                 std::vector<std::string> out) {
  Op op;
  op.name = name;
  op.type = type;
  op.inputs = std::move(in);
  op.outputs = std::move(out);
  return op;
}

}  // namespace quilt

#endif  // QUILT_SRC_TESTING_MAKE_OP_H_
