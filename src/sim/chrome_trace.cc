// Chrome trace-event JSON for simulated (and measured) timelines.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/sim/simulator.h"

namespace quilt {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string ChromeTraceJson(const std::vector<TraceEvent>& events,
                            const std::vector<std::string>& lane_names, const std::string& title) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":\"" + Escape(title) +
                    "\"},\"traceEvents\":[\n";
  // Per lane, whether it has computation (thread 0) and communication
  // (thread 1).
  std::map<int, std::pair<bool, bool>> lanes;
  for (const TraceEvent& e : events) {
    auto& kinds = lanes[e.lane];
    (e.category == "compute" ? kinds.first : kinds.second) = true;
  }
  bool first = true;
  auto emit = [&](const std::string& json) {
    if (!first) out += ",\n";
    first = false;
    out += json;
  };
  for (const auto& [lane, kinds] : lanes) {
    const std::string name = lane >= 0 && lane < static_cast<int>(lane_names.size())
                                 ? lane_names[lane]
                                 : absl::StrCat("lane ", lane);
    emit(absl::StrFormat(R"({"ph":"M","name":"process_name","pid":%d,"args":{"name":"%s"}})", lane,
                         Escape(name)));
    if (kinds.first) {
      emit(absl::StrFormat(
          R"({"ph":"M","name":"thread_name","pid":%d,"tid":0,"args":{"name":"compute"}})", lane));
    }
    if (kinds.second) {
      emit(absl::StrFormat(
          R"({"ph":"M","name":"thread_name","pid":%d,"tid":1,"args":{"name":"communication"}})",
          lane));
    }
  }
  for (const TraceEvent& e : events) {
    emit(absl::StrFormat(
        R"({"ph":"X","name":"%s","cat":"%s","pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f})",
        Escape(e.name), e.category, e.lane, e.category == "compute" ? 0 : 1, e.start_s * 1e6,
        e.duration_s * 1e6));
  }
  out += "\n]}\n";
  return out;
}

std::string ChromeTraceJson(const SimResult& r, const Topology& topo, const std::string& title) {
  // Devices first, then the links that carried traffic.
  std::vector<std::string> names;
  for (int d = 0; d < topo.num_devices(); ++d) names.push_back(topo.device(d).id);
  for (int k = 0; k < topo.num_resources(); ++k) names.push_back("link " + topo.resource(k).name);
  return ChromeTraceJson(r.trace, names, title);
}

}  // namespace quilt
