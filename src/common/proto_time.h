// Conversions between absl::Time / absl::Duration and the protobuf
// well-known Timestamp type.
#ifndef QUILT_SRC_COMMON_PROTO_TIME_H_
#define QUILT_SRC_COMMON_PROTO_TIME_H_

#include "absl/time/time.h"
#include "google/protobuf/timestamp.pb.h"

namespace quilt {

inline google::protobuf::Timestamp ToProtoTime(absl::Time t) {
  google::protobuf::Timestamp ts;
  timespec spec = absl::ToTimespec(t);
  ts.set_seconds(spec.tv_sec);
  ts.set_nanos(static_cast<int32_t>(spec.tv_nsec));
  return ts;
}

inline absl::Time FromProtoTime(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_PROTO_TIME_H_
