// Chrome trace-event JSON for simulated (and measured) timelines.
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

std::string ChromeTraceJson(const SimResult& r, const Topology& topo, const std::string& title) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"title\":\"" + Escape(title) +
                    "\"},\"traceEvents\":[\n";
  std::set<int> lanes;
  for (const TraceEvent& e : r.trace) lanes.insert(e.lane);
  bool first = true;
  auto emit = [&](const std::string& json) {
    if (!first) out += ",\n";
    first = false;
    out += json;
  };
  for (int lane : lanes) {
    const std::string name = lane < topo.num_devices()
                                 ? topo.device(lane).id
                                 : "link " + topo.resource(lane - topo.num_devices()).name;
    emit(absl::StrFormat(R"({"ph":"M","name":"process_name","pid":%d,"args":{"name":"%s"}})", lane,
                         Escape(name)));
    if (lane < topo.num_devices()) {
      emit(absl::StrFormat(
          R"({"ph":"M","name":"thread_name","pid":%d,"tid":0,"args":{"name":"compute"}})", lane));
      emit(absl::StrFormat(
          R"({"ph":"M","name":"thread_name","pid":%d,"tid":1,"args":{"name":"communication"}})",
          lane));
    }
  }
  for (const TraceEvent& e : r.trace) {
    const int tid = e.category == "compute" ? 0 : 1;
    emit(absl::StrFormat(
        R"({"ph":"X","name":"%s","cat":"%s","pid":%d,"tid":%d,"ts":%.3f,"dur":%.3f})",
        Escape(e.name), e.category, e.lane, tid, e.start_s * 1e6, e.duration_s * 1e6));
  }
  out += "\n]}\n";
  return out;
}

}  // namespace quilt
