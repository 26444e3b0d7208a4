// Reduction operators: the built-in ones and a user-supplied function.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "collx/base/data_type.h"
#include "collx/base/error.h"

namespace collx {

enum class ReduceOpKind : std::uint8_t {
  kSum,
  kProd,
  kMin,
  kMax,
  kAvg,     // sum, then divided by the number of ranks
  kBand,    // bitwise and: integer types only
  kBor,     // bitwise or: integer types only
  kBxor,    // bitwise xor: integer types only
  kCustom,  // a user-supplied function
};

// A user reduction: inout[i] = inout[i] (op) in[i] for i in [0, count). It must be safe to call
// from any thread and must not throw; `type` is the collective's DataType.
using ReduceFunction =
    std::function<void(void* inout, const void* in, std::size_t count, DataType type)>;

class ReduceOp {
 public:
  // Implicit on purpose: a ReduceOpKind is a ReduceOp (`opts.op = ReduceOpKind::kMax`).
  ReduceOp(ReduceOpKind kind = ReduceOpKind::kSum) noexcept  // NOLINT(google-explicit-constructor)
      : kind_(kind) {}

  // A user-supplied reduction. `commutative` = false asks collx to keep rank order
  // (algorithms that cannot keep it refuse the op with InvalidArgument).
  static ReduceOp custom(ReduceFunction fn, std::string name = "custom", bool commutative = true);

  ReduceOpKind kind() const noexcept { return kind_; }
  // The built-in kind's name, or the custom op's.
  std::string name() const;
  // The custom op's function (empty for the built-in kinds).
  const ReduceFunction& function() const noexcept;
  bool commutative() const noexcept { return commutative_; }
  bool isBitwise() const noexcept {
    return kind_ == ReduceOpKind::kBand || kind_ == ReduceOpKind::kBor ||
           kind_ == ReduceOpKind::kBxor;
  }

  // Throws InvalidArgument (naming `where`) when this op cannot reduce `type`: bitwise ops on
  // floating-point types, or a custom op without a function.
  void validate(DataType type, const Where& where) const;

 private:
  struct Custom {
    ReduceFunction fn;
    std::string name;
  };
  // Built-in kinds carry nothing else: an op is copied into every call, so that stays a
  // few words (no string, no function) on the hot path.
  ReduceOpKind kind_;
  bool commutative_ = true;
  std::shared_ptr<const Custom> custom_;
};

// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor", "custom".
const char* reduceOpKindName(ReduceOpKind kind) noexcept;
// The built-in names above except "custom"; std::nullopt otherwise.
std::optional<ReduceOpKind> parseReduceOpKind(std::string_view name) noexcept;

}  // namespace collx
