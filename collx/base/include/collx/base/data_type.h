// The element types collx moves and reduces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace collx {

enum class DataType : std::uint8_t {
  kInt8,
  kUint8,
  kInt32,
  kInt64,
  kFloat16,   // IEEE 754 binary16; reductions accumulate in float32
  kBfloat16,  // bfloat16; reductions accumulate in float32
  kFloat32,
  kFloat64,
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64,
};

// Size of one element in bytes.
std::size_t dataTypeSize(DataType type) noexcept;
// "int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64".
const char* dataTypeName(DataType type) noexcept;
// Accepts the names above and the short forms i8 u8 i32 i64 f16 bf16 f32 f64 (and "half",
// "float", "double"). std::nullopt for anything else.
std::optional<DataType> parseDataType(std::string_view name) noexcept;
bool isFloatingPoint(DataType type) noexcept;
bool isInteger(DataType type) noexcept;

}  // namespace collx
