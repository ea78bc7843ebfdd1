// Communications waiting for links (sim_state.h): path classes, their
// registration with the links they wait on, and starting the best of
// those whose links all freed.
#include <algorithm>

#include "src/sim/sim_state.h"

namespace quilt::sim_internal {

// A communication starts as soon as every link on its path is free (links
// are never reserved ahead, so no link idles while something could use
// it). Waiting communications are kept by path class (the same links:
// transfers between the same two devices, or one collective), each class
// a queue by priority; a class with waiters is registered with each of its
// links and counts how many of them are busy. When links free, the classes
// whose count falls to zero start their best waiter, highest priority
// first across them, each start making its links busy again for the rest.
// (Cost per link state change: the classes registered with that link, a
// few instructions each: a class that empties leaves its links' lists at
// once. Moving single waiters between the queues of single links instead
// cost quadratic time where many transfers cross, as parameter servers';
// walking a link's classes by priority to the best whose other links are
// free passed over hundreds waiting on other links.)
// A transfer between nodes registers only with its two devices' ports;
// the NICs between are its trunk's, shared by the classes between the
// same two nodes (on 50 nodes of 8 devices, a NIC's list held thousands of
// device pairs pushing to parameter servers; it holds at most 49 trunks).
// A class starts when its own links and its trunk's are all free.
// Collectives over the same links are one class: a batch norm's sums and
// the gradients' all-reduces of a group over hundreds of devices would
// otherwise each register with every link of the ring.
// A class of at most two own links (every transfer's) is not counted: its
// entry in each of its links' lists carries its other link, its trunk and
// its best waiter, so that when a link frees, a scan of its list reads
// only the list and the links' states (bert_large's parameter servers on
// 50 nodes of 8 devices: a port's list held a class per peer, about 120
// scanned per freed link, and counting each one at every change of the
// port cost a cache miss). A link's pair classes are kept in buckets by
// trunk, and a scan passes over a busy trunk's bucket whole.
void Sim::NewClassState(const PathWaiters& w) {
  ClassState s;
  s.pair = w.own.size() <= 2;
  class_state_.push_back(s);
}

int Sim::PathClass(int n) {
  const Node& node = nodes_[n];
  if (node.kind == Kind::kAllReduce) {
    if (collective_class_.empty()) collective_class_.assign(collectives_.size(), -1);
    int& cc = collective_class_[node.collective];
    if (cc < 0) {
      std::vector<int> links = Links(n);
      std::sort(links.begin(), links.end());
      auto [it, added] =
          link_set_class_.try_emplace(std::move(links), static_cast<int>(classes_.size()));
      if (added) {
        classes_.push_back(PathWaiters{&Links(n), Links(n)});
        NewClassState(classes_.back());
      }
      cc = it->second;
    }
    return cc;
  }
  const int64_t key = static_cast<int64_t>(node.path_from) * topo_.num_devices() + node.path_to;
  auto [it, added] = class_ids_.try_emplace(key, static_cast<int>(classes_.size()));
  if (added) {
    const std::vector<int>& links = Links(n);
    PathWaiters w{&links};
    if (links.size() >= 3) {
      w.own = {links.front(), links.back()};
      std::vector<int> between(links.begin() + 1, links.end() - 1);
      auto [t, fresh] = trunk_ids_.try_emplace(between, static_cast<int>(trunks_.size()));
      if (fresh) trunks_.push_back(Trunk{std::move(between)});
      w.trunk = t->second;
    } else {
      w.own = links;
    }
    classes_.push_back(std::move(w));
    NewClassState(classes_.back());
  }
  return it->second;
}

namespace {

// Enters `id` in the list of each of `links`, its place in each into
// `place`; returns how many of the links are busy.
int Enlist(std::vector<std::vector<LinkEntry>>& lists, const std::vector<int>& links, int id,
           const std::vector<bool>& busy, std::vector<int>* place) {
  place->resize(links.size());
  int n = 0;
  for (size_t j = 0; j < links.size(); ++j) {
    std::vector<LinkEntry>& list = lists[links[j]];
    (*place)[j] = static_cast<int>(list.size());
    list.push_back({id, static_cast<int>(j)});
    n += busy[links[j]] ? 1 : 0;
  }
  return n;
}

// Takes the entries at `place` out of the lists `list_of(j)` (j below
// `count`); the entry moved into each freed place learns it through
// `places(its id)`.
template <typename ListOf, typename Places>
void Delist(size_t count, ListOf list_of, const std::vector<int>& place, Places places) {
  for (size_t j = 0; j < count; ++j) {
    auto& list = list_of(j);
    const auto last = list.back();
    list[place[j]] = last;
    places(last.cls)[last.slot] = place[j];
    list.pop_back();
  }
}

}  // namespace

void Sim::Register(int c) {
  PathWaiters& pc = classes_[c];
  ClassState& s = class_state_[c];
  s.live = true;
  s.trunk = pc.trunk;
  if (s.pair) {
    pc.place.resize(pc.own.size());
    if (pc.bucket.empty()) {
      for (int r : pc.own) {
        std::vector<PairBucket>& buckets = link_pairs_[r];
        int b = 0;
        while (b < static_cast<int>(buckets.size()) && buckets[b].trunk != pc.trunk) ++b;
        if (b == static_cast<int>(buckets.size())) buckets.push_back(PairBucket{pc.trunk, {}});
        pc.bucket.push_back(b);
      }
    }
    for (size_t j = 0; j < pc.own.size(); ++j) {
      std::vector<PairEntry>& list = link_pairs_[pc.own[j]][pc.bucket[j]].entries;
      pc.place[j] = static_cast<int>(list.size());
      const int other = pc.own.size() == 2 ? pc.own[1 - j] : -1;
      list.push_back({c, static_cast<int>(j), other});
    }
  } else {
    s.busy = Enlist(link_classes_, pc.own, c, link_busy_, &pc.place);
  }
  if (pc.trunk >= 0) {
    Trunk& t = trunks_[pc.trunk];
    if (t.members.empty()) t.busy = Enlist(link_trunks_, t.links, pc.trunk, link_busy_, &t.place);
    pc.member_place = static_cast<int>(t.members.size());
    // (A class with a trunk has its path's two ends for its own links.)
    t.members.push_back({c, pc.own.front(), pc.own.back()});
  }
}

void Sim::Unregister(int c) {
  PathWaiters& pc = classes_[c];
  auto places = [&](int k) -> std::vector<int>& { return classes_[k].place; };
  if (class_state_[c].pair) {
    Delist(
        pc.own.size(),
        [&](size_t j) -> std::vector<PairEntry>& {
          return link_pairs_[pc.own[j]][pc.bucket[j]].entries;
        },
        pc.place, places);
  } else {
    Delist(
        pc.own.size(),
        [&](size_t j) -> std::vector<LinkEntry>& { return link_classes_[pc.own[j]]; }, pc.place,
        places);
  }
  class_state_[c].live = false;
  if (pc.trunk >= 0) {
    Trunk& t = trunks_[pc.trunk];
    const Trunk::Member last = t.members.back();
    t.members[pc.member_place] = last;
    classes_[last.cls].member_place = pc.member_place;
    t.members.pop_back();
    if (t.members.empty()) {
      Delist(
          t.links.size(),
          [&](size_t j) -> std::vector<LinkEntry>& { return link_trunks_[t.links[j]]; }, t.place,
          [&](int k) -> std::vector<int>& { return trunks_[k].place; });
    }
  }
}

void Sim::TryStartComm(int n) {
  const int c = PathClass(n);
  PathWaiters& pc = classes_[c];
  if (!class_state_[c].live) {
    bool free = true;
    for (int r : *pc.links) free = free && !link_busy_[r];
    if (free) {
      Start(n);
      return;
    }
    Register(c);
  }
  pc.waiting.push({priority_[n], -n});
  SetTop(c);
}

void Sim::SetTop(int c) {
  PathWaiters& pc = classes_[c];
  ClassState& s = class_state_[c];
  s.top = pc.waiting.top();
  if (!s.pair) return;
  for (size_t j = 0; j < pc.own.size(); ++j) {
    link_pairs_[pc.own[j]][pc.bucket[j]].entries[pc.place[j]].top = s.top;
  }
  if (pc.trunk >= 0) {
    Trunk& t = trunks_[pc.trunk];
    t.members[pc.member_place].top = s.top;
    t.max_top = std::max(t.max_top, s.top);
  }
}

bool Sim::BestOf(int r, Candidate* best) {
  bool found = false;
  auto offer = [&](const Candidate& k) {
    if (!found || k.top > best->top) *best = k;
    found = true;
  };
  for (const LinkEntry& e : link_classes_[r]) {
    const ClassState& s = class_state_[e.cls];
    if (s.busy == 0 && (s.trunk < 0 || trunks_[s.trunk].busy == 0)) {
      Candidate k;
      k.top = s.top;
      k.cls = e.cls;
      k.counted = true;
      offer(k);
    }
  }
  for (const PairBucket& b : link_pairs_[r]) {
    if (b.trunk >= 0 && trunks_[b.trunk].busy != 0) continue;
    for (const PairEntry& e : b.entries) {
      if (e.other < 0 || !link_busy_[e.other]) offer(Candidate{e.top, e.cls, r, e.other, b.trunk});
    }
  }
  for (const LinkEntry& e : link_trunks_[r]) {
    Trunk& t = trunks_[e.cls];
    if (t.busy != 0 || (found && !(t.max_top > best->top))) continue;
    std::pair<double, int> most = t.members.front().top;
    for (const Trunk::Member& m : t.members) {
      most = std::max(most, m.top);
      if ((m.own0 < 0 || !link_busy_[m.own0]) && (m.own1 < 0 || !link_busy_[m.own1])) {
        offer(Candidate{m.top, m.cls, m.own0, m.own1, e.cls});
      }
    }
    t.max_top = most;
  }
  return found;
}

void Sim::FreeLinks(int n) {
  // Each freed link's counts fall; the classes that can start are then
  // those of the freed links' lists whose links are all free. Every one of
  // them uses the freed link whose list it is in, so a start that takes
  // that link leaves none of that list's: the best class of each list is
  // kept, the best of those started, and a list's best found again only
  // where a start took another of its links. (The same classes, started in
  // the same order, as from all of them at once: starts only make links
  // busy, so a class passed over cannot become startable again here.)
  const std::vector<int>& freed = Links(n);
  for (int r : freed) {
    link_busy_[r] = false;
    for (const LinkEntry& e : link_classes_[r]) --class_state_[e.cls].busy;
    for (const LinkEntry& e : link_trunks_[r]) --trunks_[e.cls].busy;
  }
  startable_.assign(freed.size(), Candidate{});
  std::vector<bool>& live = freed_live_;
  live.assign(freed.size(), false);
  for (size_t i = 0; i < freed.size(); ++i) live[i] = BestOf(freed[i], &startable_[i]);
  for (;;) {
    int best = -1;
    for (size_t i = 0; i < freed.size(); ++i) {
      if (live[i] && (best < 0 || startable_[i].top > startable_[best].top)) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) return;
    const int c = startable_[best].cls;
    PathWaiters& pc = classes_[c];
    const int w = -pc.waiting.top().second;
    pc.waiting.pop();
    if (pc.waiting.empty()) {
      Unregister(c);
    } else {
      SetTop(c);
    }
    Start(w);
    for (size_t i = 0; i < freed.size(); ++i) {
      if (!live[i] || CanStart(startable_[i])) continue;
      live[i] = !link_busy_[freed[i]] && BestOf(freed[i], &startable_[i]);
    }
  }
}

}  // namespace quilt::sim_internal
