#include "src/planner/estimate_many.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/heartbeat.h"
#include "src/common/status.h"
#include "src/common/work_clock.h"
#include "src/planner/placement.h"

namespace quilt {

namespace {

// On the planner's clock, strategies that may be refused are simulated in
// rounds of this many, each begun where the last left the clock affording
// more (rounds, not one at a time: two cores each).
constexpr size_t kRound = 2;

// `s` without its name, each group's replica counts (where it sets no
// weight-gradient split) replaced by the rows of the global batch `batch`
// they give its devices, those given none left out: placing a group reads
// its counts only through those rows (SplitBatch, Place), so counts of 1
// each and of 32 each place alike, as do speed-derived counts that round
// to the even split's rows.
quilt::v1::Strategy Canonical(const quilt::v1::Strategy& s, int64_t batch) {
  quilt::v1::Strategy c = s;
  c.clear_name();
  if (batch <= 0) return c;
  for (quilt::v1::GroupPlacement& g : *c.mutable_groups()) {
    if (!g.weight_gradient_replicas().empty()) continue;
    // (Entries by their place in the group, devices as named.)
    std::vector<std::pair<int, int>> counts;
    for (int k = 0; k < g.replicas_size(); ++k) {
      if (g.replicas(k).replicas() > 0) counts.push_back({k, g.replicas(k).replicas()});
    }
    if (counts.empty()) continue;  // (refused by the lowering either way)
    google::protobuf::RepeatedPtrField<quilt::v1::DeviceReplicas> rows;
    for (const Slice& r : SplitBatch(counts, batch)) {
      quilt::v1::DeviceReplicas* d = rows.Add();
      d->set_device(g.replicas(r.device).device());
      d->set_replicas(static_cast<int32_t>(r.end - r.begin));
    }
    *g.mutable_replicas() = std::move(rows);
  }
  return c;
}

// Per strategy of `list`, the first earlier one that is the same plan but
// for its name (the even and speed-proportional splits over devices of one
// speed) at global batch `batch`, or -1: it is not simulated again, but
// copied.
std::vector<int> SamePlans(const std::vector<NamedStrategy>& list, int64_t batch) {
  std::vector<int> same(list.size(), -1);
  absl::flat_hash_map<std::string, int> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].infeasible_reason.empty()) continue;
    // (A Strategy has no maps: its bytes are the same for the same plan,
    // as SameSplit in memory_share.cc compares them.)
    auto [it, fresh] =
        seen.emplace(Canonical(list[i].strategy, batch).SerializeAsString(), static_cast<int>(i));
    if (!fresh) same[i] = it->second;
  }
  return same;
}

// `from` (simulated as another strategy, the same plan) as `ns`: its name
// and its own replica counts.
Evaluated Renamed(const Evaluated& from, const NamedStrategy& ns) {
  Evaluated e = from;
  e.estimate.set_name(ns.name);
  for (quilt::v1::Strategy* s : {e.estimate.mutable_strategy(),
                                 e.program.empty() ? nullptr : e.program->mutable_strategy()}) {
    if (s == nullptr) continue;
    s->set_name(ns.name);
    *s->mutable_groups() = ns.strategy.groups();
  }
  return e;
}

}  // namespace

absl::Status EstimateMany(const GraphIndex& index, const Topology& topology, const CostModel& cost,
                          const std::vector<NamedStrategy>& list, const EstimateManyOptions& o,
                          std::map<std::string, Evaluated>* done) {
  if (list.empty()) return absl::OkStatus();
  // (The planner's clock, work_clock.h: read from the heartbeat's thread
  // too, and installed on the pool's.)
  WorkClock* const clock = WorkClock::Current();
  auto since = [&] {
    return absl::ToDoubleSeconds((clock == nullptr ? absl::Now() : clock->Now()) - o.start);
  };
  const std::vector<int> same = SamePlans(list, o.batch);
  auto say_same = [&](size_t i) {
    o.progress(absl::StrFormat("%s is the plan of %s: simulated once (%.1f s so far)", list[i].name,
                               list[same[i]].name, since()));
  };
  if (o.progress && !o.may_begin) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (same[i] >= 0) {
        say_same(i);
      } else {
        o.progress(absl::StrFormat("simulating %s (%.1f s so far)", list[i].name, since()));
      }
    }
  }
  // Lowering and simulation only read the graph, topology and cost model:
  // one strategy per thread.
  std::vector<absl::Status> status(list.size());
  std::vector<Evaluated> out(list.size());
  // Which are being simulated, for the lines that say so while they run
  // (and which were begun at all).
  std::mutex running_mu;
  std::vector<bool> running(list.size(), false);
  std::vector<bool> begun(list.size(), false);
  // Says it is begun (where some may not be) and marks it running; under
  // running_mu.
  auto begin = [&](size_t i) {
    if (o.may_begin && o.progress) {
      o.progress(absl::StrFormat("simulating %s (%.1f s so far)", list[i].name, since()));
    }
    running[i] = true;
    begun[i] = true;
  };
  auto simulate = [&](size_t i) {
    // (This one's work alone, while others charge the clock too.)
    const WorkTimer began(/*own_thread=*/true);
    absl::StatusOr<quilt::v1::StrategyEstimate> e =
        EstimateOnArena(index, topology, cost, list[i], o.batch, o.lower_bound, &out[i].program,
                        &out[i].sim, o.trace, o.both_orders);
    out[i].wall_s = began.Seconds();
    if (e.ok()) out[i].estimate = std::move(*e);
    status[i] = e.status();
    std::lock_guard<std::mutex> lock(running_mu);
    running[i] = false;
  };
  // `items` over at most `threads` threads, this one among them; with
  // `ask`, each asks may_begin as it is taken.
  auto run = [&](const std::vector<size_t>& items, size_t threads, bool ask) {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next++) < items.size();) {
        const size_t i = items[k];
        {
          std::lock_guard<std::mutex> lock(running_mu);
          if (ask && !o.may_begin()) continue;
          begin(i);
        }
        simulate(i);
      }
    };
    std::vector<std::thread> pool;
    for (size_t k = 1; k < std::min(threads, items.size()); ++k) {
      pool.emplace_back([&] {
        const WorkClock::Scope scope(clock);
        work();
      });
    }
    work();
    for (std::thread& t : pool) t.join();
  };
  std::vector<size_t> distinct;
  for (size_t i = 0; i < list.size(); ++i) {
    if (same[i] < 0) distinct.push_back(i);  // (the others copied below)
  }
  {
    Heartbeat still(absl::Seconds(o.progress ? o.heartbeat_s : 0), [&] {
      std::vector<std::string> names;
      // (Held while saying so: the threads say what they begin under it.)
      std::lock_guard<std::mutex> lock(running_mu);
      for (size_t i = 0; i < list.size(); ++i) {
        if (running[i]) names.push_back(list[i].name);
      }
      if (names.empty()) return;
      o.progress(absl::StrFormat("still simulating %s (%.1f s so far)", absl::StrJoin(names, ", "),
                                 since()));
    });
    const size_t cores = std::max(1u, std::thread::hardware_concurrency());
    if (clock != nullptr && o.may_begin) {
      // On the planner's clock, whether more may begin is asked between
      // rounds of kRound, after the round before charged it, so that the
      // answer is the same on any machine (and whatever its cores).
      for (size_t k = 0; k < distinct.size(); k += kRound) {
        if (!o.may_begin()) break;
        const std::vector<size_t> round(
            distinct.begin() + static_cast<std::ptrdiff_t>(k),
            distinct.begin() + static_cast<std::ptrdiff_t>(std::min(k + kRound, distinct.size())));
        run(round, std::min(cores, kRound), /*ask=*/false);
      }
    } else {
      run(distinct, cores, /*ask=*/static_cast<bool>(o.may_begin));
    }
  }  // (the heartbeat ends with the simulations)
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  for (size_t i = 0; i < list.size(); ++i) {
    if (same[i] < 0 || !begun[same[i]]) continue;
    if (o.progress && o.may_begin) say_same(i);
    out[i] = Renamed(out[same[i]], list[i]);
    begun[i] = true;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    if (begun[i]) (*done)[list[i].name] = std::move(out[i]);
  }
  return absl::OkStatus();
}

}  // namespace quilt
