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
        class_state_.emplace_back();
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
    class_state_.emplace_back();
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

// Takes the entries at `place` out of the lists of `links`; the entry
// moved into each freed place learns it through `places(its id)`.
template <typename Places>
void Delist(std::vector<std::vector<LinkEntry>>& lists, const std::vector<int>& links,
            const std::vector<int>& place, Places places) {
  for (size_t j = 0; j < links.size(); ++j) {
    std::vector<LinkEntry>& list = lists[links[j]];
    const LinkEntry last = list.back();
    list[place[j]] = last;
    places(last.cls)[last.slot] = place[j];
    list.pop_back();
  }
}

}  // namespace

void Sim::Register(int c) {
  PathWaiters& pc = classes_[c];
  class_state_[c].live = true;
  class_state_[c].busy = Enlist(link_classes_, pc.own, c, link_busy_, &pc.place);
  class_state_[c].trunk = pc.trunk;
  if (pc.trunk >= 0) {
    Trunk& t = trunks_[pc.trunk];
    if (t.members.empty()) t.busy = Enlist(link_trunks_, t.links, pc.trunk, link_busy_, &t.place);
    pc.member_place = static_cast<int>(t.members.size());
    t.members.push_back(c);
  }
}

void Sim::Unregister(int c) {
  PathWaiters& pc = classes_[c];
  Delist(link_classes_, pc.own, pc.place,
         [&](int k) -> std::vector<int>& { return classes_[k].place; });
  class_state_[c].live = false;
  if (pc.trunk >= 0) {
    Trunk& t = trunks_[pc.trunk];
    const int last = t.members.back();
    t.members[pc.member_place] = last;
    classes_[last].member_place = pc.member_place;
    t.members.pop_back();
    if (t.members.empty()) {
      Delist(link_trunks_, t.links, t.place,
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
  class_state_[c].top = pc.waiting.top();
}

void Sim::FreeLinks(int n) {
  // The classes whose links are all free now, and the best of them. (A
  // class becomes startable once, when the last of its own links' and its
  // trunk's counts falls to zero.)
  startable_.clear();
  int best = -1;
  auto startable = [&](int c) {
    startable_.push_back(c);
    if (best < 0 || Better(c, best)) best = c;
  };
  for (int r : Links(n)) {
    link_busy_[r] = false;
    for (const LinkEntry& e : link_classes_[r]) {
      ClassState& s = class_state_[e.cls];
      if (--s.busy == 0 && (s.trunk < 0 || trunks_[s.trunk].busy == 0)) startable(e.cls);
    }
    for (const LinkEntry& e : link_trunks_[r]) {
      if (--trunks_[e.cls].busy != 0) continue;
      for (int c : trunks_[e.cls].members) {
        if (class_state_[c].busy == 0) startable(c);
      }
    }
  }
  // Starts only make links busy, so a class passed over cannot become
  // startable again here. (Usually one start takes a link every other
  // candidate needs: picking the best each time is cheaper than sorting.)
  while (best >= 0) {
    PathWaiters& pc = classes_[best];
    const int w = -pc.waiting.top().second;
    pc.waiting.pop();
    if (pc.waiting.empty()) {
      Unregister(best);
    } else {
      class_state_[best].top = pc.waiting.top();
    }
    Start(w);
    best = -1;
    size_t kept = 0;
    for (size_t i = 0; i < startable_.size(); ++i) {
      const int c = startable_[i];
      if (!Startable(c)) continue;
      startable_[kept++] = c;
      if (best < 0 || Better(c, best)) best = c;
    }
    startable_.resize(kept);
  }
}

}  // namespace quilt::sim_internal
