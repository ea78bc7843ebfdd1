#include "src/graph/dtype.h"

#include "absl/strings/str_cat.h"

namespace quilt {

int64_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kInvalid:
      return 0;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kBool:
      return "bool";
    case DType::kInvalid:
      return "invalid";
  }
  return "invalid";
}

bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

quilt::v1::DataType ToProto(DType t) {
  switch (t) {
    case DType::kF32:
      return quilt::v1::DATA_TYPE_FLOAT32;
    case DType::kF16:
      return quilt::v1::DATA_TYPE_FLOAT16;
    case DType::kBF16:
      return quilt::v1::DATA_TYPE_BFLOAT16;
    case DType::kI64:
      return quilt::v1::DATA_TYPE_INT64;
    case DType::kI32:
      return quilt::v1::DATA_TYPE_INT32;
    case DType::kBool:
      return quilt::v1::DATA_TYPE_BOOL;
    case DType::kInvalid:
      return quilt::v1::DATA_TYPE_UNSPECIFIED;
  }
  return quilt::v1::DATA_TYPE_UNSPECIFIED;
}

absl::StatusOr<DType> FromProto(quilt::v1::DataType t) {
  switch (t) {
    case quilt::v1::DATA_TYPE_FLOAT32:
      return DType::kF32;
    case quilt::v1::DATA_TYPE_FLOAT16:
      return DType::kF16;
    case quilt::v1::DATA_TYPE_BFLOAT16:
      return DType::kBF16;
    case quilt::v1::DATA_TYPE_INT64:
      return DType::kI64;
    case quilt::v1::DATA_TYPE_INT32:
      return DType::kI32;
    case quilt::v1::DATA_TYPE_BOOL:
      return DType::kBool;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported data type ", static_cast<int>(t)));
  }
}

}  // namespace quilt
