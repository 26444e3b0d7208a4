#include "collx/base/reduce_op.h"

#include <utility>

namespace collx {

namespace {
constexpr ReduceOpKind kBuiltins[] = {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin,
                                      ReduceOpKind::kMax, ReduceOpKind::kAvg,  ReduceOpKind::kBand,
                                      ReduceOpKind::kBor, ReduceOpKind::kBxor};
}  // namespace

const char* reduceOpKindName(ReduceOpKind kind) noexcept {
  switch (kind) {
    case ReduceOpKind::kSum:
      return "sum";
    case ReduceOpKind::kProd:
      return "prod";
    case ReduceOpKind::kMin:
      return "min";
    case ReduceOpKind::kMax:
      return "max";
    case ReduceOpKind::kAvg:
      return "avg";
    case ReduceOpKind::kBand:
      return "band";
    case ReduceOpKind::kBor:
      return "bor";
    case ReduceOpKind::kBxor:
      return "bxor";
    case ReduceOpKind::kCustom:
      return "custom";
  }
  return "unknown";
}

std::optional<ReduceOpKind> parseReduceOpKind(std::string_view name) noexcept {
  for (ReduceOpKind kind : kBuiltins) {
    if (name == reduceOpKindName(kind)) return kind;
  }
  return std::nullopt;
}

ReduceOp::ReduceOp(ReduceOpKind kind) : kind_(kind), name_(reduceOpKindName(kind)) {}

ReduceOp ReduceOp::custom(ReduceFunction fn, std::string name, bool commutative) {
  ReduceOp op(ReduceOpKind::kCustom);
  op.fn_ = std::move(fn);
  op.name_ = std::move(name);
  op.commutative_ = commutative;
  return op;
}

void ReduceOp::validate(DataType type, const Where& where) const {
  if (isBitwise() && !isInteger(type)) {
    throw InvalidArgument(where, std::string("reduce op '") + name_ +
                                     "' is bitwise and works on integer types only, not " +
                                     dataTypeName(type));
  }
  if (kind_ == ReduceOpKind::kCustom && !fn_) {
    throw InvalidArgument(where, "custom reduce op '" + name_ + "' has no function");
  }
}

}  // namespace collx
