#include "bench/batch_choices.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace quilt {

double DefaultRowsPerDevice(const std::string& model) {
  if (model == "bert_large") return 4;
  if (model == "gpt2") return 2;
  if (model == "gpt2_xl") return 0.25;
  return 8;
}

int64_t BatchChoice::BatchFor(const std::string& model, int devices) const {
  if (const auto it = per_model.find(model); it != per_model.end()) return it->second;
  if (global_batch > 0) return global_batch;
  const double rows = rows_per_device > 0 ? rows_per_device : DefaultRowsPerDevice(model);
  return std::max<int64_t>(1, static_cast<int64_t>(rows * devices));
}

nlohmann::json BatchChoice::Describe() const {
  const nlohmann::json rows =
      rows_per_device > 0 ? nlohmann::json(rows_per_device) : nlohmann::json("per-model default");
  nlohmann::json j;
  if (global_batch > 0) {
    j["global_batch"] = global_batch;
  } else {
    j["rows_per_device"] = rows;
  }
  for (const auto& [model, batch] : per_model) j[model] = batch;
  return j;
}

namespace {

absl::Status Bad(absl::string_view flag, absl::string_view item, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": '", item, "' ", why));
}

absl::StatusOr<BatchChoice> ParseGlobal(absl::string_view text) {
  constexpr absl::string_view kFlag = "--global-batch";
  BatchChoice c;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::string model;
    absl::string_view number = item;
    if (const size_t eq = item.find('='); eq != absl::string_view::npos) {
      model = std::string(absl::StripAsciiWhitespace(item.substr(0, eq)));
      number = absl::StripAsciiWhitespace(item.substr(eq + 1));
      if (model.empty()) return Bad(kFlag, item, "names no model before '='");
    }
    int64_t batch = 0;
    if (!absl::SimpleAtoi(number, &batch) || batch < 1) {
      return Bad(kFlag, item, "is not a whole number of rows of at least 1");
    }
    if (model.empty()) {
      if (c.global_batch > 0) return Bad(kFlag, item, "is a second batch for every model");
      c.global_batch = batch;
    } else if (!c.per_model.emplace(model, batch).second) {
      return Bad(kFlag, item, absl::StrCat("names ", model, " a second time"));
    }
  }
  return c;
}

}  // namespace

absl::StatusOr<std::vector<BatchChoice>> ParseBatchChoices(absl::string_view rows_per_device,
                                                           absl::string_view global_batch) {
  const bool rows_given = !absl::StripAsciiWhitespace(rows_per_device).empty();
  const bool global_given = !absl::StripAsciiWhitespace(global_batch).empty();
  if (rows_given && global_given) {
    return absl::InvalidArgumentError(
        "--rows-per-device and --global-batch both set: give one (the batch is rows per device "
        "times the devices, or given outright)");
  }
  std::vector<BatchChoice> out;
  if (global_given) {
    absl::StatusOr<BatchChoice> c = ParseGlobal(global_batch);
    if (!c.ok()) return c.status();
    out.push_back(*std::move(c));
    return out;
  }
  for (absl::string_view item : absl::StrSplit(rows_per_device, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    BatchChoice c;
    if (!absl::SimpleAtod(item, &c.rows_per_device) || !std::isfinite(c.rows_per_device) ||
        !(c.rows_per_device > 0)) {
      return Bad("--rows-per-device", item, "is not a positive number");
    }
    out.push_back(c);
  }
  if (out.empty()) out.emplace_back();  // the per-model default
  return out;
}

}  // namespace quilt
