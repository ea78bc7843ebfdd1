#include "src/cli/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"

namespace quilt::cli {

std::string HumanSi(double value) {
  if (value == 0) return "0";
  static const char* kUnits[] = {"", "K", "M", "G", "T", "P", "E"};
  int unit = 0;
  double v = value;
  while (std::fabs(v) >= 1000 && unit < 6) {
    v /= 1000;
    ++unit;
  }
  return absl::StrFormat(
      std::fabs(v) >= 100 ? "%.0f%s" : (std::fabs(v) >= 10 ? "%.1f%s" : "%.2f%s"), v, kUnits[unit]);
}

std::string HumanDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  int64_t s = static_cast<int64_t>(seconds);
  if (s < 3600) return absl::StrFormat("%dm%ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%dh", s / 86400, (s % 86400) / 3600);
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // UTF-8 lead bytes
  return n;
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - DisplayWidth(row[i]) + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string ToJson(const google::protobuf::Message& message, bool one_line) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = !one_line;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) return "{}";
  return out;
}

}  // namespace quilt::cli
