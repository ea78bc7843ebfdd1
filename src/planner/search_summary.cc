#include "src/planner/search_summary.h"

#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace quilt {

SearchSummaryOf SummarizeSearch(const SearchResult& sr, size_t chosen, int fallback,
                                const quilt::v1::Strategy& plan,
                                const std::map<int, std::vector<std::string>>& gathered_in,
                                int more_variants) {
  SearchSummaryOf out;
  quilt::v1::SearchSummary& summary = out.summary;
  // The groups whose weight gradients' rows the plan moved.
  std::set<int> moved_rows;
  for (const auto& group : plan.groups()) {
    if (group.weight_gradient_replicas_size() > 0) moved_rows.insert(group.group());
  }
  // The plan of a search from another seed.
  const SearchResult::OtherSearch* other = nullptr;
  for (const SearchResult::OtherSearch& s : sr.other_searches) {
    if (chosen >= s.variant && chosen < s.variant_end && fallback < 0) other = &s;
  }
  const bool from_other = other != nullptr;
  summary.set_start(from_other ? other->start : sr.start);
  summary.set_decisions_against(from_other ? other->against : sr.start);
  summary.set_groups(sr.groups);
  summary.set_plans_evaluated(sr.evaluated);
  summary.set_plans_ruled_out(sr.ruled_out);
  summary.set_search_wall_s(sr.search_wall_s);
  summary.set_stopped_by(sr.stopped_by);
  // (The repair's plan is the search's: its variants come first.)
  if (!sr.memory_repair.empty()) {
    summary.set_memory_repair(chosen < sr.first_start_variant && fallback < 0
                                  ? sr.memory_repair
                                  : sr.memory_repair +
                                        "; the plan below is another that the full simulation "
                                        "found faster or within memory");
  }
  summary.set_memory_share(sr.memory_share);
  summary.set_start_coarse_s(from_other ? other->start_s : sr.start_s);
  summary.set_start_over_memory(!(from_other ? other->start_fits : sr.start_fits));
  // A start variant places the ops as the start does.
  const bool near = sr.near_variant > 0 && chosen == sr.near_variant && fallback < 0;
  const bool mixed = sr.mixed_variant > 0 && chosen == sr.mixed_variant && fallback < 0;
  const bool from_start =
      chosen >= sr.first_start_variant && !near && !mixed && !from_other && fallback < 0;
  summary.set_result_over_memory(!(fallback >= 0 ? sr.fallback_fits[fallback]
                                   : from_other  ? other->result_fits
                                   : near        ? false
                                   : mixed       ? sr.mixed_fits
                                   : from_start  ? sr.start_fits
                                                 : sr.feasible));
  summary.set_result_coarse_s(fallback >= 0 ? sr.fallback_s[fallback]
                              : from_other  ? other->result_s
                              : near        ? sr.near_s
                              : mixed       ? sr.mixed_s
                              : from_start  ? sr.start_s
                                            : sr.result_s);
  if (fallback >= 0) {
    summary.set_gradient_collectives(
        "the all-reduced gradients of each group in one collective, a plan the search had kept "
        "before its last (which does not fit in full)");
  } else if (chosen < sr.variant_collectives.size()) {
    summary.set_gradient_collectives(sr.variant_collectives[chosen]);
  }
  // (Every group on one device: no gradient is combined.)
  if (absl::c_none_of(plan.groups(), [](const quilt::v1::GroupPlacement& group) {
        int replicas = 0;
        for (const auto& r : group.replicas()) replicas += r.replicas();
        return replicas > 1;
      })) {
    summary.set_gradient_collectives("none: each group on one device, with one replica");
  }
  summary.set_variants_simulated(static_cast<int32_t>(sr.variants.size()) + more_variants);
  const std::vector<GroupChoice>& decided = fallback >= 0 ? sr.fallback_choices[fallback]
                                            : from_other  ? other->choices
                                            : near        ? sr.near_choices
                                            : mixed       ? sr.mixed_choices
                                            : from_start  ? sr.start_choices
                                                          : sr.choices;
  for (const GroupChoice& c : decided) {
    auto* d = summary.add_decisions();
    d->set_group(c.group);
    d->set_first_op(c.first_op);
    d->set_last_op(c.last_op);
    d->set_ops(c.ops);
    d->set_placement(c.placement);
    d->set_aggregation(c.aggregation);
    std::vector<std::string> after;
    if (auto t = gathered_in.find(c.group); t != gathered_in.end()) {
      d->set_aggregation(absl::StrCat(c.aggregation, "; ", absl::StrJoin(t->second, ", "),
                                      " gathered (sparse lookup)"));
      after.push_back("embedding gradients gathered");
    }
    if (moved_rows.count(c.group)) after.push_back("weight gradients' rows moved");
    d->set_changed_after_search(absl::StrJoin(after, ", "));
    d->set_saved_s(c.saved_s);
    d->set_needed_to_fit(c.needed_to_fit);
    d->set_saved_not_measured(c.saved_not_measured);
    d->set_as_start(c.as_start);
    d->set_saved_over_memory(c.saved_over_memory);
  }
  out.from_other = from_other;
  out.decided = &decided;
  return out;
}

}  // namespace quilt
