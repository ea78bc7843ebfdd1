#include "src/coordinator/metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "src/coordinator/job_manager.h"

namespace quilt {
namespace {

// Prometheus's spelling of a sample value (NaN and infinities included).
std::string Value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

void Family(std::string* out, const char* name, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n");
}

// An enum value's name as a label value: "NODE_STATE_NOT_READY" without
// `prefix`, lower case ("not_ready").
std::string StateLabel(const std::string& name, absl::string_view prefix) {
  std::string s(absl::StripPrefix(name, prefix));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string RenderMetrics(const std::vector<quilt::v1::NodeStatus>& nodes,
                          const std::vector<quilt::v1::JobStatus>& jobs) {
  using quilt::v1::JobState_Name;
  using quilt::v1::NodeState_Name;
  constexpr absl::string_view kNodePrefix = "NODE_STATE_", kJobPrefix = "JOB_STATE_";
  std::string out;
  std::map<std::string, int> node_states;
  for (int s = quilt::v1::NODE_STATE_READY; s <= quilt::v1::NODE_STATE_DOWN; ++s) {
    node_states[StateLabel(NodeState_Name(static_cast<quilt::v1::NodeState>(s)), kNodePrefix)] = 0;
  }
  int draining = 0;
  for (const quilt::v1::NodeStatus& n : nodes) {
    ++node_states[StateLabel(NodeState_Name(n.state()), kNodePrefix)];
    draining += n.draining();
  }
  Family(&out, "quilt_nodes", "Registered nodes by state.");
  for (const auto& [state, count] : node_states) {
    absl::StrAppend(&out, "quilt_nodes{state=\"", state, "\"} ", count, "\n");
  }
  Family(&out, "quilt_nodes_draining", "Nodes drained by an operator (no new jobs).");
  absl::StrAppend(&out, "quilt_nodes_draining ", draining, "\n");

  const std::map<std::string, std::vector<std::string>> jobs_on =
      JobManager::ActiveJobsByNode(jobs);
  struct PerNode {
    const char* name;
    const char* help;
    std::function<double(const quilt::v1::NodeStatus&)> get;
  };
  const PerNode per_node[] = {
      {"quilt_node_ready", "1 while the node is Ready (heartbeats arrive), else 0.",
       [](const quilt::v1::NodeStatus& n) {
         return n.state() == quilt::v1::NODE_STATE_READY ? 1.0 : 0.0;
       }},
      {"quilt_node_draining", "1 while an operator has the node drained, else 0.",
       [](const quilt::v1::NodeStatus& n) { return n.draining() ? 1.0 : 0.0; }},
      {"quilt_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat.",
       [](const quilt::v1::NodeStatus& n) { return n.heartbeat_age_s(); }},
      {"quilt_node_jobs", "Jobs not ended that run on the node.",
       [&jobs_on](const quilt::v1::NodeStatus& n) {
         auto it = jobs_on.find(n.info().node_id());
         return it == jobs_on.end() ? 0.0 : static_cast<double>(it->second.size());
       }},
  };
  for (const PerNode& m : per_node) {
    Family(&out, m.name, m.help);
    for (const quilt::v1::NodeStatus& n : nodes) {
      absl::StrAppend(&out, m.name, "{node=\"", EscapeLabelValue(n.info().node_id()), "\"} ",
                      Value(m.get(n)), "\n");
    }
  }

  std::map<std::string, int> job_states;
  for (int s = quilt::v1::JOB_STATE_PENDING; s <= quilt::v1::JobState_MAX; ++s) {
    if (s == quilt::v1::JOB_STATE_PLANNING) continue;  // not a state jobs are kept in
    job_states[StateLabel(JobState_Name(static_cast<quilt::v1::JobState>(s)), kJobPrefix)] = 0;
  }
  for (const quilt::v1::JobStatus& j : jobs) {
    ++job_states[StateLabel(JobState_Name(j.state()), kJobPrefix)];
  }
  Family(&out, "quilt_jobs", "Jobs the coordinator keeps, by state.");
  for (const auto& [state, count] : job_states) {
    absl::StrAppend(&out, "quilt_jobs{state=\"", state, "\"} ", count, "\n");
  }

  struct PerJob {
    const char* name;
    const char* help;
    double (*get)(const quilt::v1::JobStatus&);
  };
  const PerJob per_job[] = {
      {"quilt_job_step", "The last step every executor of the job finished.",
       [](const quilt::v1::JobStatus& j) { return static_cast<double>(j.step()); }},
      {"quilt_job_steps", "The steps the job trains for.",
       [](const quilt::v1::JobStatus& j) { return static_cast<double>(j.steps()); }},
      {"quilt_job_loss", "The loss of the job's latest complete step (NaN before the first).",
       [](const quilt::v1::JobStatus& j) {
         return j.last_loss_step() > 0 ? j.last_loss() : std::nan("");
       }},
      {"quilt_job_step_time_seconds", "Measured step time (0 before it is measured).",
       [](const quilt::v1::JobStatus& j) { return j.measured_step_time_s(); }},
      {"quilt_job_predicted_step_time_seconds", "The plan's simulated step time.",
       [](const quilt::v1::JobStatus& j) { return j.predicted_step_time_s(); }},
      {"quilt_job_memory_bytes",
       "The most bytes of tensors one of the job's devices held in a step (0 before one).",
       [](const quilt::v1::JobStatus& j) {
         int64_t most = 0;
         for (const auto& [node, bytes] : j.measured_memory_bytes()) most = std::max(most, bytes);
         return static_cast<double>(most);
       }},
      {"quilt_job_predicted_memory_bytes", "The plan's simulated peak on its fullest device.",
       [](const quilt::v1::JobStatus& j) {
         int64_t most = 0;
         for (const auto& [device, bytes] : j.predicted_device_memory_bytes()) {
           most = std::max(most, bytes);
         }
         return static_cast<double>(most);
       }},
      {"quilt_job_samples_per_second", "Global batch over the measured step time.",
       [](const quilt::v1::JobStatus& j) { return j.samples_per_s(); }},
      {"quilt_job_seconds_since_progress", "Seconds since the job's step last moved on.",
       [](const quilt::v1::JobStatus& j) { return j.since_progress_s(); }},
  };
  for (const PerJob& m : per_job) {
    Family(&out, m.name, m.help);
    for (const quilt::v1::JobStatus& j : jobs) {
      if (JobManager::Ended(j.state())) continue;
      absl::StrAppend(&out, m.name, "{job_id=\"", EscapeLabelValue(j.job_id()), "\",name=\"",
                      EscapeLabelValue(j.name()), "\"} ", Value(m.get(j)), "\n");
    }
  }
  return out;
}

}  // namespace quilt
