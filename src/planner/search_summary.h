// The explanation's summary of the HeteroG search behind the plan shown
// (quiltctl plan --explain): where it started, how it went, and each
// group's choice with what it is worth, from the search's result and the
// variant Plan chose (a plan of another seed's search, the one kept from
// over the memory share, the start's placement with the plan's
// aggregation, the start, or a plan kept before the last).
#ifndef QUILT_SRC_PLANNER_SEARCH_SUMMARY_H_
#define QUILT_SRC_PLANNER_SEARCH_SUMMARY_H_

#include <map>
#include <string>
#include <vector>

#include "proto/quilt/v1/plan.pb.h"
#include "proto/quilt/v1/strategy.pb.h"
#include "src/planner/heterog.h"

namespace quilt {

// `chosen`: the variant of `sr` shown (`fallback`: else the index of the
// plan kept before the last, -1 for none); `plan`: the strategy shown, as
// Plan changed it after the search; `gathered_in`: per group, the tables
// whose gradients it gathers; `more_variants`: the plans simulated in full
// besides the search's variants.
struct SearchSummaryOf {
  quilt::v1::SearchSummary summary;
  // The plan shown is another seed's search's; its choices (in `sr`).
  bool from_other = false;
  const std::vector<GroupChoice>* decided = nullptr;
};
SearchSummaryOf SummarizeSearch(const SearchResult& sr, size_t chosen, int fallback,
                                const quilt::v1::Strategy& plan,
                                const std::map<int, std::vector<std::string>>& gathered_in,
                                int more_variants);

}  // namespace quilt

#endif  // QUILT_SRC_PLANNER_SEARCH_SUMMARY_H_
