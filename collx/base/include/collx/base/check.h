// COLLX_CHECK family: internal invariants. A failed check is a bug in collx, never a user
// error (users get collx::InvalidArgument with a message instead); it throws
// std::logic_error with the expression, both operands and the place.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace collx::detail {

[[noreturn]] void checkFailed(const char* file, int line, const std::string& what);

template <typename A, typename B>
[[noreturn]] void checkOpFailed(const char* file, int line, const char* expr, const A& a,
                                const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  checkFailed(file, line, os.str());
}

}  // namespace collx::detail

#define COLLX_CHECK(cond)                                                 \
  do {                                                                    \
    if (!(cond)) ::collx::detail::checkFailed(__FILE__, __LINE__, #cond); \
  } while (0)

#define COLLX_CHECK_OP_(a, b, op)                                                                \
  do {                                                                                           \
    const auto& collx_a_ = (a);                                                                  \
    const auto& collx_b_ = (b);                                                                  \
    if (!(collx_a_ op collx_b_))                                                                 \
      ::collx::detail::checkOpFailed(__FILE__, __LINE__, #a " " #op " " #b, collx_a_, collx_b_); \
  } while (0)

#define COLLX_CHECK_EQ(a, b) COLLX_CHECK_OP_(a, b, ==)
#define COLLX_CHECK_NE(a, b) COLLX_CHECK_OP_(a, b, !=)
#define COLLX_CHECK_LT(a, b) COLLX_CHECK_OP_(a, b, <)
#define COLLX_CHECK_LE(a, b) COLLX_CHECK_OP_(a, b, <=)
#define COLLX_CHECK_GT(a, b) COLLX_CHECK_OP_(a, b, >)
#define COLLX_CHECK_GE(a, b) COLLX_CHECK_OP_(a, b, >=)
