// Reads a protobuf message from a file a person wrote or a tool printed:
// JSON when the path ends in .json, else text format. Errors name the
// file, the message type and, for text, the first line and column that
// does not parse. Writes a message in binary, atomically and
// deterministically, straight to the file.
#ifndef QUILT_SRC_COMMON_PROTO_FILE_H_
#define QUILT_SRC_COMMON_PROTO_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace quilt {

// Errors: the file's (NOT_FOUND, …), INVALID_ARGUMENT when it does not
// parse as `out`'s type.
absl::Status ReadProtoFile(const std::string& path, google::protobuf::Message* out);

// Deterministic bytes (maps in key order: the same message, the same
// file), serialized into the file as they are made (a message of
// gigabytes, a program with its model's weights, is not built in memory
// first). Errors: those of WriteFileAtomicallyWith (files.h).
absl::Status WriteBinaryProtoFile(const std::string& path,
                                  const google::protobuf::MessageLite& message);

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_PROTO_FILE_H_
