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

ReduceOp ReduceOp::custom(ReduceFunction fn, std::string name, bool commutative) {
  ReduceOp op(ReduceOpKind::kCustom);
  op.custom_ = std::make_shared<const Custom>(Custom{std::move(fn), std::move(name)});
  op.commutative_ = commutative;
  return op;
}

std::string ReduceOp::name() const {
  return custom_ ? custom_->name : std::string(reduceOpKindName(kind_));
}

const ReduceFunction& ReduceOp::function() const noexcept {
  static const ReduceFunction none;
  return custom_ ? custom_->fn : none;
}

void ReduceOp::validate(DataType type, const Where& where) const {
  if (isBitwise() && !isInteger(type)) {
    throw InvalidArgument(where, "reduce op '" + name() +
                                     "' is bitwise and works on integer types only, not " +
                                     dataTypeName(type));
  }
  if (kind_ == ReduceOpKind::kCustom && !function()) {
    throw InvalidArgument(where, "custom reduce op '" + name() + "' has no function");
  }
}

}  // namespace collx
