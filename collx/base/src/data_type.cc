#include "collx/base/data_type.h"

namespace collx {

std::size_t dataTypeSize(DataType type) noexcept {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

const char* dataTypeName(DataType type) noexcept {
  switch (type) {
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBfloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "unknown";
}

std::optional<DataType> parseDataType(std::string_view name) noexcept {
  struct Alias {
    std::string_view name;
    DataType type;
  };
  static constexpr Alias kAliases[] = {
      {"i8", DataType::kInt8},       {"u8", DataType::kUint8},       {"i32", DataType::kInt32},
      {"i64", DataType::kInt64},     {"f16", DataType::kFloat16},    {"half", DataType::kFloat16},
      {"bf16", DataType::kBfloat16}, {"f32", DataType::kFloat32},    {"float", DataType::kFloat32},
      {"f64", DataType::kFloat64},   {"double", DataType::kFloat64},
  };
  for (DataType type : kAllDataTypes) {
    if (name == dataTypeName(type)) return type;
  }
  for (const Alias& alias : kAliases) {
    if (name == alias.name) return alias.type;
  }
  return std::nullopt;
}

bool isFloatingPoint(DataType type) noexcept {
  return type == DataType::kFloat16 || type == DataType::kBfloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64;
}

bool isInteger(DataType type) noexcept { return !isFloatingPoint(type); }

}  // namespace collx
