#include "src/planner/search_space.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <system_error>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/planner/baselines.h"
#include "src/planner/lower.h"
#include "src/sim/simulator.h"

namespace quilt {

void SetServerNode(PlanState* s, int k, int node) {
  if (node < 0 && s->ServerNode(k) < 0) return;
  if (s->server_node.size() < s->place.size()) s->server_node.resize(s->place.size(), -1);
  s->server_node[k] = node;
}

std::string MethodLabel(Method m) {
  switch (m) {
    case Method::kRing:
      return "ring all-reduce";
    case Method::kHierarchical:
      return "hierarchical all-reduce";
    case Method::kParameterServer:
      return "parameter servers on its devices";
    case Method::kTree:
      return "tree all-reduce";
  }
  return "?";
}

std::string FusionLabel(int64_t fusion) {
  if (fusion < 0) return "the all-reduced gradients of each group in one collective";
  if (fusion == 0) return "one collective per gradient";
  const std::string size =
      fusion % (1 << 20) == 0 ? absl::StrCat(fusion >> 20, " MiB") : absl::StrCat(fusion, " bytes");
  return absl::StrCat("buckets of ", size,
                      " filled as gradients become ready, larger gradients "
                      "summed in slices of ",
                      size);
}

bool Score::BetterThan(const Score& o) const {
  if (feasible() != o.feasible()) return feasible();
  if (!feasible()) return overflow_bytes < o.overflow_bytes;
  return time_s < o.time_s;
}

quilt::v1::AggregationMethod ProtoMethod(Method m) {
  switch (m) {
    case Method::kHierarchical:
      return quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE;
    case Method::kParameterServer:
      return quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER;
    case Method::kTree:
      return quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE;
    default:
      return quilt::v1::AGGREGATION_METHOD_RING_ALLREDUCE;
  }
}

SearchSpace::SearchSpace(const Topology& topo, const CostModel& fine_cost,
                         const CoarseModel& coarse, int64_t batch, double memory_fraction)
    : topo_(topo),
      coarse_(coarse),
      batch_(batch),
      memory_fraction_(memory_fraction),
      bound_(coarse, topo, batch),
      memory_bound_(coarse, topo, batch) {
  bound_.set_servers([this](const PlanState& state, int k) { return Servers(state, k); });
  const int n = topo.num_devices();
  for (int d = 0; d < n; ++d) speed_.push_back(fine_cost.speed(d).flops_per_s);
  auto weighted = [this](std::vector<int> devices, const std::string& label) {
    return AddOption(BySpeed(std::move(devices), label));
  };
  std::vector<int> all(n);
  for (int d = 0; d < n; ++d) all[d] = d;
  weighted(all, n == 1 ? std::string("its only device")
                       : absl::StrCat("all ", n, " devices (by speed)"));
  std::vector<int> by_speed = all;
  std::stable_sort(by_speed.begin(), by_speed.end(),
                   [&](int a, int b) { return speed_[a] > speed_[b]; });
  // (Where the k-th device is no faster than the next, the set is the
  // first k of equals: named by its devices.)
  for (int k = 2; k < n; k *= 2) {
    const bool tie = speed_[by_speed[k - 1]] <= speed_[by_speed[k]];
    std::string label = absl::StrCat("fastest ", k, " devices");
    if (tie) {
      std::vector<std::string> ids;
      for (int i = 0; i < k; ++i) ids.push_back(topo.device(by_speed[i]).id);
      label = k <= 4 ? absl::StrCat("devices ", absl::StrJoin(ids, ", "))
                     : absl::StrCat(k, " devices: ", ids.front(), ", …, ", ids.back());
    }
    subset_options_.push_back(
        weighted(std::vector<int>(by_speed.begin(), by_speed.begin() + k), label));
  }
  if (topo.num_nodes() > 1) {
    std::vector<std::pair<double, int>> nodes;
    for (int node = 0; node < topo.num_nodes(); ++node) {
      double s = 0;
      for (int d : topo.NodeDevices(node)) s += speed_[d];
      nodes.push_back({-s, node});
      if (topo.NodeDevices(node).size() > 1)
        subset_options_.push_back(weighted(topo.NodeDevices(node), "node " + topo.node_id(node)));
    }
    std::sort(nodes.begin(), nodes.end());
    std::vector<int> devices;
    for (size_t j = 0; j + 1 < nodes.size(); ++j) {
      for (int d : topo.NodeDevices(nodes[j].second)) devices.push_back(d);
      if (j >= 1) {
        subset_options_.push_back(weighted(devices, absl::StrCat("fastest ", j + 1, " nodes")));
      }
    }
    // Server nodes: the fastest NICs, then the fastest devices (`nodes` is
    // by speed, and the sort is stable).
    std::vector<std::pair<double, int>> by_nic;
    for (const auto& [minus_speed, node] : nodes) {
      const double nic = topo.spec().nodes(node).nic().bandwidth_bytes_per_s();
      by_nic.push_back({-(nic > 0 ? nic : kDefaultNicBytesPerS), node});
    }
    std::stable_sort(by_nic.begin(), by_nic.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t j = 0; j < by_nic.size() && j < 2; ++j) server_nodes_.push_back(by_nic[j].second);
  }
  // Without the device whose slowest link is far slower than the others'
  // (one behind a slow pair link or a slow bus): every set above includes
  // both ends of such a link.
  if (n > 2) {
    // (its slowest link's bandwidth, its speed, device): of two ends of one
    // slow link, the slower goes.
    std::vector<std::tuple<double, double, int>> worst;
    for (int d = 0; d < n; ++d) {
      double w = std::numeric_limits<double>::infinity();
      for (int e = 0; e < n; ++e) {
        if (e != d) w = std::min(w, topo.PathBetween(d, e).bandwidth_bytes_per_s);
      }
      worst.push_back({w, speed_[d], d});
    }
    std::sort(worst.begin(), worst.end());
    // The slowest device's slowest link against the typical link (the
    // median pair: of three devices, two are ends of one slow link, so the
    // typical device's slowest link would be it).
    std::vector<double> pairs;
    for (int d = 0; d < n; ++d) {
      for (int e = d + 1; e < n; ++e) pairs.push_back(topo.PathBetween(d, e).bandwidth_bytes_per_s);
    }
    std::nth_element(pairs.begin(), pairs.begin() + pairs.size() / 2, pairs.end());
    const double typical = pairs[pairs.size() / 2];
    if (std::get<0>(worst[0]) * 4 < typical) {
      const int out = std::get<2>(worst[0]);
      std::vector<int> rest;
      for (int d = 0; d < n; ++d) {
        if (d != out) rest.push_back(d);
      }
      weighted(rest, "all but " + topo.device(out).id + " (slow links)");
    }
  }
  // Without the nodes behind slow NICs (a node whose best path to another
  // node is far slower than the typical node's): the sets above go by
  // compute speed alone, and a fast node on a slow NIC holds every step.
  if (topo.num_nodes() > 2) {
    const int nn = topo.num_nodes();
    std::vector<double> best(nn, 0);
    for (int a = 0; a < nn; ++a) {
      for (int b = 0; b < nn; ++b) {
        if (a == b || topo.NodeDevices(a).empty() || topo.NodeDevices(b).empty()) continue;
        best[a] = std::max(
            best[a],
            topo.PathBetween(topo.NodeDevices(a)[0], topo.NodeDevices(b)[0]).bandwidth_bytes_per_s);
      }
    }
    std::vector<double> sorted = best;
    std::sort(sorted.begin(), sorted.end());
    const double typical = sorted[sorted.size() / 2];
    std::vector<int> rest;
    std::vector<std::string> left_out;
    for (int node = 0; node < nn; ++node) {
      if (best[node] * 4 < typical) {
        left_out.push_back(topo.node_id(node));
      } else {
        for (int d : topo.NodeDevices(node)) rest.push_back(d);
      }
    }
    if (!left_out.empty() && !rest.empty()) {
      weighted(rest, absl::StrCat("all but ", left_out.size() == 1 ? "node " : "nodes ",
                                  absl::StrJoin(left_out, ", "), " (slow NICs)"));
    }
  }
  // Only the nodes on the faster NICs: for each NIC speed but the slowest,
  // the devices of the nodes at least that fast. A gradient all-reduce over
  // every node goes at its slowest NIC's pace; the sets above go by compute
  // speed, and the one above leaves out only nodes far slower than the
  // typical one. (400 GPUs on 10, 25 and 100 Gbit/s NICs: bert_large over
  // the 100 Gbit/s nodes alone steps in half the time of every node.)
  if (topo.num_nodes() > 2) {
    std::vector<double> nic(topo.num_nodes(), 0);
    std::vector<double> tiers;
    for (int node = 0; node < topo.num_nodes(); ++node) {
      const int devices = static_cast<int>(topo.NodeDevices(node).size());
      if (devices == 0) continue;
      nic[node] = topo.NodeBytesPerS(node, devices);
      tiers.push_back(nic[node]);
    }
    std::sort(tiers.begin(), tiers.end());
    tiers.erase(std::unique(tiers.begin(), tiers.end()), tiers.end());
    for (size_t t = 1; t < tiers.size(); ++t) {
      std::vector<int> devices;
      for (int node = 0; node < topo.num_nodes(); ++node) {
        if (nic[node] < tiers[t]) continue;
        for (int d : topo.NodeDevices(node)) devices.push_back(d);
      }
      if (devices.size() >= 2) {
        weighted(devices,
                 absl::StrFormat("nodes on NICs of %.3g Gbit/s or more", tiers[t] * 8 / 1e9));
      }
    }
  }
  // Single devices: every one on small clusters, the fastest of each node
  // on large ones.
  if (n <= 16) {
    for (int d = 0; d < n; ++d) SingleOption(d);
  } else {
    for (int node = 0; node < topo.num_nodes(); ++node) {
      const auto& ds = topo.NodeDevices(node);
      SingleOption(*std::max_element(ds.begin(), ds.end(),
                                     [&](int a, int b) { return speed_[a] < speed_[b]; }));
    }
  }
}

PlacementOption SearchSpace::BySpeed(std::vector<int> devices, std::string label) const {
  PlacementOption o;
  double fastest = 0;
  for (int d : devices) fastest = std::max(fastest, speed_[d]);
  std::sort(devices.begin(), devices.end());
  for (int d : devices) {
    o.replicas.push_back(
        {d, std::max(1, static_cast<int>(std::lround(8 * speed_[d] / std::max(fastest, 1.0))))});
  }
  o.label = std::move(label);
  return o;
}

int SearchSpace::AddOption(PlacementOption option) {
  std::sort(option.replicas.begin(), option.replicas.end());
  // One device is one placement whatever its count (a set of one device by
  // speed is the device itself: on one device the space has one option).
  if (option.replicas.size() == 1) option.replicas[0].second = 1;
  for (size_t i = 0; i < options_.size(); ++i) {
    if (options_[i].replicas == option.replicas) return static_cast<int>(i);
  }
  options_.push_back(std::move(option));
  return static_cast<int>(options_.size()) - 1;
}

int SearchSpace::SingleOption(int device) {
  PlacementOption o;
  o.replicas = {{device, 1}};
  o.label = topo_.device(device).id;
  return AddOption(std::move(o));
}

std::vector<Method> SearchSpace::MethodsFor(int option) const {
  const PlacementOption& o = options_[option];
  if (o.single()) return {Method::kRing};
  std::vector<Method> out = {Method::kRing, Method::kParameterServer};
  // Over three or more members a tree pays fewer latencies than a ring.
  if (o.replicas.size() >= 3) out.push_back(Method::kTree);
  int first_node = topo_.device(o.replicas.front().first).node;
  for (const auto& [d, r] : o.replicas) {
    if (topo_.device(d).node != first_node) {
      out.push_back(Method::kHierarchical);
      break;
    }
  }
  return out;
}

double SearchSpace::Estimate(int option) const {
  const PlacementOption& o = options_[option];
  const Grouping& grouping = coarse_.grouping();
  double seconds = 0;
  int64_t params = 0;
  for (int k = 0; k < coarse_.num_groups(); ++k) {
    seconds += grouping.seconds[k];
    params += grouping.param_bytes[k];
  }
  // Seconds per row on a device of speed 1 (the groups' times are device 0's).
  const double row_work = seconds / static_cast<double>(grouping.rows) * speed_[0];
  int total = 0;
  for (const auto& [d, r] : o.replicas) total += r;
  double compute = 0;
  double link = std::numeric_limits<double>::infinity();
  const size_t m = o.replicas.size();
  for (size_t i = 0; i < m; ++i) {
    const auto [d, r] = o.replicas[i];
    const double rows = static_cast<double>(batch_) * r / std::max(1, total);
    compute = std::max(compute, rows * row_work / std::max(speed_[d], 1.0));
    if (m > 1) {
      link =
          std::min(link, topo_.PathBetween(d, o.replicas[(i + 1) % m].first).bandwidth_bytes_per_s);
    }
  }
  const double ring = m > 1 ? 2.0 * static_cast<double>(params) * static_cast<double>(m - 1) /
                                  static_cast<double>(m) / std::max(link, 1.0)
                            : 0.0;
  return std::max(compute, ring);
}

PlanState SearchSpace::FromDataParallel(const quilt::v1::Strategy& s) {
  PlacementOption o;
  for (const auto& r : s.groups(0).replicas()) {
    if (r.replicas() > 0) o.replicas.push_back({topo_.DeviceIndex(r.device()), r.replicas()});
  }
  o.label = s.name() + " split";
  const int option = AddOption(o);
  // (A split another option has already: its label names this one too.)
  std::string& label = options_[option].label;
  if (label != o.label && !absl::StrContains(label, s.name())) {
    label = absl::EndsWith(label, " split")
                ? absl::StrCat(label.substr(0, label.size() - 6), " / ", o.label)
                : absl::StrCat(label, ", the ", o.label);
  }
  Method m = Method::kRing;
  if (s.aggregations_size() > 0) {
    switch (s.aggregations(0).method()) {
      case quilt::v1::AGGREGATION_METHOD_PARAMETER_SERVER:
        m = Method::kParameterServer;
        break;
      case quilt::v1::AGGREGATION_METHOD_HIERARCHICAL_ALLREDUCE:
        m = Method::kHierarchical;
        break;
      case quilt::v1::AGGREGATION_METHOD_TREE_ALLREDUCE:
        m = Method::kTree;
        break;
      default:
        break;
    }
  }
  PlanState state;
  state.place.assign(coarse_.num_groups(), option);
  state.method.assign(coarse_.num_groups(), m);
  state.order = s.order();
  return state;
}

quilt::v1::Strategy SearchSpace::CoarseStrategy(const PlanState& state) const {
  quilt::v1::Strategy s;
  s.set_name("heterog");
  s.set_order(state.order);
  for (int k = 0; k < coarse_.num_groups(); ++k) {
    auto* g = s.add_groups();
    g->set_group(k);
    g->add_ops(coarse_.ForwardOp(k));
    const PlacementOption& o = options_[state.place[k]];
    std::vector<int> devices;
    for (const auto& [d, r] : o.replicas) {
      auto* rep = g->add_replicas();
      rep->set_device(topo_.device(d).id);
      rep->set_replicas(r);
      devices.push_back(d);
    }
    const std::vector<int> servers = Servers(state, k);
    for (const std::string& p : coarse_.FlatParameters(k)) {
      auto* a = s.add_aggregations();
      a->set_parameter(p);
      a->set_method(ProtoMethod(state.method[k]));
      if (state.method[k] == Method::kParameterServer) {
        for (int d : servers) a->add_servers(topo_.device(d).id);
      }
    }
  }
  return s;
}

quilt::v1::Strategy SearchSpace::FineStrategy(const Graph& fine, const PlanState& state,
                                              const std::string& name, int64_t fusion) const {
  quilt::v1::Strategy s;
  s.set_name(name);
  s.set_global_batch(batch_);
  s.set_order(state.order);
  const Grouping& grouping = coarse_.grouping();
  const std::map<std::string, int> buckets =
      fusion > 0 ? GradientBuckets(fine, fusion) : std::map<std::string, int>{};
  for (int k = 0; k < coarse_.num_groups(); ++k) {
    auto* g = s.add_groups();
    g->set_group(k);
    for (int i : grouping.forward_ops[k]) g->add_ops(fine.ops[i].name);
    const PlacementOption& o = options_[state.place[k]];
    std::vector<int> devices;
    for (const auto& [d, r] : o.replicas) {
      auto* rep = g->add_replicas();
      rep->set_device(topo_.device(d).id);
      rep->set_replicas(r);
      devices.push_back(d);
    }
    std::map<std::string, std::vector<int>> servers;
    if (state.method[k] == Method::kParameterServer) {
      servers = AssignServers(fine, grouping.params[k], Servers(state, k));
    }
    for (const std::string& p : grouping.params[k]) {
      auto* a = s.add_aggregations();
      a->set_parameter(p);
      a->set_method(ProtoMethod(state.method[k]));
      if (state.method[k] == Method::kParameterServer) {
        for (int d : servers[p]) a->add_servers(topo_.device(d).id);
      } else if (fusion == kFusePerGroup) {
        a->set_bucket(k + 1);  // the group's gradients in one collective
      } else if (fusion > 0) {
        auto b = buckets.find(p);
        if (b != buckets.end()) a->set_bucket(b->second);
        a->set_partition_bytes(fusion);
      }
    }
  }
  return s;
}

bool SearchSpace::OnlyOn(int option, int node) const {
  std::vector<int> devices;
  for (const auto& [d, r] : options_[option].replicas) devices.push_back(d);
  std::sort(devices.begin(), devices.end());
  std::vector<int> on_node = topo_.NodeDevices(node);
  std::sort(on_node.begin(), on_node.end());
  return devices == on_node;
}

std::string SearchSpace::AggregationLabel(const PlanState& state, int k) const {
  if (options_[state.place[k]].single()) return "none (one device)";
  if (coarse_.grouping().params[k].empty()) return "none (no parameters)";
  if (state.method[k] == Method::kParameterServer && state.ServerNode(k) >= 0) {
    return "parameter servers on node " + topo_.node_id(state.ServerNode(k));
  }
  return MethodLabel(state.method[k]);
}

std::vector<int> SearchSpace::Servers(const PlanState& state, int k) const {
  // As many servers as the group's parameters fill at an even share of all
  // parameter bytes over the serving devices (the group's own, or the
  // server node's), rotating through them group by group so that groups
  // sharing devices spread their servers.
  std::vector<int> serving;
  if (state.ServerNode(k) >= 0) {
    serving = topo_.NodeDevices(state.ServerNode(k));
  } else {
    for (const auto& [d, r] : options_[state.place[k]].replicas) serving.push_back(d);
  }
  const int n = static_cast<int>(serving.size());
  const Grouping& grouping = coarse_.grouping();
  int64_t total = 0;
  for (int64_t b : grouping.param_bytes) total += b;
  const int64_t share = std::max<int64_t>(1, total / n);
  const int pieces =
      static_cast<int>(std::clamp<int64_t>((grouping.param_bytes[k] + share - 1) / share, 1, n));
  int offset = 0;
  for (int j = 0; j < k; ++j)
    offset += static_cast<int>(grouping.param_bytes[j] * n / std::max<int64_t>(1, total)) + 1;
  std::vector<int> out;
  for (int i = 0; i < pieces; ++i) out.push_back(serving[(offset + i) % n]);
  return out;
}

std::string SearchSpace::Key(const PlanState& state) const {
  std::string key;
  key.reserve(state.place.size() * 3 + 1);
  key.push_back(static_cast<char>(state.order));
  bool servers = false;
  for (size_t k = 0; k < state.place.size(); ++k) {
    key.push_back(static_cast<char>(state.place[k] & 0xff));
    key.push_back(static_cast<char>(state.place[k] >> 8));
    key.push_back(static_cast<char>(state.method[k]));
    servers |= state.ServerNode(static_cast<int>(k)) >= 0;
  }
  // Server nodes only where a group has one (a state without is keyed as
  // before they existed).
  for (size_t k = 0; servers && k < state.place.size(); ++k) {
    const int node = state.ServerNode(static_cast<int>(k)) + 1;
    key.push_back(static_cast<char>(node & 0xff));
    key.push_back(static_cast<char>(node >> 8));
  }
  return key;
}

absl::StatusOr<SimResult> SearchSpace::Run(const PlanState& state, const CostModel& cost,
                                           std::unique_ptr<char[]>* block) const {
  const quilt::v1::Strategy s = CoarseStrategy(state);
  // The program goes into `block` (kept from one plan to the next: fresh
  // memory for every plan costs page faults), and blocks of its own past it.
  // (Left uninitialized: only the pages the programs use are touched.)
  if (*block == nullptr) *block = std::unique_ptr<char[]>(new char[kArenaBlockBytes]);
  google::protobuf::ArenaOptions arena_options;
  arena_options.initial_block = block->get();
  arena_options.initial_block_size = kArenaBlockBytes;
  google::protobuf::Arena arena(arena_options);
  SimOptions sim_options;
  sim_options.index = &coarse_.index();
  ASSIGN_OR_RETURN(quilt::v1::DistributedProgram * p,
                   LowerOnArena(coarse_.index(), s, topo_, &cost, batch_, &arena));
  return Simulate(*p, coarse_.graph(), topo_, cost, sim_options);
}

absl::StatusOr<Score> SearchSpace::Compute(const PlanState& state, const CostModel& cost,
                                           std::unique_ptr<char[]>* block) const {
  ASSIGN_OR_RETURN(SimResult r, Run(state, cost, block));
  Score score;
  score.time_s = r.step_time_s;
  score.fits_whole = true;
  for (const DeviceUsage& u : r.devices) {
    if (u.capacity_bytes <= 0) continue;
    if (u.peak_memory_bytes > u.capacity_bytes) score.fits_whole = false;
    const double cap = Cap(topo_.DeviceIndex(u.device), static_cast<double>(u.capacity_bytes));
    if (static_cast<double>(u.peak_memory_bytes) > cap) {
      score.overflow_bytes += static_cast<double>(u.peak_memory_bytes) - cap;
    }
  }
  return score;
}

double SearchSpace::Cap(int d, double capacity) const {
  const double share = memory_fraction_ * capacity;
  return d >= 0 && d < static_cast<int>(caps_.size()) ? std::max(share, caps_[d]) : share;
}

absl::StatusOr<std::vector<double>> SearchSpace::CoarsePeaks(const PlanState& state) {
  ASSIGN_OR_RETURN(SimResult r, Run(state, coarse_.cost(), &blocks_[0]));
  std::vector<double> peaks(topo_.num_devices(), 0.0);
  for (const DeviceUsage& u : r.devices) {
    const int d = topo_.DeviceIndex(u.device);
    if (d >= 0) peaks[d] = static_cast<double>(u.peak_memory_bytes);
  }
  return peaks;
}

void SearchSpace::RaiseMemoryCaps(const std::vector<double>& bytes) {
  caps_ = bytes;
  cache_.clear();
  for (auto& [key, b] : bounds_) b.over_share = -1;
}

SearchSpace::Bound& SearchSpace::BoundEntry(std::string key, const PlanState& state) {
  auto [it, fresh] = bounds_.try_emplace(std::move(key), Bound{});
  if (fresh) it->second.seconds = bound_.Of(state, options_);
  return it->second;
}

double SearchSpace::BoundOf(const PlanState& state) {
  return BoundEntry(Key(state), state).seconds;
}

std::vector<double> SearchSpace::BoundsOf(const PlanState& state, int k,
                                          const std::vector<std::pair<int, Method>>& choices) {
  std::vector<double> out(choices.size(), 0.0);
  std::vector<std::string> keys(choices.size());
  std::vector<std::pair<int, Method>> fresh;
  std::vector<size_t> fresh_at;
  PlanState next = state;
  for (size_t i = 0; i < choices.size(); ++i) {
    next.place[k] = choices[i].first;
    next.method[k] = choices[i].second;
    keys[i] = Key(next);
    if (auto it = bounds_.find(keys[i]); it != bounds_.end()) {
      out[i] = it->second.seconds;
    } else {
      fresh.push_back(choices[i]);
      fresh_at.push_back(i);
    }
  }
  if (fresh.empty()) return out;
  const std::vector<double> computed = bound_.OfEach(state, k, fresh, options_);
  for (size_t j = 0; j < fresh.size(); ++j) {
    const size_t i = fresh_at[j];
    out[i] =
        bounds_.try_emplace(std::move(keys[i]), Bound{computed[j], false}).first->second.seconds;
  }
  return out;
}

bool SearchSpace::CannotBeat(const PlanState& state, double time_s) {
  return RuleOut(state, time_s, /*count=*/true);
}

bool SearchSpace::StartCannotBeat(const PlanState& state, double time_s) {
  return RuleOut(state, time_s, /*count=*/false);
}

bool SearchSpace::RuleOut(const PlanState& state, double time_s, bool count) {
  // (A state seen before costs nothing to look at again, and is not
  // counted again: as a cached plan costs no simulation.)
  std::string key = Key(state);
  if (auto it = cache_.find(key); it != cache_.end()) {
    return it->second.feasible() && it->second.time_s >= time_s;
  }
  Bound& b = BoundEntry(std::move(key), state);
  if (b.seconds < time_s) return false;
  if (count && !b.ruled_out) ++ruled_out_;
  b.ruled_out = true;
  return true;
}

double SearchSpace::MemoryOverShare(const PlanState& state) {
  const std::vector<double>& peaks = memory_bound_.Of(state, options_);
  double over = 0;
  for (int d = 0; d < topo_.num_devices(); ++d) {
    const double capacity = static_cast<double>(topo_.device(d).proto.memory_bytes());
    if (capacity > 0) over += std::max(0.0, peaks[d] - Cap(d, capacity));
  }
  return over;
}

bool SearchSpace::MemoryCannotBeat(const PlanState& state, const Score& than) {
  std::string key = Key(state);
  if (cache_.count(key)) return false;
  Bound& b = BoundEntry(std::move(key), state);
  if (b.over_share < 0) {
    const std::vector<double>& peaks = memory_bound_.Of(state, options_);
    b.over_share = 0;
    b.over_whole = false;
    for (int d = 0; d < topo_.num_devices(); ++d) {
      const double capacity = static_cast<double>(topo_.device(d).proto.memory_bytes());
      if (capacity <= 0) continue;  // no limit
      b.over_share += std::max(0.0, peaks[d] - Cap(d, capacity));
      b.over_whole |= peaks[d] > capacity;
    }
  }
  if (!b.over_whole || b.over_share <= 0) return false;
  if (!than.feasible() && b.over_share < than.overflow_bytes) return false;
  if (!b.ruled_out) ++ruled_out_;
  b.ruled_out = true;
  return true;
}

absl::StatusOr<Score> SearchSpace::Evaluate(const PlanState& state) {
  return std::move(EvaluateAll({state})[0]);
}

std::vector<absl::StatusOr<Score>> SearchSpace::EvaluateAll(const std::vector<PlanState>& states) {
  std::vector<absl::StatusOr<Score>> out(states.size(), absl::UnknownError("not evaluated"));
  // The states not cached, each once (by key); slot[i] = state i's index
  // among them (-1: cached).
  std::vector<std::string> keys;
  std::vector<size_t> first_of;  // per state to compute: its index in `states`
  std::vector<int> slot(states.size(), -1);
  for (size_t i = 0; i < states.size(); ++i) {
    std::string key = Key(states[i]);
    if (auto it = cache_.find(key); it != cache_.end()) {
      out[i] = it->second;
      continue;
    }
    auto same = std::find(keys.begin(), keys.end(), key);
    if (same != keys.end()) {
      slot[i] = static_cast<int>(same - keys.begin());
      continue;
    }
    slot[i] = static_cast<int>(keys.size());
    keys.push_back(std::move(key));
    first_of.push_back(i);
  }
  std::vector<absl::StatusOr<Score>> computed(keys.size(), absl::UnknownError("not evaluated"));
  // This thread and one more take the states in turn, each with a cost
  // model of its own: the coarse model's here, a copy there (the composite
  // model caches sums and may not be shared between threads; the copy
  // shares its fine model, which caches nothing). Plans that simulate in
  // under parallel_above_s_ cost less than a thread's start and end; a
  // threshold of 0 always takes the second thread (tests).
  const absl::Time start = absl::Now();
  bool parallel = keys.size() > 1 &&
                  (parallel_above_s_ <= 0 ||
                   (std::thread::hardware_concurrency() > 1 && compute_s_ > parallel_above_s_));
  std::atomic<size_t> next{0};
  auto work = [&](const CostModel& cost, std::unique_ptr<char[]>* block) {
    for (size_t k; (k = next++) < keys.size();)
      computed[k] = Compute(states[first_of[k]], cost, block);
  };
  std::thread other;
  if (parallel) {
    if (second_cost_ == nullptr) second_cost_ = std::make_unique<CostModel>(coarse_.cost());
    try {
      // (On the planner's clock too: its simulations charge it.)
      other = std::thread([&, clock = WorkClock::Current()] {
        const WorkClock::Scope scope(clock);
        work(*second_cost_, &blocks_[1]);
      });
    } catch (const std::system_error&) {
      parallel = false;  // no thread to be had (a process limit): this one does all
    }
  }
  work(coarse_.cost(), &blocks_[0]);
  if (other.joinable()) other.join();
  if (!keys.empty()) {
    // Per plan, as if one thread had simulated them all: the moving
    // average sees the plans' cost, not the threads' speed-up.
    const double each = absl::ToDoubleSeconds(absl::Now() - start) /
                        static_cast<double>(parallel ? (keys.size() + 1) / 2 : keys.size());
    compute_s_ = compute_s_ == 0 ? each : 0.8 * compute_s_ + 0.2 * each;
  }
  evaluations_ += static_cast<int64_t>(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    if (computed[k].ok()) cache_.emplace(keys[k], *computed[k]);
  }
  for (size_t i = 0; i < states.size(); ++i) {
    if (slot[i] >= 0) out[i] = computed[slot[i]];
  }
  return out;
}

}  // namespace quilt
