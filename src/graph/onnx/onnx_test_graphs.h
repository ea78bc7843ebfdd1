// Small ONNX graphs built by hand for the import's tests, and the import
// they go through (source "m.onnx").
#ifndef QUILT_SRC_GRAPH_ONNX_ONNX_TEST_GRAPHS_H_
#define QUILT_SRC_GRAPH_ONNX_ONNX_TEST_GRAPHS_H_

#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "src/graph/onnx/onnx_import.h"

namespace quilt::testing {

inline absl::StatusOr<Graph> Import(const std::string& bytes, int64_t batch = 0) {
  OnnxImportOptions o;
  o.source = "m.onnx";
  o.batch = batch;
  return ImportOnnx(bytes, o);
}

// x [2, 3] → Relu → y, the graph's output, at `opset`.
inline onnx::ModelProto Tiny(int64_t opset) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(3);
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->set_name("relu");
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

// A float32 input x [batch, dims...] (a dynamic batch) at `opset`, and
// nothing else: nodes and outputs are added after.
inline onnx::ModelProto WithBatchedInput(int64_t opset, const std::vector<int64_t>& dims) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  m.add_opset_import()->set_version(opset);
  auto* in = m.mutable_graph()->add_input();
  in->set_name("x");
  auto* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

// Input 0's dim 0 becomes a dynamic batch (dim_param "batch").
inline void SetDynamicBatch(onnx::ModelProto* m) {
  m->mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("batch");
}

// A node of `type` reading `inputs` and writing `output` (unnamed).
inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& type,
                                const std::vector<std::string>& inputs, const std::string& output) {
  auto* n = g->add_node();
  n->set_op_type(type);
  for (const std::string& in : inputs) n->add_input(in);
  n->add_output(output);
  return n;
}

// A Constant node `name` of `type` and `dims`: its tensor, for the values.
inline onnx::TensorProto* AddConstantNode(onnx::GraphProto* g, const std::string& name,
                                          onnx::TensorProto::DataType type,
                                          const std::vector<int64_t>& dims) {
  auto* n = g->add_node();
  n->set_op_type("Constant");
  n->add_output(name);
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(type);
  for (int64_t d : dims) a->mutable_t()->add_dims(d);
  return a->mutable_t();
}

// A Constant node `name` holding float32 `v` of `dims`.
inline void AddFloatConstant(onnx::GraphProto* g, const std::string& name,
                             const std::vector<int64_t>& dims, const std::vector<float>& v) {
  onnx::TensorProto* t = AddConstantNode(g, name, onnx::TensorProto::FLOAT, dims);
  for (float x : v) t->add_float_data(x);
}

// A Constant node `name` holding int64 `v`, a vector.
inline void AddInt64Constant(onnx::GraphProto* g, const std::string& name,
                             const std::vector<int64_t>& v) {
  onnx::TensorProto* t =
      AddConstantNode(g, name, onnx::TensorProto::INT64, {static_cast<int64_t>(v.size())});
  for (int64_t x : v) t->add_int64_data(x);
}

}  // namespace quilt::testing

#endif  // QUILT_SRC_GRAPH_ONNX_ONNX_TEST_GRAPHS_H_
