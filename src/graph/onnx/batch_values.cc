#include "src/graph/onnx/batch_values.h"

#include <cmath>
#include <set>
#include <utility>

#include "src/graph/onnx/converter_parts.h"

namespace quilt::onnx_import {
namespace {

BatchForm NotAffine() {
  BatchForm f;
  f.affine = false;
  return f;
}

// Element i of input k as (a, c): its form's, or a constant's value.
std::pair<double, double> Element(const BatchForm* form, const Tensor* value, int64_t i) {
  if (form != nullptr) {
    const size_t j = form->a.size() == 1 ? 0 : static_cast<size_t>(i);
    return {form->a[j], form->c[j]};
  }
  return {0.0, NumberAt(*value, value->numel() == 1 ? 0 : i)};
}

// Output elements of an op that only selects or copies input elements:
// each takes the form of an input element of its value.
BatchForm Select(const std::vector<const BatchForm*>& forms,
                 const std::vector<const Tensor*>& values, const Tensor& out) {
  BatchForm f;
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double v = NumberAt(out, i);
    std::pair<double, double> e = {0.0, v};
    for (size_t k = 0; k < forms.size(); ++k) {
      if (forms[k] == nullptr || values[k] == nullptr) continue;
      bool found = false;
      for (int64_t j = 0; j < values[k]->numel() && !found; ++j) {
        if (NumberAt(*values[k], j) == v && forms[k]->a[j] != 0) {
          e = {forms[k]->a[j], forms[k]->c[j]};
          found = true;
        }
      }
      if (found) break;
    }
    f.a.push_back(e.first);
    f.c.push_back(e.second);
  }
  return f;
}

// An element-wise binary op of two inputs (equal sizes, or one of 1).
BatchForm Arithmetic(const std::string& op, const std::vector<const BatchForm*>& forms,
                     const std::vector<const Tensor*>& values, const Tensor& out) {
  if (values.size() < 2 || values[0] == nullptr || values[1] == nullptr) return NotAffine();
  const int64_t n = out.numel();
  for (int k = 0; k < 2; ++k) {
    if (values[k]->numel() != 1 && values[k]->numel() != n) return NotAffine();
  }
  BatchForm f;
  for (int64_t i = 0; i < n; ++i) {
    const auto [a1, c1] = Element(forms[0], values[0], i);
    const auto [a2, c2] = Element(forms[1], values[1], i);
    double a = 0, c = 0;
    if (op == "Add") {
      a = a1 + a2, c = c1 + c2;
    } else if (op == "Sub") {
      a = a1 - a2, c = c1 - c2;
    } else if (op == "Mul") {
      if (a1 != 0 && a2 != 0) return NotAffine();  // B²
      a = a1 * c2 + a2 * c1, c = c1 * c2;
    } else if (op == "Div") {
      if (a2 != 0 || c2 == 0) return NotAffine();  // 1 / B
      a = a1 / c2, c = c1 / c2;
      // Integer division truncates: only exact quotients stay affine.
      if (out.dtype() == DType::kI64 && (a != std::floor(a) || c != std::floor(c))) {
        return NotAffine();
      }
    }
    f.a.push_back(a);
    f.c.push_back(c);
  }
  return f;
}

// A product or sum of all of one input's elements.
BatchForm Reduce(const std::string& op, const BatchForm* form, const Tensor* value,
                 const Tensor& out) {
  if (form == nullptr || value == nullptr || out.numel() != 1) return NotAffine();
  double a = 0, c = op == "ReduceProd" ? 1 : 0;
  for (int64_t i = 0; i < value->numel(); ++i) {
    const double ai = form->a[i], ci = form->c[i];
    if (op == "ReduceSum") {
      a += ai, c += ci;
    } else {
      if (a != 0 && ai != 0) return NotAffine();
      a = a * ci + ai * c, c = c * ci;
    }
  }
  BatchForm f;
  f.a = {a};
  f.c = {c};
  return f;
}

}  // namespace

bool BatchForm::DependsOnBatch() const {
  if (!affine) return true;
  for (double x : a) {
    if (x != 0) return true;
  }
  return false;
}

BatchForm DeriveBatchForm(const onnx::NodeProto& node, const std::vector<const BatchForm*>& forms,
                          const std::vector<const Tensor*>& values, const Tensor& out,
                          int64_t batch) {
  for (const BatchForm* f : forms) {
    if (f != nullptr && !f->affine) return NotAffine();
  }
  static const std::set<std::string>* selections =
      new std::set<std::string>{"Identity", "Cast",  "Squeeze", "Unsqueeze", "Reshape",   "Flatten",
                                "Gather",   "Slice", "Concat",  "Expand",    "Transpose", "Tile"};
  const std::string& op = node.op_type();
  BatchForm f;
  if (selections->count(op)) {
    f = Select(forms, values, out);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    f = Arithmetic(op, forms, values, out);
  } else if (op == "Neg") {
    if (forms.empty() || forms[0] == nullptr) return NotAffine();
    f = *forms[0];
    for (double& x : f.a) x = -x;
    for (double& x : f.c) x = -x;
  } else if ((op == "ReduceProd" || op == "ReduceSum") && !forms.empty()) {
    f = Reduce(op, forms[0], values[0], out);
  } else {
    return NotAffine();
  }
  if (!f.affine || static_cast<int64_t>(f.a.size()) != out.numel()) return NotAffine();
  // The form must give the folded value back at the placeholder batch.
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double want = NumberAt(out, i), got = f.a[i] * static_cast<double>(batch) + f.c[i];
    if (!(std::fabs(want - got) <= 1e-6 * std::max(1.0, std::fabs(want)))) return NotAffine();
  }
  return f;
}

}  // namespace quilt::onnx_import
