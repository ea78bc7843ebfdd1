#include "src/planner/estimate_many.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "src/common/heartbeat.h"
#include "src/common/status.h"

namespace quilt {

absl::Status EstimateMany(const GraphIndex& index, const Topology& topology, const CostModel& cost,
                          const std::vector<NamedStrategy>& list, const EstimateManyOptions& o,
                          std::map<std::string, Evaluated>* done) {
  if (list.empty()) return absl::OkStatus();
  auto since = [&] { return absl::ToDoubleSeconds(absl::Now() - o.start); };
  if (o.progress && !o.may_begin) {
    for (const NamedStrategy& ns : list) {
      o.progress(absl::StrFormat("simulating %s (%.1f s so far)", ns.name, since()));
    }
  }
  // Lowering and simulation only read the graph, topology and cost model:
  // one strategy per thread.
  std::vector<absl::Status> status(list.size());
  std::vector<Evaluated> out(list.size());
  std::atomic<size_t> next{0};
  // Which are being simulated, for the lines that say so while they run
  // (and which were begun at all).
  std::mutex running_mu;
  std::vector<bool> running(list.size(), false);
  std::vector<bool> begun(list.size(), false);
  auto work = [&] {
    for (size_t i; (i = next++) < list.size();) {
      {
        std::lock_guard<std::mutex> lock(running_mu);
        if (o.may_begin) {
          if (!o.may_begin()) continue;
          // (Said as each is begun: some may not be.)
          if (o.progress) {
            o.progress(absl::StrFormat("simulating %s (%.1f s so far)", list[i].name, since()));
          }
        }
        running[i] = true;
        begun[i] = true;
      }
      const absl::Time began = absl::Now();
      absl::StatusOr<quilt::v1::StrategyEstimate> e =
          EstimateOnArena(index, topology, cost, list[i], o.batch, o.lower_bound, &out[i].program,
                          &out[i].sim, o.trace, o.both_orders);
      out[i].wall_s = absl::ToDoubleSeconds(absl::Now() - began);
      if (e.ok()) out[i].estimate = std::move(*e);
      status[i] = e.status();
      std::lock_guard<std::mutex> lock(running_mu);
      running[i] = false;
    }
  };
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
    const size_t threads =
        std::min<size_t>(list.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t k = 1; k < threads; ++k) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }  // (the heartbeat ends with the simulations)
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  for (size_t i = 0; i < list.size(); ++i) {
    if (begun[i]) (*done)[list[i].name] = std::move(out[i]);
  }
  return absl::OkStatus();
}

}  // namespace quilt
