#include "src/common/proto_file.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "src/common/files.h"
#include "src/common/status.h"

namespace quilt {

absl::Status ReadProtoFile(const std::string& path, google::protobuf::Message* out) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const std::string type = out->GetDescriptor()->name();
  if (absl::EndsWith(path, ".json")) {
    google::protobuf::util::JsonParseOptions o;
    auto s = google::protobuf::util::JsonStringToMessage(text, out, o);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a ", type, " in JSON: ", std::string(s.message())));
    }
    return absl::OkStatus();
  }
  struct Collector : google::protobuf::io::ErrorCollector {
    std::string error;
    void AddError(int line, int column, const std::string& message) override {
      if (error.empty()) error = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
    }
  } collector;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&collector);
  if (!parser.ParseFromString(text, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a ", type, " in text format: ", collector.error));
  }
  return absl::OkStatus();
}

absl::Status WriteBinaryProtoFile(const std::string& path,
                                  const google::protobuf::MessageLite& message) {
  return WriteFileAtomicallyWith(path, [&](int fd) -> absl::Status {
    google::protobuf::io::FileOutputStream raw(fd, 1 << 20);  // large writes: fewer calls
    {
      google::protobuf::io::CodedOutputStream out(&raw);
      out.SetSerializationDeterministic(true);
      if (!message.SerializeToCodedStream(&out)) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot serialize the ", message.GetTypeName(), " for ", path));
      }
    }
    // (The descriptor is the caller's to close: only flushed here.)
    if (!raw.Flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", path, ": ", std::strerror(raw.GetErrno())));
    }
    return absl::OkStatus();
  });
}

}  // namespace quilt
