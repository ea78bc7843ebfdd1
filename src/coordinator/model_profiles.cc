#include "src/coordinator/model_profiles.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "src/common/logging.h"
#include "src/common/units.h"
#include "src/graph/op_registry.h"
#include "src/planner/calibration.h"

namespace quilt {
namespace {

// The same model gives the same name: a hash of its training graph,
// serialized deterministically, without what does not change the work (the
// optimizer's settings, which its update ops carry as attributes, and the
// parameters' initial values).
std::string ModelKey(const Graph& g) {
  // (A copy's tensors share the graph's values: dropping them there spares
  // copying a model's weights into the message only to clear them.)
  Graph shape = g;
  for (ParameterSpec& p : shape.parameters) p.value.reset();
  quilt::v1::TrainingGraph proto = shape.ToProto();
  proto.clear_optimizer();
  for (auto& op : *proto.mutable_ops()) {
    const OpSchema* schema = OpRegistry::Global().Find(op.type());
    if (schema != nullptr && schema->is_update) op.clear_attrs();
  }
  for (auto& p : *proto.mutable_parameters()) {
    p.clear_value();
    p.clear_initializer();
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    proto.SerializeToCodedStream(&coded);
  }
  return absl::StrFormat("%016x", std::hash<std::string>()(bytes));
}

// `g` with each float32 parameter's value replaced by a seeded uniform
// initializer over that value's range: a step takes as long with either
// (the kernels do not look at the numbers), and a profile of a model of
// gigabytes is then not a message of gigabytes. (A copy's other tensors
// share the graph's values.)
Graph WithoutWeights(const Graph& g) {
  Graph light = g;
  uint64_t seed = 0;
  for (ParameterSpec& p : light.parameters) {
    ++seed;
    if (!p.value.has_value() || p.value->dtype() != DType::kF32 || p.value->numel() == 0) continue;
    const float* v = p.value->f32();
    const auto [low, high] = std::minmax_element(v, v + p.value->numel());
    p.init = InitializerSpec{};
    p.init.kind = InitializerSpec::Kind::kUniform;
    p.init.low = *low;
    p.init.high = *high;
    p.init.seed = seed;
    p.value.reset();
  }
  return light;
}

std::string Ms(double s) { return absl::StrFormat("%.2f ms", s * 1e3); }

// Three significant digits, never in exponent form (2140, 21.4, 0.214).
std::string Digits3(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return absl::StrFormat("%.0f", v);
  if (a >= 10) return absl::StrFormat("%.1f", v);
  if (a >= 1) return absl::StrFormat("%.2f", v);
  return absl::StrFormat("%.3f", v);
}

}  // namespace

void ModelProfiles::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

void ModelProfiles::OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                                quilt::v1::HeartbeatResponse* response) {
  absl::MutexLock lock(&mu_);
  const std::string& node = request.node_id();
  Node& n = nodes_[node];
  if (n.incarnation != request.incarnation()) {
    // A restarted worker: what it measured before may not hold, and what
    // it was asked it will not answer.
    if (n.incarnation != 0) {
      for (auto it = results_.begin(); it != results_.end();) {
        it = it->second.first == node ? results_.erase(it) : std::next(it);
      }
      for (auto it = asked_.begin(); it != asked_.end();) {
        if (it->second != node) {
          ++it;
          continue;
        }
        quilt::v1::ModelProfileResult failed;
        failed.set_profile_id(it->first);
        failed.set_error("the worker restarted");
        results_[it->first] = {node, failed};
        it = asked_.erase(it);
      }
      n.pending.clear();
    }
    n.incarnation = request.incarnation();
  }
  for (const quilt::v1::ModelProfileResult& r : request.profile_results()) {
    auto a = asked_.find(r.profile_id());
    if (a == asked_.end() || a->second != node) continue;
    results_[r.profile_id()] = {node, r};
    asked_.erase(a);
  }
  while (!n.pending.empty()) {
    *response->add_profiles() = std::move(n.pending.front());
    n.pending.pop_front();
  }
}

std::vector<std::string> ModelProfiles::Calibrate(const Graph& g, int64_t global_batch,
                                                  absl::Duration timeout,
                                                  quilt::v1::ClusterSpec* cluster,
                                                  const std::function<bool()>& abandoned,
                                                  std::set<std::string>* loaded) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string model = ModelKey(g);
  int64_t devices = 0;
  for (const auto& node : cluster->nodes()) devices += node.devices_size();
  const int64_t large =
      std::max<int64_t>(2, (global_batch + std::max<int64_t>(1, devices) - 1) / devices);
  struct Wanted {
    std::string node, id;
    int node_index = 0;    // in the cluster
    int device = -1;       // index in the node
    std::string line;      // set when nothing is to be waited for
    bool waiting = false;  // counted in waiters_
  };
  std::vector<Wanted> wanted;
  std::optional<Graph> light;  // (made once, where a profile is asked)
  for (int i = 0; i < cluster->nodes_size(); ++i) {
    const quilt::v1::NodeInfo& node = cluster->nodes(i);
    Wanted w;
    w.node = node.node_id();
    w.node_index = i;
    for (int d = 0; d < node.devices_size() && w.device < 0; ++d) {
      if (node.devices(d).kind() == quilt::v1::DEVICE_KIND_CPU) w.device = d;
    }
    if (w.device < 0) {
      w.line = absl::StrCat(w.node,
                            ": start-up figures (no CPU device; profiling GPUs is not built yet)");
      wanted.push_back(std::move(w));
      continue;
    }
    const quilt::v1::Device& device = node.devices(w.device);
    absl::StatusOr<OneDevicePrediction> predicted = PredictOneDevice(g, device, large);
    // Profiled at fewer rows when a step of them would be long.
    int64_t rows = large;
    if (predicted.ok() && predicted->step_s > options_.max_step_s) {
      // (At least 4: the smaller run has 2 rows, as batch norm over one
      // value per channel is refused.)
      rows = std::max<int64_t>(std::min<int64_t>(4, large),
                               static_cast<int64_t>(static_cast<double>(large) *
                                                    options_.max_step_s / predicted->step_s));
    }
    const int64_t small = std::max<int64_t>(1, rows / 2);
    w.id = absl::StrCat(model, "-", w.node, "-", rows);
    bool known = false;
    {
      // Counted first, so that a plan waiting for the same profile and
      // giving up does not withdraw the question from this one.
      absl::MutexLock lock(&mu_);
      known = results_.count(w.id) > 0 || asked_.count(w.id) > 0;
      ++waiters_[w.id];
      w.waiting = true;
    }
    if (!known) {
      quilt::v1::ModelProfile p;
      p.set_profile_id(w.id);
      p.set_device(device.id());
      p.set_warmup_steps(options_.warmup_steps);
      if (predicted.ok() && device.memory_bytes() > 0 &&
          predicted->peak_bytes > device.memory_bytes()) {
        w.line = absl::StrCat(w.node, ": start-up figures (the model at ", large, " rows needs ",
                              HumanBytes(predicted->peak_bytes), " of ", device.id(), "'s ",
                              HumanBytes(device.memory_bytes()), ")");
        wanted.push_back(std::move(w));
        continue;
      }
      const double step_s =
          predicted.ok() ? predicted->step_s * static_cast<double>(rows) / large : 0;
      const int64_t measured =
          step_s > 0 ? std::clamp<int64_t>(static_cast<int64_t>(std::ceil(options_.run_s / step_s)),
                                           options_.min_steps, options_.max_steps)
                     : options_.min_steps;
      p.set_steps(measured + options_.warmup_steps);
      absl::Status st = absl::OkStatus();
      if (!light.has_value()) light = WithoutWeights(g);
      for (int64_t r : {rows, small}) {
        absl::StatusOr<quilt::v1::DistributedProgram> program = OneDeviceProgram(*light, device, r);
        if (!program.ok()) {
          st = program.status();
          break;
        }
        auto* run = p.add_runs();
        run->set_rows(r);
        run->set_program(program->SerializeAsString());
      }
      if (!st.ok()) {
        w.line =
            absl::StrCat(w.node, ": start-up figures (its profile program: ", st.message(), ")");
        wanted.push_back(std::move(w));
        continue;
      }
      absl::MutexLock lock(&mu_);
      if (results_.count(w.id) == 0 && asked_.count(w.id) == 0) {
        asked_[w.id] = w.node;
        nodes_[w.node].pending.push_back(std::move(p));
      }
    }
    wanted.push_back(std::move(w));
  }
  // Wait for every node's result, the deadline, the node to stop being
  // Ready, or the coordinator to stop; checked every quarter second.
  std::map<std::string, quilt::v1::ModelProfileResult> got;
  std::map<std::string, std::string> gave_up;  // node → why
  bool stopping = false, left = false;         // shutting down; the client left
  while (true) {
    std::vector<std::string> missing;
    {
      absl::MutexLock lock(&mu_);
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (shutdown_) return true;
        for (const Wanted& w : wanted) {
          if (w.line.empty() && !gave_up.count(w.node) && results_.count(w.id) == 0) return false;
        }
        return true;
      };
      mu_.AwaitWithDeadline(absl::Condition(&done),
                            std::min(deadline, absl::Now() + absl::Milliseconds(250)));
      left = abandoned != nullptr && abandoned();
      stopping = shutdown_ || left;
      for (const Wanted& w : wanted) {
        if (!w.line.empty() || gave_up.count(w.node)) continue;
        auto it = results_.find(w.id);
        if (it != results_.end()) {
          got[w.id] = it->second.second;
        } else {
          missing.push_back(w.node);
        }
      }
      if (missing.empty() || stopping || absl::Now() >= deadline) {
        // A failure is not kept, nor a question left unanswered, once no
        // plan waits for it: the next submission asks again.
        for (Wanted& w : wanted) {
          if (!w.waiting) continue;
          w.waiting = false;
          auto count = waiters_.find(w.id);
          if (--count->second > 0) continue;
          waiters_.erase(count);
          auto result = results_.find(w.id);
          if (result != results_.end()) {
            const quilt::v1::ModelProfileResult& r = result->second.second;
            if (!r.error().empty() || r.jobs_running() > 0) results_.erase(result);
            continue;
          }
          asked_.erase(w.id);
          auto& pending = nodes_[w.node].pending;
          pending.erase(std::remove_if(pending.begin(), pending.end(),
                                       [&](const quilt::v1::ModelProfile& p) {
                                         return p.profile_id() == w.id;
                                       }),
                        pending.end());
        }
      }
    }
    if (missing.empty() || stopping || absl::Now() >= deadline) break;
    if (ready_ != nullptr) {
      for (const std::string& node : missing) {
        if (!ready_(node)) gave_up[node] = "it stopped being Ready while profiling";
      }
    }
  }
  std::vector<std::string> lines;
  for (Wanted& w : wanted) {
    if (!w.line.empty()) {
      lines.push_back(w.line);
      continue;
    }
    auto it = got.find(w.id);
    if (it == got.end()) {
      auto why = gave_up.find(w.node);
      lines.push_back(absl::StrCat(
          w.node, ": start-up figures (",
          why != gave_up.end() ? why->second
          : left               ? "the client that asked for the plan left"
          : stopping           ? "the coordinator is stopping"
                               : absl::StrCat("no profile within ", absl::FormatDuration(timeout)),
          ")"));
      continue;
    }
    const quilt::v1::ModelProfileResult& r = it->second;
    if (!r.error().empty() || r.runs_size() != 2) {
      lines.push_back(absl::StrCat(w.node, ": start-up figures (its profile failed: ",
                                   r.error().empty() ? "incomplete" : r.error(), ")"));
      continue;
    }
    quilt::v1::NodeInfo* node = cluster->mutable_nodes(w.node_index);
    const quilt::v1::Device device = node->devices(w.device);
    auto run = [](const quilt::v1::ModelProfileResult::Run& x) {
      return ProfileRun{x.rows(), x.step_time_s(), x.compute_time_s()};
    };
    // No op runs faster than a large GEMM: a fit far beyond the node's
    // start-up GEMM rate explains the runs with fixed times, not work.
    absl::StatusOr<DeviceCalibration> c = FitCalibration(g, device, run(r.runs(0)), run(r.runs(1)),
                                                         4 * device.measured_gemm_flops_per_s());
    if (!c.ok()) {
      lines.push_back(
          absl::StrCat(w.node, ": start-up figures (its profile: ", c.status().message(), ")"));
      continue;
    }
    for (auto& d : *node->mutable_devices()) {
      if (d.kind() == quilt::v1::DEVICE_KIND_CPU) d = Calibrated(d, *c);
    }
    if (loaded != nullptr && r.jobs_running() > 0) loaded->insert(w.node);
    lines.push_back(absl::StrFormat(
        "%s: profiled on %s (%d and %d rows: %s and %s a step) — %s GFLOP/s, %s µs per op, "
        "%.0f µs per step%s",
        w.node, device.id(), r.runs(0).rows(), r.runs(1).rows(), Ms(r.runs(0).step_time_s()),
        Ms(r.runs(1).step_time_s()), Digits3(c->flops_per_s / 1e9), Digits3(c->op_overhead_s * 1e6),
        c->step_overhead_s * 1e6,
        r.jobs_running() > 0
            ? absl::StrCat(" (measured while ", r.jobs_running(), " job(s) ran there; not kept)")
            : ""));
  }
  for (const std::string& l : lines) QLOG_INFO("calibration {}", l);
  return lines;
}

}  // namespace quilt
