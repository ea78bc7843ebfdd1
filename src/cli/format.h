// Human-readable output for quiltctl: SI units for rates, binary units for
// memory, compact durations, and aligned text tables (kubectl style:
// upper-case headers, columns separated by three spaces).
#ifndef QUILT_SRC_CLI_FORMAT_H_
#define QUILT_SRC_CLI_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "src/common/units.h"

namespace quilt::cli {

// 1.5e12 → "1.50T"; 0 → "0".
std::string HumanSi(double value);
using ::quilt::HumanBytes;  // src/common/units.h
// 0.42 → "0.4s"; 75 → "1m15s"; 7300 → "2h1m".
std::string HumanDuration(double seconds);
// (HumanSeconds: src/common/units.h.)
// Terminal columns of a UTF-8 string (one per code point).
size_t DisplayWidth(const std::string& s);

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : rows_{std::move(headers)} {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// A proto message as JSON with the .proto field names, defaults included;
// indented, or on one line (a stream of JSON Lines). As proto3's JSON
// mapping has it, 64-bit integers are strings.
std::string ToJson(const google::protobuf::Message& message, bool one_line = false);

}  // namespace quilt::cli

#endif  // QUILT_SRC_CLI_FORMAT_H_
