#include "mapping.h"

#include <cctype>
#include <iterator>

namespace collx::bindings {

namespace {

const ElementType kElementTypes[] = {
    {"bool", DataType::kUint8, true, std::nullopt},
    {"int8", DataType::kInt8, false, std::nullopt},
    {"uint8", DataType::kUint8, false, std::nullopt},
    {"int32", DataType::kInt32, false, std::nullopt},
    {"int64", DataType::kInt64, false, std::nullopt},
    {"float16", DataType::kFloat16, false, std::nullopt},
    {"bfloat16", DataType::kBfloat16, false, std::nullopt},
    {"float32", DataType::kFloat32, false, std::nullopt},
    {"float64", DataType::kFloat64, false, std::nullopt},
    {"complex64", std::nullopt, false, DataType::kFloat32},
    {"complex128", std::nullopt, false, DataType::kFloat64},
};

// What every message about a type collx cannot reduce lists.
constexpr const char* kReducible =
    "it reduces int8, uint8, int32, int64, float16, bfloat16, float32, float64, bool (sum "
    "and prod as or and and), and complex64 and complex128 with sum and avg";

std::string lowered(std::string_view text) {
  std::string out;
  for (char ch : text) out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

const ElementType* findElementType(std::string_view name) noexcept {
  for (const ElementType& type : kElementTypes) {
    if (name == type.name) return &type;
  }
  return nullptr;
}

const ElementType* elementTypesBegin() noexcept { return std::begin(kElementTypes); }
const ElementType* elementTypesEnd() noexcept { return std::end(kElementTypes); }

Units unitsOf(const ElementType* type, std::size_t itemSize, const ReduceOp* op,
              const std::string& typeName, const char* role, const Where& where, const char* hint) {
  if (type != nullptr && type->dtype) return {*type->dtype, 1};
  if (op == nullptr) return {DataType::kUint8, itemSize};  // moved as bytes
  const ReduceOpKind kind = op->kind();
  if (type != nullptr && type->real && (kind == ReduceOpKind::kSum || kind == ReduceOpKind::kAvg)) {
    return {*type->real, 2};
  }
  const std::string with = type != nullptr ? std::string(" with ") + op->name() : "";
  throw InvalidArgument(where, std::string(role) + " holds " + typeName +
                                   " elements, which collx cannot reduce" + with + " (" +
                                   kReducible + ")" + hint);
}

ReduceOp opFor(const ReduceOp& op, const ElementType* type, const Where& where) {
  if (type == nullptr || !type->logical) return op;
  switch (op.kind()) {
    case ReduceOpKind::kSum:
      return ReduceOpKind::kBor;
    case ReduceOpKind::kProd:
      return ReduceOpKind::kBand;
    case ReduceOpKind::kAvg:
      throw InvalidArgument(where, "avg of bool elements has no meaning (sum is a logical or)");
    default:
      return op;
  }
}

ReduceOpKind torchOp(int value, const Where& where) {
  if (value >= 0 && value < static_cast<int>(std::size(kTorchOps))) return kTorchOps[value];
  throw InvalidArgument(where, "ReduceOp " + std::to_string(value) +
                                   (value == kTorchPremulSum ? " (PREMUL_SUM)" : "") +
                                   " is not supported by collx");
}

std::optional<ReduceOpKind> parseOp(std::string_view name) {
  std::string lower = lowered(name);
  for (const char* prefix : {"reduceop.", "redoptype."}) {
    if (lower.rfind(prefix, 0) == 0) lower = lower.substr(std::string(prefix).size());
  }
  if (lower == "product") lower = "prod";
  return parseReduceOpKind(lower);
}

}  // namespace collx::bindings
