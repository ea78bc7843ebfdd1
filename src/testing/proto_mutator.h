// Structured mutation of protobuf messages for tests that feed malformed
// input (an ONNX model, a program) to Quilt and expect a clear error, never
// a crash or a hang. Unlike flipped bytes, which the parser mostly rejects,
// a mutation keeps the message well-formed and changes what it says: a
// number set to an edge value (0, -1, 2^31 - 1, 2^62, NaN, infinity), a
// string to another of the message's names or a made-up one, an element of
// a list removed or repeated, a nested message cleared.
#ifndef QUILT_SRC_TESTING_PROTO_MUTATOR_H_
#define QUILT_SRC_TESTING_PROTO_MUTATOR_H_

#include <random>
#include <string>

#include "google/protobuf/message.h"

namespace quilt::testing {

// One random mutation of `msg` or a message nested in it (fields to a
// depth of 8); returns what it did ("set quilt.v1.Dim.size = -1"), for a
// failure's message. The same `rng` state gives the same mutation.
std::string MutateMessage(google::protobuf::Message* msg, std::mt19937* rng);

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_PROTO_MUTATOR_H_
