#include "src/coordinator/link_probes.h"

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"

namespace quilt {
namespace {

constexpr absl::Duration kRetryAfter = absl::Minutes(1);

}  // namespace

LinkProbes::LinkProbes(NodeRegistry* registry, Clock* clock, int64_t probe_bytes)
    : registry_(registry), clock_(clock), probe_bytes_(probe_bytes) {}

void LinkProbes::OnHeartbeat(const quilt::v1::HeartbeatRequest& request,
                             quilt::v1::HeartbeatResponse* response) {
  const std::string& me = request.node_id();
  std::map<std::string, quilt::v1::NodeStatus> ready;
  for (quilt::v1::NodeStatus& n : registry_->ListNodes()) {
    if (n.state() == quilt::v1::NODE_STATE_READY && !n.info().address().empty()) {
      ready[n.info().node_id()] = std::move(n);
    }
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  for (const quilt::v1::LinkProbeResult& r : request.probe_results()) {
    auto it = pairs_.find({me, r.peer_node()});
    if (it == pairs_.end() || it->second.probe_id != r.probe_id()) continue;
    Pair& p = it->second;
    p.probe_id.clear();
    if (!r.error().empty() || r.bandwidth_bytes_per_s() <= 0) {
      QLOG_WARN("link probe {} → {} failed: {}", me, r.peer_node(), r.error());
      continue;  // retried after kRetryAfter
    }
    p.measured = true;
    p.link.set_bandwidth_bytes_per_s(r.bandwidth_bytes_per_s());
    p.link.set_latency_s(r.latency_s());
    p.link.set_kind("measured");
    QLOG_INFO("link {} ↔ {} measured: {:.3g} GB/s, {:.3g} ms", me, r.peer_node(),
              r.bandwidth_bytes_per_s() / 1e9, r.latency_s() * 1e3);
  }
  auto self = ready.find(me);
  if (self == ready.end()) return;
  // A probe in flight from this node: wait for it (or for it to be lost).
  for (const auto& [key, p] : pairs_) {
    if (key.first == me && !p.probe_id.empty() && now - p.asked < kRetryAfter) return;
  }
  for (const auto& [peer, status] : ready) {
    if (peer <= me) continue;  // the smaller id probes
    Pair& p = pairs_[{me, peer}];
    const bool restarted = p.src_incarnation != self->second.incarnation() ||
                           p.dst_incarnation != status.incarnation();
    if (restarted) {
      p.measured = false;
      p.probe_id.clear();
      p.asked = absl::InfinitePast();
      p.src_incarnation = self->second.incarnation();
      p.dst_incarnation = status.incarnation();
    }
    if (p.measured || now - p.asked < kRetryAfter) continue;
    p.asked = now;
    p.probe_id = absl::StrCat("probe-", next_id_++);
    quilt::v1::LinkProbe* probe = response->add_probes();
    probe->set_probe_id(p.probe_id);
    probe->set_peer_node(peer);
    probe->set_peer_address(status.info().address());
    probe->set_bytes(probe_bytes_);
    return;  // one at a time
  }
}

std::vector<quilt::v1::MeasuredLink> LinkProbes::Links() const {
  absl::MutexLock lock(&mu_);
  std::vector<quilt::v1::MeasuredLink> out;
  for (const auto& [key, p] : pairs_) {
    if (!p.measured) continue;
    quilt::v1::MeasuredLink l;
    l.set_src_node(key.first);
    l.set_dst_node(key.second);
    *l.mutable_link() = p.link;
    out.push_back(std::move(l));
  }
  return out;
}

void LinkProbes::AddTo(quilt::v1::ClusterSpec* spec) const {
  std::map<std::string, const quilt::v1::NodeInfo*> nodes;
  for (const auto& n : spec->nodes()) nodes[n.node_id()] = &n;
  std::vector<quilt::v1::PairLink> add;
  for (const quilt::v1::MeasuredLink& l : Links()) {
    auto a = nodes.find(l.src_node()), b = nodes.find(l.dst_node());
    if (a == nodes.end() || b == nodes.end()) continue;
    for (const auto& da : a->second->devices()) {
      for (const auto& db : b->second->devices()) {
        for (const auto& [src, dst] : {std::pair(da.id(), db.id()), std::pair(db.id(), da.id())}) {
          quilt::v1::PairLink p;
          p.set_src_device(src);
          p.set_dst_device(dst);
          *p.mutable_link() = l.link();
          add.push_back(std::move(p));
        }
      }
    }
  }
  for (auto& p : add) *spec->add_pair_links() = std::move(p);
}

}  // namespace quilt
