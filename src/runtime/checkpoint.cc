#include "src/runtime/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "src/common/status.h"
#include "src/runtime/data/npy.h"

namespace quilt {
namespace {

struct Piece {
  int64_t begin = 0, end = 0;
  Tensor value;
};

absl::StatusOr<Tensor> Join(const std::string& name, std::vector<Piece> pieces) {
  for (const Piece& p : pieces) {
    if (p.begin == 0 && p.end == 0) return p.value;  // a whole copy
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  int64_t rows = 0;
  std::vector<const Piece*> parts;
  for (const Piece& p : pieces) {
    if (p.begin < rows) continue;  // the same shard from another copy
    if (p.begin != rows) {
      return absl::DataLossError(
          absl::StrCat("'", name, "': rows [", rows, ", ", p.begin, ") are in no checkpoint file"));
    }
    rows = p.end;
    parts.push_back(&p);
  }
  std::vector<int64_t> dims = parts.front()->value.dims();
  if (dims.empty()) return absl::DataLossError("'" + name + "' is a sharded scalar");
  // Each file holds exactly its rows, with the same type and row shape.
  for (const Piece* p : parts) {
    std::vector<int64_t> d = p->value.dims();
    if (p->end < p->begin || d.empty() || d[0] != p->end - p->begin ||
        p->value.dtype() != parts.front()->value.dtype() ||
        !std::equal(d.begin() + 1, d.end(), dims.begin() + 1, dims.end())) {
      return absl::DataLossError(absl::StrCat(
          "'", name, "': the file of rows [", p->begin, ", ", p->end, ") holds ",
          p->value.TypeString(), ", not those rows of ", parts.front()->value.TypeString()));
    }
  }
  dims[0] = rows;
  ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(parts.front()->value.dtype(), dims));
  char* dst = static_cast<char*>(out.raw());
  for (const Piece* p : parts) {
    Tensor v = p->value;
    std::memcpy(dst, v.raw(), static_cast<size_t>(v.bytes()));
    dst += v.bytes();
  }
  return out;
}

}  // namespace

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& step_dir, int world,
                                          const std::function<bool(const std::string&)>& wanted) {
  std::map<std::string, std::vector<Piece>> pieces;
  std::set<std::string> whole_read;
  for (int r = 0; r < world; ++r) {
    const std::string rank_dir = absl::StrCat(step_dir, "/rank-", r);
    std::ifstream in(rank_dir + "/metrics.json");
    const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
    if (m.is_discarded() || !m.is_object() || !m.contains("tensors") || !m["tensors"].is_array()) {
      return absl::DataLossError(rank_dir + "/metrics.json is not a checkpoint index");
    }
    for (const auto& t : m["tensors"]) {
      auto integer_or_absent = [&t](const char* key) {
        return !t.contains(key) || t[key].is_number_integer();
      };
      if (!t.is_object() || !t.contains("file") || !t["file"].is_string() ||
          !t.contains("tensor") || !t["tensor"].is_string() || !integer_or_absent("begin") ||
          !integer_or_absent("end")) {
        return absl::DataLossError(rank_dir + "/metrics.json lists a tensor it does not describe");
      }
      const std::string tensor = t["tensor"].get<std::string>();
      if (wanted != nullptr && !wanted(tensor)) continue;
      Piece p;
      p.begin = t.value("begin", int64_t{0});
      p.end = t.value("end", int64_t{0});
      // Replicas are equal: one whole copy is read.
      const bool whole = p.begin == 0 && p.end == 0;
      if (whole && !whole_read.insert(tensor).second) continue;
      ASSIGN_OR_RETURN(p.value, ReadNpy(rank_dir + "/" + t["file"].get<std::string>()));
      pieces[tensor].push_back(std::move(p));
    }
  }
  Checkpoint c;
  for (auto& [name, parts] : pieces) {
    ASSIGN_OR_RETURN(c.tensors[name], Join(name, std::move(parts)));
  }
  return c;
}

}  // namespace quilt
