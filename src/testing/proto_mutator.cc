#include "src/testing/proto_mutator.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"

namespace quilt::testing {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// A field of a message: one element of a repeated field (index >= 0), the
// singular field (index -1), or a repeated field as a whole (index -2).
struct Spot {
  Message* msg;
  const FieldDescriptor* field;
  int index;
};

void Collect(Message* msg, int depth, std::vector<Spot>* spots, std::set<std::string>* strings) {
  const Reflection* r = msg->GetReflection();
  const auto* d = msg->GetDescriptor();
  for (int f = 0; f < d->field_count(); ++f) {
    const FieldDescriptor* field = d->field(f);
    const bool is_message = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (field->is_repeated()) {
      spots->push_back({msg, field, -2});
      const int n = r->FieldSize(*msg, field);
      for (int i = 0; i < n; ++i) {
        if (is_message) {
          if (depth < 8)
            Collect(r->MutableRepeatedMessage(msg, field, i), depth + 1, spots, strings);
        } else {
          spots->push_back({msg, field, i});
          if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && strings->size() < 256) {
            strings->insert(r->GetRepeatedString(*msg, field, i));
          }
        }
      }
    } else {
      spots->push_back({msg, field, -1});
      if (is_message && r->HasField(*msg, field) && depth < 8) {
        Collect(r->MutableMessage(msg, field), depth + 1, spots, strings);
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING && strings->size() < 256) {
        strings->insert(r->GetString(*msg, field));
      }
    }
  }
}

template <typename T>
T Pick(std::mt19937* rng, const std::vector<T>& v) {
  return v[(*rng)() % v.size()];
}

}  // namespace

std::string MutateMessage(Message* msg, std::mt19937* rng) {
  std::vector<Spot> spots;
  std::set<std::string> string_set;
  Collect(msg, 0, &spots, &string_set);
  std::vector<std::string> strings(string_set.begin(), string_set.end());
  strings.push_back("");
  strings.push_back("nowhere");
  strings.push_back(std::string(300, 'x'));
  const Spot s = spots[(*rng)() % spots.size()];
  const Reflection* r = s.msg->GetReflection();
  const FieldDescriptor* f = s.field;
  const std::string name = f->full_name();
  if (s.index == -2) {
    const int n = r->FieldSize(*s.msg, f);
    if (n == 0) return "nothing (an empty list)";
    const int i = static_cast<int>((*rng)() % n);
    if ((*rng)() % 2 == 0) {
      // Removed: the last moved into its place, then dropped.
      r->SwapElements(s.msg, f, i, n - 1);
      r->RemoveLast(s.msg, f);
      return absl::StrCat("removed ", name, "[", i, "]");
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      r->AddMessage(s.msg, f)->CopyFrom(r->GetRepeatedMessage(*s.msg, f, i));
      return absl::StrCat("repeated ", name, "[", i, "]");
    }
    return "nothing (a list of scalars kept)";
  }
  const bool rep = s.index >= 0;
  const std::vector<int64_t> ints = {0,
                                     -1,
                                     1,
                                     2,
                                     3,
                                     7,
                                     std::numeric_limits<int32_t>::min(),
                                     std::numeric_limits<int32_t>::max(),
                                     int64_t{1} << 31,
                                     int64_t{1} << 40,
                                     int64_t{1} << 62,
                                     -(int64_t{1} << 62)};
  const double inf = std::numeric_limits<double>::infinity();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      const int32_t v = static_cast<int32_t>(Pick(rng, ints));
      rep ? r->SetRepeatedInt32(s.msg, f, s.index, v) : r->SetInt32(s.msg, f, v);
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = Pick(rng, ints);
      rep ? r->SetRepeatedInt64(s.msg, f, s.index, v) : r->SetInt64(s.msg, f, v);
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_UINT32: {
      const uint32_t v = static_cast<uint32_t>(Pick(rng, ints));
      rep ? r->SetRepeatedUInt32(s.msg, f, s.index, v) : r->SetUInt32(s.msg, f, v);
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      const uint64_t v = static_cast<uint64_t>(Pick(rng, ints));
      rep ? r->SetRepeatedUInt64(s.msg, f, s.index, v) : r->SetUInt64(s.msg, f, v);
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const double v = Pick(rng, std::vector<double>{0, -1, 1e-30, 1e30, NAN, inf, -inf, 0.5});
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
        rep ? r->SetRepeatedDouble(s.msg, f, s.index, v) : r->SetDouble(s.msg, f, v);
      } else {
        const float fv = static_cast<float>(v);
        rep ? r->SetRepeatedFloat(s.msg, f, s.index, fv) : r->SetFloat(s.msg, f, fv);
      }
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const bool v = (*rng)() % 2 == 0;
      rep ? r->SetRepeatedBool(s.msg, f, s.index, v) : r->SetBool(s.msg, f, v);
      return absl::StrCat("set ", name, " = ", v);
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int count = f->enum_type()->value_count();
      const int v = static_cast<int>((*rng)() % (count + 1));  // count: not a value
      rep ? r->SetRepeatedEnumValue(s.msg, f, s.index, v) : r->SetEnumValue(s.msg, f, v);
      return absl::StrCat("set ", name, " = enum ", v);
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string v = Pick(rng, strings);
      if (f->type() == FieldDescriptor::TYPE_BYTES && !v.empty() && (*rng)() % 2 == 0) {
        v.resize((*rng)() % v.size());  // bytes cut short (tensor data)
      }
      rep ? r->SetRepeatedString(s.msg, f, s.index, v) : r->SetString(s.msg, f, v);
      return absl::StrCat("set ", name, " = '", v.substr(0, 40), "'");
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      if (r->HasField(*s.msg, f)) {
        r->ClearField(s.msg, f);
        return absl::StrCat("cleared ", name);
      }
      return "nothing (an unset message)";
  }
  return "nothing";
}

}  // namespace quilt::testing
