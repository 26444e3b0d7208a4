// The reduction kernels against a scalar reference written here, independently of the
// library: every data type x op, counts around every vector width, misaligned pointers, the
// bytes around the range, aliasing, wraparound, float16/bfloat16 rounding, custom ops,
// divideBy, and each instruction set path (forced through the internal kernel header).
#include "collx/algorithms/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/reduce_kernels.h"

namespace collx::algorithms {
namespace {

using detail::ReduceIsa;
using Bytes = std::vector<unsigned char>;

constexpr std::size_t kCounts[] = {0, 1, 7, 15, 16, 17, 31, 33, 64, 1000, 4099};

// ---- the reference ----------------------------------------------------------------------

// The 16-bit float formats, described by their parameters; decoding and rounding below are
// written from the format definitions with double arithmetic, not with the library's bit
// tricks.
struct Format {
  int mantissaBits;  // stored mantissa bits
  int minExponent;   // exponent of the smallest normal number
  int maxExponent;   // exponent of the largest finite binade
  int bias;
  std::uint16_t infinity;
};
constexpr Format kHalf{10, -14, 15, 15, 0x7C00};
constexpr Format kBfloat16{7, -126, 127, 127, 0x7F80};

double decode(std::uint16_t bits, const Format& f) {
  const double sign = (bits & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponentField = (bits & 0x7FFF) >> f.mantissaBits;
  const int mantissa = bits & ((1 << f.mantissaBits) - 1);
  const int maxField = (1 << (15 - f.mantissaBits)) - 1;
  if (exponentField == maxField) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (exponentField == 0) return sign * std::ldexp(mantissa, f.minExponent - f.mantissaBits);
  return sign *
         std::ldexp((1 << f.mantissaBits) + mantissa, exponentField - f.bias - f.mantissaBits);
}

// Round-to-nearest-even of an exact double into the format. Any NaN gives the format's quiet
// NaN: results are compared by NaN-ness only.
std::uint16_t roundTo(double v, const Format& f) {
  if (std::isnan(v)) return static_cast<std::uint16_t>(f.infinity | (f.infinity >> 1));
  const auto sign = static_cast<std::uint16_t>(std::signbit(v) ? 0x8000 : 0);
  const double magnitude = std::fabs(v);
  if (std::isinf(magnitude)) return sign | f.infinity;
  if (magnitude == 0) return sign;
  int k = 0;
  std::frexp(magnitude, &k);  // magnitude in [2^(k-1), 2^k)
  const int exponent = std::max(k - 1, f.minExponent);
  const double quantum = std::ldexp(1.0, exponent - f.mantissaBits);
  const double units = std::nearbyint(magnitude / quantum);  // default mode: ties to even
  const double rounded = units * quantum;
  if (rounded == 0) return sign;  // below half the smallest subnormal, or a tie with it
  if (rounded >= std::ldexp(1.0, f.maxExponent + 1)) return sign | f.infinity;
  std::frexp(rounded, &k);
  if (k - 1 < f.minExponent) return static_cast<std::uint16_t>(sign | static_cast<int>(units));
  const int field = k - 1 + f.bias;
  const auto mantissa =
      static_cast<int>(std::ldexp(rounded, f.mantissaBits - (k - 1))) - (1 << f.mantissaBits);
  return static_cast<std::uint16_t>(sign | (field << f.mantissaBits) | mantissa);
}

struct HalfTag {};
struct Bfloat16Tag {};
template <class T>
struct Type {
  using type = T;
};

template <class F>
void withType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8:
      return f(Type<std::int8_t>{});
    case DataType::kUint8:
      return f(Type<std::uint8_t>{});
    case DataType::kInt32:
      return f(Type<std::int32_t>{});
    case DataType::kInt64:
      return f(Type<std::int64_t>{});
    case DataType::kFloat16:
      return f(Type<HalfTag>{});
    case DataType::kBfloat16:
      return f(Type<Bfloat16Tag>{});
    case DataType::kFloat32:
      return f(Type<float>{});
    case DataType::kFloat64:
      return f(Type<double>{});
  }
  throw std::logic_error("unknown DataType");
}

template <class T>
constexpr const Format& formatOf() {
  if constexpr (std::is_same_v<T, HalfTag>) {
    return kHalf;
  } else {
    return kBfloat16;
  }
}

template <class T>
T loadAs(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
void storeAs(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

template <class T>
T referenceInteger(ReduceOpKind op, T x, T y) {
  using U = std::make_unsigned_t<T>;
  // uint64 arithmetic wraps modulo 2^64, so its low bits are the wrapped result of any width.
  const std::uint64_t ux = static_cast<U>(x);
  const std::uint64_t uy = static_cast<U>(y);
  switch (op) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kAvg:
      return static_cast<T>(static_cast<U>(ux + uy));
    case ReduceOpKind::kProd:
      return static_cast<T>(static_cast<U>(ux * uy));
    case ReduceOpKind::kMin:
      return std::min(x, y);
    case ReduceOpKind::kMax:
      return std::max(x, y);
    case ReduceOpKind::kBand:
      return static_cast<T>(ux & uy);
    case ReduceOpKind::kBor:
      return static_cast<T>(ux | uy);
    case ReduceOpKind::kBxor:
      return static_cast<T>(ux ^ uy);
    case ReduceOpKind::kCustom:
      break;
  }
  throw std::logic_error("no reference for this op");
}

// Exact for sum and prod of two float32, float16 or bfloat16 values up to the final rounding
// (and the double rounding of a float32 intermediate is harmless: 53 >= 2 * 24 + 2), so
// rounding this once gives the correctly rounded result. min/max: NaN wins; on a tie (-0, +0)
// the second operand, as reduce.h documents.
double referenceFloat(ReduceOpKind op, double x, double y) {
  switch (op) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kAvg:
      return x + y;
    case ReduceOpKind::kProd:
      return x * y;
    case ReduceOpKind::kMin:
      if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
      return x < y ? x : y;
    case ReduceOpKind::kMax:
      if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<double>::quiet_NaN();
      return x > y ? x : y;
    default:
      break;
  }
  throw std::logic_error("no floating-point reference for this op");
}

void referenceElement(DataType type, ReduceOpKind op, const unsigned char* x,
                      const unsigned char* y, unsigned char* out) {
  withType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T>) {
      storeAs<T>(out, referenceInteger<T>(op, loadAs<T>(x), loadAs<T>(y)));
    } else if constexpr (std::is_floating_point_v<T>) {
      storeAs<T>(out, static_cast<T>(referenceFloat(op, loadAs<T>(x), loadAs<T>(y))));
    } else {
      const Format& f = formatOf<T>();
      const double r = referenceFloat(op, decode(loadAs<std::uint16_t>(x), f),
                                      decode(loadAs<std::uint16_t>(y), f));
      storeAs<std::uint16_t>(out, roundTo(r, f));
    }
  });
}

Bytes referenceReduce(DataType type, ReduceOpKind op, const unsigned char* x,
                      const unsigned char* y, std::size_t count) {
  const std::size_t size = dataTypeSize(type);
  Bytes out(count * size);
  for (std::size_t i = 0; i < count; ++i) {
    referenceElement(type, op, x + i * size, y + i * size, out.data() + i * size);
  }
  return out;
}

bool isNanElement(DataType type, const unsigned char* p) {
  bool nan = false;
  withType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      nan = std::isnan(loadAs<T>(p));
    } else if constexpr (!std::is_integral_v<T>) {
      nan = std::isnan(decode(loadAs<std::uint16_t>(p), formatOf<T>()));
    }
  });
  return nan;
}

// Bit-exact, except that any NaN matches any NaN.
bool sameElement(DataType type, const unsigned char* got, const unsigned char* want) {
  if (isNanElement(type, want)) return isNanElement(type, got);
  return std::memcmp(got, want, dataTypeSize(type)) == 0;
}

std::string hex(const unsigned char* p, std::size_t size) {
  std::string out = "0x";
  char digits[3];
  for (std::size_t i = size; i-- > 0;) {  // little endian: most significant byte last
    std::snprintf(digits, sizeof(digits), "%02x", p[i]);
    out += digits;
  }
  return out;
}

// Compares `count` elements; on mismatch names the first few with their inputs.
testing::AssertionResult elementsMatch(DataType type, const unsigned char* got,
                                       const unsigned char* want, const unsigned char* x,
                                       const unsigned char* y, std::size_t count) {
  const std::size_t size = dataTypeSize(type);
  std::size_t bad = 0;
  std::string detail;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t at = i * size;
    if (sameElement(type, got + at, want + at)) continue;
    if (++bad <= 5) {
      detail += "\n  [" + std::to_string(i) + "] " + hex(x + at, size) + " (op) " +
                hex(y + at, size) + ": got " + hex(got + at, size) + ", want " +
                hex(want + at, size);
    }
  }
  if (bad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << bad << " of " << count << " " << dataTypeName(type) << " elements differ:" << detail;
}

// ---- inputs -----------------------------------------------------------------------------

template <class T, class Rng>
T pick(Rng& rng, std::initializer_list<T> values) {
  return values.begin()[rng() % values.size()];
}

// Mostly values of moderate magnitude (so that sums round and products stay finite), some
// special values (zeros, infinities, NaNs, subnormals, the largest finite), and for the 16-bit
// formats some arbitrary bit patterns. Integers: arbitrary bits (wraparound included).
void randomElement(DataType type, std::mt19937_64& rng, unsigned char* out) {
  const std::uint64_t r = rng();
  const std::uint64_t bits = rng();
  const unsigned choice = static_cast<unsigned>(r % 16);
  const std::uint64_t sign = r >> 63;
  const auto exponent = static_cast<int>((r >> 8) % 13) - 6;  // [-6, 6]
  switch (type) {
    case DataType::kFloat32: {
      const std::uint32_t v =
          choice == 0
              ? pick<std::uint32_t>(rng, {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                          0x7FC00000u, 0x7F800001u, 0x00000001u, 0x00800000u,
                                          0x7F7FFFFFu, 0xFF7FFFFFu, 0x3F800000u})
              : static_cast<std::uint32_t>((sign << 31) | (std::uint64_t(127 + exponent) << 23) |
                                           (bits & 0x7FFFFF));
      return storeAs(out, v);
    }
    case DataType::kFloat64: {
      const std::uint64_t v =
          choice == 0
              ? pick<std::uint64_t>(rng, {0x0ull, 0x8000000000000000ull, 0x7FF0000000000000ull,
                                          0xFFF0000000000000ull, 0x7FF8000000000000ull,
                                          0x7FF0000000000001ull, 0x1ull, 0x0010000000000000ull,
                                          0x7FEFFFFFFFFFFFFFull, 0x3FF0000000000000ull})
              : (sign << 63) | (std::uint64_t(1023 + exponent) << 52) | (bits & 0xFFFFFFFFFFFFFull);
      return storeAs(out, v);
    }
    case DataType::kFloat16: {
      std::uint16_t v = static_cast<std::uint16_t>(bits);
      if (choice == 0) {
        v = pick<std::uint16_t>(rng, {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0x0001,
                                      0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00});
      } else if (choice > 2) {
        v = static_cast<std::uint16_t>((sign << 15) | (std::uint64_t(15 + exponent / 2) << 10) |
                                       (bits & 0x3FF));
      }
      return storeAs(out, v);
    }
    case DataType::kBfloat16: {
      std::uint16_t v = static_cast<std::uint16_t>(bits);
      if (choice == 0) {
        v = pick<std::uint16_t>(rng, {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0x0001,
                                      0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80});
      } else if (choice > 2) {
        v = static_cast<std::uint16_t>((sign << 15) | (std::uint64_t(127 + exponent) << 7) |
                                       (bits & 0x7F));
      }
      return storeAs(out, v);
    }
    default:
      std::memcpy(out, &bits, dataTypeSize(type));
  }
}

Bytes randomElements(DataType type, std::size_t count, std::mt19937_64& rng) {
  const std::size_t size = dataTypeSize(type);
  Bytes out(count * size);
  for (std::size_t i = 0; i < count; ++i) randomElement(type, rng, out.data() + i * size);
  return out;
}

// A buffer whose data() is 64-byte aligned, so that offsets from it misalign on purpose.
class Buffer {
 public:
  Buffer(std::size_t bytes, std::mt19937_64& rng) : storage_(bytes + kAlign), size_(bytes) {
    for (unsigned char& byte : storage_) byte = static_cast<unsigned char>(rng());
  }
  unsigned char* data() {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    return storage_.data() + (kAlign - address % kAlign) % kAlign;
  }
  Bytes snapshot() { return Bytes(data(), data() + size_); }
  std::size_t size() const { return size_; }

 private:
  static constexpr std::size_t kAlign = 64;
  Bytes storage_;
  std::size_t size_;
};

// ---- the paths --------------------------------------------------------------------------

// The public functions (whatever dispatch chose), and each available instruction set forced.
struct Path {
  std::string name;
  std::optional<ReduceIsa> isa;

  void reduceInto(void* dst, const void* src, std::size_t count, DataType type,
                  const ReduceOp& op) const {
    if (isa) {
      detail::reduceWithIsa(*isa, dst, dst, src, count, type, op);
    } else {
      algorithms::reduceInto(dst, src, count, type, op);
    }
  }
  void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type,
              const ReduceOp& op) const {
    if (isa) {
      detail::reduceWithIsa(*isa, dst, a, b, count, type, op);
    } else {
      algorithms::reduce(dst, a, b, count, type, op);
    }
  }
};

std::vector<ReduceIsa> availableIsas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : detail::kAllReduceIsas) {
    if (detail::reduceIsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

std::vector<Path> allPaths() {
  std::vector<Path> paths{{std::string("dispatched:") + reduceIsa(), std::nullopt}};
  for (ReduceIsa isa : availableIsas()) paths.push_back({detail::reduceIsaName(isa), isa});
  return paths;
}

// ---- every dtype x op -------------------------------------------------------------------

struct KernelCase {
  DataType type;
  ReduceOpKind op;
};

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const KernelCase& c, std::ostream* os) {
  *os << dataTypeName(c.type) << " " << reduceOpKindName(c.op);
}

std::vector<KernelCase> allKernelCases() {
  std::vector<KernelCase> cases;
  for (DataType type : kAllDataTypes) {
    for (ReduceOpKind op :
         {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin, ReduceOpKind::kMax,
          ReduceOpKind::kAvg, ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor}) {
      if (ReduceOp(op).isBitwise() && isFloatingPoint(type)) continue;
      cases.push_back({type, op});
    }
  }
  return cases;
}

enum class Mode { kInto, kSeparate, kDstIsA, kDstIsB, kDstIsBoth };
constexpr Mode kModes[] = {Mode::kInto, Mode::kSeparate, Mode::kDstIsA, Mode::kDstIsB,
                           Mode::kDstIsBoth};

const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::kInto:
      return "reduceInto(dst, b)";
    case Mode::kSeparate:
      return "reduce(dst, a, b)";
    case Mode::kDstIsA:
      return "reduce(dst, dst, b)";
    case Mode::kDstIsB:
      return "reduce(dst, a, dst)";
    case Mode::kDstIsBoth:
      return "reduce(dst, dst, dst)";
  }
  return "?";
}

// Runs one reduction of `count` elements with dst, a and b at the given byte offsets from
// 64-byte aligned buffers with random bytes around them, and checks the result against the
// reference, the bytes around dst, and that a and b were not written.
void checkOneReduction(const Path& path, DataType type, ReduceOpKind kind, std::size_t count,
                       std::size_t dstOffset, std::size_t aOffset, std::size_t bOffset, Mode mode,
                       std::mt19937_64& rng) {
  SCOPED_TRACE(path.name + " " + modeName(mode) + " " + dataTypeName(type) + " " +
               reduceOpKindName(kind) + " count " + std::to_string(count) + ", byte offsets dst " +
               std::to_string(dstOffset) + " a " + std::to_string(aOffset) + " b " +
               std::to_string(bOffset));
  const ReduceOp op(kind);
  const std::size_t size = dataTypeSize(type);
  const std::size_t bytes = count * size;
  const std::size_t total = 64 + bytes + 5 * size;  // room for every offset and a trailing guard
  Buffer dstBuffer(total, rng);
  Buffer aBuffer(total, rng);
  Buffer bBuffer(total, rng);
  unsigned char* dst = dstBuffer.data() + dstOffset;
  unsigned char* a = aBuffer.data() + aOffset;
  unsigned char* b = bBuffer.data() + bOffset;
  const Bytes x = randomElements(type, count, rng);
  const Bytes y = randomElements(type, count, rng);
  std::copy(x.begin(), x.end(), a);
  std::copy(y.begin(), y.end(), b);

  Bytes want;
  switch (mode) {
    case Mode::kInto:
    case Mode::kDstIsA:
    case Mode::kDstIsBoth:
      std::copy(x.begin(), x.end(), dst);
      break;
    case Mode::kDstIsB:
      std::copy(y.begin(), y.end(), dst);
      break;
    case Mode::kSeparate:
      break;
  }
  want = mode == Mode::kDstIsBoth ? referenceReduce(type, kind, x.data(), x.data(), count)
                                  : referenceReduce(type, kind, x.data(), y.data(), count);
  const Bytes dstBefore = dstBuffer.snapshot();
  const Bytes aBefore = aBuffer.snapshot();
  const Bytes bBefore = bBuffer.snapshot();

  switch (mode) {
    case Mode::kInto:
      path.reduceInto(dst, b, count, type, op);
      break;
    case Mode::kSeparate:
      path.reduce(dst, a, b, count, type, op);
      break;
    case Mode::kDstIsA:
      path.reduce(dst, dst, b, count, type, op);
      break;
    case Mode::kDstIsB:
      path.reduce(dst, a, dst, count, type, op);
      break;
    case Mode::kDstIsBoth:
      path.reduce(dst, dst, dst, count, type, op);
      break;
  }

  const Bytes dstAfter = dstBuffer.snapshot();
  const unsigned char* yUsed = mode == Mode::kDstIsBoth ? x.data() : y.data();
  EXPECT_TRUE(elementsMatch(type, dst, want.data(), x.data(), yUsed, count));
  EXPECT_TRUE(std::equal(dstAfter.begin(), dstAfter.begin() + dstOffset, dstBefore.begin()))
      << "bytes before dst were written";
  EXPECT_TRUE(std::equal(dstAfter.begin() + dstOffset + bytes, dstAfter.end(),
                         dstBefore.begin() + dstOffset + bytes))
      << "bytes after dst + count were written";
  EXPECT_EQ(aBuffer.snapshot(), aBefore) << "a was written";
  EXPECT_EQ(bBuffer.snapshot(), bBefore) << "b was written";
}

class ReduceKernelTest : public testing::TestWithParam<KernelCase> {};

TEST_P(ReduceKernelTest, MatchesReferenceForEveryCountOffsetAndAliasing) {
  const auto [type, kind] = GetParam();
  const std::size_t size = dataTypeSize(type);
  std::mt19937_64 rng(1000 * static_cast<unsigned>(type) + static_cast<unsigned>(kind));
  for (const Path& path : allPaths()) {
    for (std::size_t count : kCounts) {
      for (std::size_t offset : {1, 2, 3}) {  // in elements; a and b offset differently
        for (Mode mode : kModes) {
          checkOneReduction(path, type, kind, count, offset * size, (4 - offset) * size,
                            (offset % 3 + 1) * size, mode, rng);
          if (HasFailure()) return;  // the first failing case says enough
        }
      }
    }
  }
}

// Byte offsets that are no multiple of the element size (and differ between dst, a and b).
TEST_P(ReduceKernelTest, OddByteOffsets) {
  const auto [type, kind] = GetParam();
  std::mt19937_64 rng(7 + static_cast<unsigned>(type));
  for (const Path& path : allPaths()) {
    for (std::size_t count : {std::size_t{33}, std::size_t{1000}}) {
      checkOneReduction(path, type, kind, count, 1, 3, 5, Mode::kSeparate, rng);
      checkOneReduction(path, type, kind, count, 7, 0, 2, Mode::kInto, rng);
      if (HasFailure()) return;
    }
  }
}

// Every path must give the bits the scalar path gives (NaN payloads aside): the 16-bit floats
// over all 65536 patterns against shuffled ones, the others over random values.
TEST_P(ReduceKernelTest, EveryInstructionSetGivesTheSameBits) {
  const auto [type, kind] = GetParam();
  const std::vector<ReduceIsa> isas = availableIsas();
  if (isas.size() < 2) {
    GTEST_SKIP() << "only the scalar path is available on this CPU (the vector paths need "
                    "AVX2, FMA and F16C): nothing to compare";
  }
  const std::size_t size = dataTypeSize(type);
  std::mt19937_64 rng(99 + static_cast<unsigned>(type));
  Bytes x;
  Bytes y;
  if (size == 2) {
    std::vector<std::uint16_t> all(65536);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
    std::vector<std::uint16_t> shuffled = all;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    x.resize(all.size() * 2);
    y.resize(all.size() * 2);
    std::memcpy(x.data(), all.data(), x.size());
    std::memcpy(y.data(), shuffled.data(), y.size());
    const Bytes moreX = randomElements(type, 20011, rng);
    const Bytes moreY = randomElements(type, 20011, rng);
    x.insert(x.end(), moreX.begin(), moreX.end());
    y.insert(y.end(), moreY.begin(), moreY.end());
  } else {
    x = randomElements(type, 20011, rng);
    y = randomElements(type, 20011, rng);
  }
  const std::size_t count = x.size() / size;
  Bytes scalar(x.size());
  detail::reduceWithIsa(ReduceIsa::kScalar, scalar.data(), x.data(), y.data(), count, type,
                        ReduceOp(kind));
  for (ReduceIsa isa : isas) {
    if (isa == ReduceIsa::kScalar) continue;
    Bytes got(x.size());
    detail::reduceWithIsa(isa, got.data(), x.data(), y.data(), count, type, ReduceOp(kind));
    EXPECT_TRUE(elementsMatch(type, got.data(), scalar.data(), x.data(), y.data(), count))
        << detail::reduceIsaName(isa) << " vs scalar";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, ReduceKernelTest, testing::ValuesIn(allKernelCases()),
                         [](const testing::TestParamInfo<KernelCase>& caseInfo) {
                           return std::string(dataTypeName(caseInfo.param.type)) + "_" +
                                  reduceOpKindName(caseInfo.param.op);
                         });

// ---- explicit cases ---------------------------------------------------------------------

// x (op) y == want for every element of 200 (every vector width's body and tail), every path.
template <class T>
void expectEveryElement(DataType type, ReduceOpKind kind, T x, T y, T want) {
  constexpr std::size_t kCount = 200;
  const std::vector<T> xs(kCount, x);
  const std::vector<T> ys(kCount, y);
  const Bytes wantBytes = [&] {
    Bytes out(kCount * sizeof(T));
    for (std::size_t i = 0; i < kCount; ++i) storeAs<T>(out.data() + i * sizeof(T), want);
    return out;
  }();
  for (const Path& path : allPaths()) {
    std::vector<T> got = xs;
    path.reduceInto(got.data(), ys.data(), kCount, type, kind);
    EXPECT_TRUE(elementsMatch(type, reinterpret_cast<const unsigned char*>(got.data()),
                              wantBytes.data(), reinterpret_cast<const unsigned char*>(xs.data()),
                              reinterpret_cast<const unsigned char*>(ys.data()), kCount))
        << path.name << " " << dataTypeName(type) << " " << reduceOpKindName(kind);
  }
}

TEST(ReduceTest, IntegerSumAndProdWrapAroundAndMinMaxAreSigned) {
  using L8 = std::numeric_limits<std::int8_t>;
  using L32 = std::numeric_limits<std::int32_t>;
  using L64 = std::numeric_limits<std::int64_t>;
  const auto kSum = ReduceOpKind::kSum;
  const auto kProd = ReduceOpKind::kProd;
  expectEveryElement<std::int8_t>(DataType::kInt8, kSum, L8::max(), 1, L8::min());
  expectEveryElement<std::int8_t>(DataType::kInt8, kSum, L8::min(), -1, L8::max());
  expectEveryElement<std::int8_t>(DataType::kInt8, kProd, 16, 16, 0);
  expectEveryElement<std::int8_t>(DataType::kInt8, kProd, L8::min(), -1, L8::min());
  expectEveryElement<std::int8_t>(DataType::kInt8, kProd, 100, 3, 44);  // 300 - 256
  expectEveryElement<std::uint8_t>(DataType::kUint8, kSum, 255, 1, 0);
  expectEveryElement<std::uint8_t>(DataType::kUint8, kProd, 16, 17, 16);  // 272 - 256
  expectEveryElement<std::int32_t>(DataType::kInt32, kSum, L32::max(), 1, L32::min());
  expectEveryElement<std::int32_t>(DataType::kInt32, kProd, L32::min(), -1, L32::min());
  expectEveryElement<std::int32_t>(DataType::kInt32, kProd, 65536, 65536, 0);
  expectEveryElement<std::int64_t>(DataType::kInt64, kSum, L64::max(), 1, L64::min());
  expectEveryElement<std::int64_t>(DataType::kInt64, kProd, L64::min(), -1, L64::min());
  // (2^32 + 1)^2 = 2^64 + 2^33 + 1
  expectEveryElement<std::int64_t>(DataType::kInt64, kProd, (1ll << 32) + 1, (1ll << 32) + 1,
                                   (1ll << 33) + 1);
  expectEveryElement<std::int64_t>(DataType::kInt64, kProd, -3, 5, -15);
  // Signed comparisons where an unsigned one would answer differently.
  expectEveryElement<std::int8_t>(DataType::kInt8, ReduceOpKind::kMin, -1, 1, -1);
  expectEveryElement<std::int8_t>(DataType::kInt8, ReduceOpKind::kMax, L8::min(), 0, 0);
  expectEveryElement<std::uint8_t>(DataType::kUint8, ReduceOpKind::kMax, 255, 1, 255);
  expectEveryElement<std::int32_t>(DataType::kInt32, ReduceOpKind::kMin, -1, 1, -1);
  expectEveryElement<std::int64_t>(DataType::kInt64, ReduceOpKind::kMin, -1, 1, -1);
  expectEveryElement<std::int64_t>(DataType::kInt64, ReduceOpKind::kMax, L64::min(), L64::max(),
                                   L64::max());
  expectEveryElement<std::int64_t>(DataType::kInt64, ReduceOpKind::kBxor, -1, 0x0F0F, ~0x0F0Fll);
}

struct RoundingCase {
  ReduceOpKind op;
  std::uint16_t x;
  std::uint16_t y;
  std::uint16_t want;  // 0x7E00 / 0x7FC0: any NaN
  const char* why;
};

void checkRoundingCases(DataType type, const Format& format,
                        std::initializer_list<RoundingCase> cases) {
  for (const RoundingCase& c : cases) {
    SCOPED_TRACE(c.why);
    // The reference agrees with the hand-computed answer (so it can be trusted elsewhere) ...
    const double exact = referenceFloat(c.op, decode(c.x, format), decode(c.y, format));
    const std::uint16_t reference = roundTo(exact, format);
    EXPECT_TRUE(sameElement(type, reinterpret_cast<const unsigned char*>(&reference),
                            reinterpret_cast<const unsigned char*>(&c.want)))
        << "reference " << std::hex << reference << " want " << c.want;
    // ... and so does every path.
    expectEveryElement<std::uint16_t>(type, c.op, c.x, c.y, c.want);
  }
}

TEST(ReduceTest, Float16RoundsOnceToNearestEven) {
  const auto kSum = ReduceOpKind::kSum;
  const auto kProd = ReduceOpKind::kProd;
  checkRoundingCases(
      DataType::kFloat16, kHalf,
      {
          {kSum, 0x3C00, 0x1000, 0x3C00, "1 + 2^-11: a tie, down to the even 1"},
          {kSum, 0x3C01, 0x1000, 0x3C02, "(1 + 2^-10) + 2^-11: a tie, up to the even one"},
          {kSum, 0x3C00, 0x1001, 0x3C01, "just above the tie rounds up"},
          {kSum, 0x7BFF, 0x4B80, 0x7BFF, "65504 + 15 = 65519 stays finite"},
          {kSum, 0x7BFF, 0x4C00, 0x7C00, "65504 + 16 = 65520: a tie, up to infinity"},
          {kSum, 0xFBFF, 0xCC00, 0xFC00, "-65504 - 16 overflows to -infinity"},
          {kSum, 0x7C00, 0x3C00, 0x7C00, "inf + 1 = inf"},
          {kSum, 0x7C00, 0xFC00, 0x7E00, "inf - inf = NaN"},
          {kSum, 0x7E00, 0x3C00, 0x7E00, "NaN + 1 = NaN"},
          {kSum, 0x3C00, 0x7E01, 0x7E00, "1 + NaN = NaN"},
          {kSum, 0x7C01, 0x0000, 0x7E00, "a signaling NaN stays a NaN (not infinity)"},
          {kSum, 0x03FF, 0x0001, 0x0400, "largest subnormal + smallest = smallest normal"},
          {kSum, 0x8000, 0x8000, 0x8000, "-0 + -0 = -0"},
          {kSum, 0x8000, 0x0000, 0x0000, "-0 + +0 = +0"},
          {kProd, 0x0001, 0x3800, 0x0000, "2^-24 * 0.5: a tie, down to 0"},
          {kProd, 0x0003, 0x3800, 0x0002, "3 * 2^-24 * 0.5: a tie, up to 2 * 2^-24"},
          {kProd, 0x8001, 0x3800, 0x8000, "-2^-24 * 0.5 = -0"},
          {kProd, 0x5C00, 0x5C00, 0x7C00, "256 * 256 = 65536 overflows"},
          {kProd, 0x5BFF, 0x5BFF, 0x7BFE, "255.875^2 = 65472.02 rounds to 65472"},
          {kProd, 0x3555, 0x4200, 0x3C00, "0.33325 * 3 = 1 - 2^-12: a tie, up to the even 1"},
          {ReduceOpKind::kMin, 0x3C00, 0xBC00, 0xBC00, "min(1, -1)"},
          {ReduceOpKind::kMin, 0x3C00, 0x7E00, 0x7E00, "min(1, NaN) = NaN"},
          {ReduceOpKind::kMax, 0x7E00, 0x3C00, 0x7E00, "max(NaN, 1) = NaN"},
          {ReduceOpKind::kMax, 0xFC00, 0x0001, 0x0001, "max(-inf, 2^-24)"},
      });
}

TEST(ReduceTest, Bfloat16RoundsOnceToNearestEven) {
  const auto kSum = ReduceOpKind::kSum;
  const auto kProd = ReduceOpKind::kProd;
  checkRoundingCases(
      DataType::kBfloat16, kBfloat16,
      {
          {kSum, 0x3F80, 0x3B80, 0x3F80, "1 + 2^-8: a tie, down to the even 1"},
          {kSum, 0x3F81, 0x3B80, 0x3F82, "(1 + 2^-7) + 2^-8: a tie, up to the even one"},
          {kSum, 0x3F80, 0x3B81, 0x3F81, "just above the tie rounds up"},
          {kSum, 0x7F7F, 0x7B00, 0x7F80, "max + half an ulp: a tie, up to infinity"},
          {kSum, 0x7F7F, 0x7A80, 0x7F7F, "max + a quarter ulp stays max"},
          {kSum, 0x7F80, 0xFF80, 0x7FC0, "inf - inf = NaN"},
          {kSum, 0x7FC0, 0x3F80, 0x7FC0, "NaN + 1 = NaN"},
          {kSum, 0x7F81, 0x0000, 0x7FC0, "a signaling NaN stays a NaN (not infinity)"},
          {kSum, 0xFF80, 0xBF80, 0xFF80, "-inf - 1 = -inf"},
          {kSum, 0x0001, 0x0001, 0x0002, "subnormals add exactly"},
          {kSum, 0x007F, 0x0001, 0x0080, "largest subnormal + smallest = smallest normal"},
          {kSum, 0x8000, 0x8000, 0x8000, "-0 + -0 = -0"},
          {kProd, 0x0001, 0x3F00, 0x0000, "2^-133 * 0.5: a tie, down to 0"},
          {kProd, 0x0003, 0x3F00, 0x0002, "3 * 2^-133 * 0.5: a tie, up to 2 * 2^-133"},
          {kProd, 0x3FC0, 0x3FC0, 0x4010, "1.5 * 1.5 = 2.25 exactly"},
          {kProd, 0x3F81, 0x3F81, 0x3F82, "(1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 rounds down"},
          {ReduceOpKind::kMin, 0x3F80, 0x7FC0, 0x7FC0, "min(1, NaN) = NaN"},
          {ReduceOpKind::kMax, 0xFF80, 0x0001, 0x0001, "max(-inf, 2^-133)"},
      });
}

TEST(ReduceTest, FloatMinMaxPropagateNanAndTakeTheSecondOperandOnTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMin, 1.0f, nan, nan);
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMin, nan, 1.0f, nan);
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMax, nan, -inf, nan);
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMax, -inf, 2.0f, 2.0f);
  expectEveryElement<double>(DataType::kFloat64, ReduceOpKind::kMax, 1.0, nan, nan);
  expectEveryElement<double>(DataType::kFloat64, ReduceOpKind::kMin, -0.0, 0.0, 0.0);
  expectEveryElement<double>(DataType::kFloat64, ReduceOpKind::kMin, 0.0, -0.0, -0.0);
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMax, -0.0f, 0.0f, 0.0f);
  expectEveryElement<float>(DataType::kFloat32, ReduceOpKind::kMax, 0.0f, -0.0f, -0.0f);
}

// ---- custom ops -------------------------------------------------------------------------

TEST(ReduceTest, CustomOpsGetTheOperandsInOrder) {
  int calls = 0;
  std::optional<DataType> seenType;
  // inout = 2 * inout + in: the order of the operands shows in the result.
  auto twicePlus = [&](void* inout, const void* in, std::size_t count, DataType type) {
    ++calls;
    seenType = type;
    auto* io = static_cast<std::int32_t*>(inout);
    const auto* b = static_cast<const std::int32_t*>(in);
    for (std::size_t i = 0; i < count; ++i) io[i] = 2 * io[i] + b[i];
  };
  const ReduceOp ordered = ReduceOp::custom(twicePlus, "twice_plus", /*commutative=*/false);
  constexpr std::size_t kCount = 37;
  std::vector<std::int32_t> a(kCount);
  std::vector<std::int32_t> b(kCount);
  std::vector<std::int32_t> want(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<std::int32_t>(i) - 10;
    b[i] = 1000 + static_cast<std::int32_t>(i) * 7;
    want[i] = 2 * a[i] + b[i];
  }
  for (const Path& path : allPaths()) {
    SCOPED_TRACE(path.name);
    calls = 0;
    std::vector<std::int32_t> dst = a;
    path.reduceInto(dst.data(), b.data(), kCount, DataType::kInt32, ordered);
    EXPECT_EQ(dst, want) << "reduceInto";
    EXPECT_EQ(seenType, DataType::kInt32);

    std::vector<std::int32_t> separate(kCount, -1);
    std::vector<std::int32_t> aCopy = a;
    std::vector<std::int32_t> bCopy = b;
    path.reduce(separate.data(), aCopy.data(), bCopy.data(), kCount, DataType::kInt32, ordered);
    EXPECT_EQ(separate, want) << "reduce into a third buffer";
    EXPECT_EQ(aCopy, a) << "a was written";
    EXPECT_EQ(bCopy, b) << "b was written";

    std::vector<std::int32_t> dstIsA = a;
    path.reduce(dstIsA.data(), dstIsA.data(), b.data(), kCount, DataType::kInt32, ordered);
    EXPECT_EQ(dstIsA, want) << "dst == a";

    std::vector<std::int32_t> dstIsB = b;
    path.reduce(dstIsB.data(), a.data(), dstIsB.data(), kCount, DataType::kInt32, ordered);
    EXPECT_EQ(dstIsB, want) << "dst == b, not commutative: b must be saved before a is copied";
    EXPECT_EQ(calls, 4);

    path.reduce(nullptr, nullptr, nullptr, 0, DataType::kInt32, ordered);
    path.reduceInto(nullptr, nullptr, 0, DataType::kInt32, ordered);
    EXPECT_EQ(calls, 4) << "count 0 must not call the function";
  }

  // A commutative op with dst == b may reduce a into b directly.
  const void* inSeen = nullptr;
  const ReduceOp plus = ReduceOp::custom(
      [&](void* inout, const void* in, std::size_t count, DataType) {
        inSeen = in;
        auto* io = static_cast<std::int32_t*>(inout);
        const auto* x = static_cast<const std::int32_t*>(in);
        for (std::size_t i = 0; i < count; ++i) io[i] += x[i];
      },
      "plus", /*commutative=*/true);
  std::vector<std::int32_t> dstIsB = b;
  reduce(dstIsB.data(), a.data(), dstIsB.data(), kCount, DataType::kInt32, plus);
  for (std::size_t i = 0; i < kCount; ++i) EXPECT_EQ(dstIsB[i], a[i] + b[i]) << i;
  EXPECT_EQ(inSeen, a.data());
}

TEST(ReduceTest, RefusesWhatValidateRefuses) {
  float x[4] = {1, 2, 3, 4};
  const float y[4] = {1, 2, 3, 4};
  for (ReduceOpKind kind : {ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor}) {
    for (DataType type : kAllDataTypes) {
      if (!isFloatingPoint(type)) continue;
      EXPECT_THROW(reduceInto(x, y, 2, type, kind), std::logic_error)
          << reduceOpKindName(kind) << " " << dataTypeName(type);
    }
  }
  EXPECT_THROW(reduceInto(x, y, 4, DataType::kFloat32, ReduceOp::custom(nullptr)),
               std::logic_error);
  EXPECT_THROW(divideBy(x, 4, DataType::kFloat32, 0), std::logic_error);
  EXPECT_EQ(x[0], 1.0f) << "a refused call must not touch the data";
}

// ---- divideBy ---------------------------------------------------------------------------

template <class T>
void expectDivided(DataType type, std::vector<T> values, std::uint64_t divisor,
                   const std::vector<T>& want) {
  divideBy(values.data(), values.size(), type, divisor);
  const Bytes wantBytes(reinterpret_cast<const unsigned char*>(want.data()),
                        reinterpret_cast<const unsigned char*>(want.data() + want.size()));
  EXPECT_TRUE(elementsMatch(type, reinterpret_cast<const unsigned char*>(values.data()),
                            wantBytes.data(), wantBytes.data(), wantBytes.data(), want.size()))
      << dataTypeName(type) << " / " << divisor;
}

TEST(ReduceTest, DivideByTruncatesIntegersAndRoundsFloatsOnce) {
  using L64 = std::numeric_limits<std::int64_t>;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  expectDivided<std::int8_t>(DataType::kInt8, {-7, 7, -128, 127, 0, -1}, 2, {-3, 3, -64, 63, 0, 0});
  expectDivided<std::int8_t>(DataType::kInt8, {-128, 100}, 3, {-42, 33});
  expectDivided<std::uint8_t>(DataType::kUint8, {255, 1, 200}, 2, {127, 0, 100});
  expectDivided<std::int32_t>(DataType::kInt32, {std::numeric_limits<std::int32_t>::min(), -7}, 2,
                              {-1073741824, -3});
  expectDivided<std::int64_t>(DataType::kInt64, {L64::min(), L64::max(), -5, 6}, 1ull << 63,
                              {-1, 0, 0, 0});
  expectDivided<std::int64_t>(DataType::kInt64, {L64::min(), -5}, ~0ull, {0, 0});
  expectDivided<std::int64_t>(DataType::kInt64, {-9, 9}, 4, {-2, 2});
  expectDivided<float>(DataType::kFloat32, {7.0f, -0.0f, nan, inf, 1.0f}, 2,
                       {3.5f, -0.0f, nan, inf, 0.5f});
  expectDivided<float>(DataType::kFloat32, {1.0f}, 3, {1.0f / 3.0f});
  expectDivided<double>(DataType::kFloat64, {1.0, -6.0}, 3, {1.0 / 3.0, -2.0});
  // 1/3 = 0x3555 (0.33325); 2^-24 / 2 ties to 0; 3 * 2^-24 / 2 ties up to 2 * 2^-24.
  expectDivided<std::uint16_t>(DataType::kFloat16, {0x3C00, 0x0001, 0x0003, 0x7E00, 0xFC00}, 3,
                               {0x3555, 0x0000, 0x0001, 0x7E00, 0xFC00});
  expectDivided<std::uint16_t>(DataType::kFloat16, {0x3C00, 0x0001, 0x0003}, 2,
                               {0x3800, 0x0000, 0x0002});
  // 1/3 = 0x3EAAAAAB in float32 rounds to 0x3EAB.
  expectDivided<std::uint16_t>(DataType::kBfloat16, {0x3F80, 0x7FC0, 0xFF80}, 3,
                               {0x3EAB, 0x7FC0, 0xFF80});
  // Divisor 1 changes nothing; count 0 touches nothing.
  expectDivided<std::int32_t>(DataType::kInt32, {-7, 9}, 1, {-7, 9});
  divideBy(nullptr, 0, DataType::kFloat32, 4);
}

TEST(ReduceTest, DivideByMatchesReferenceForEveryTypeOnUnalignedData) {
  std::mt19937_64 rng(5);
  for (DataType type : kAllDataTypes) {
    for (std::uint64_t divisor : {2ull, 3ull, 7ull, 64ull, 1000ull}) {
      SCOPED_TRACE(std::string(dataTypeName(type)) + " / " + std::to_string(divisor));
      const std::size_t size = dataTypeSize(type);
      constexpr std::size_t kCount = 1001;
      constexpr std::size_t kOffset = 3;  // bytes: unaligned for every element size but 1
      const Bytes values = randomElements(type, kCount, rng);
      Buffer buffer(kOffset + values.size() + 16, rng);
      std::copy(values.begin(), values.end(), buffer.data() + kOffset);
      const Bytes before = buffer.snapshot();
      divideBy(buffer.data() + kOffset, kCount, type, divisor);
      const Bytes after = buffer.snapshot();

      Bytes want(values.size());
      for (std::size_t i = 0; i < kCount; ++i) {
        const unsigned char* x = values.data() + i * size;
        unsigned char* out = want.data() + i * size;
        withType(type, [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
            storeAs<T>(out, static_cast<T>(static_cast<std::int64_t>(loadAs<T>(x)) /
                                           static_cast<std::int64_t>(divisor)));
          } else if constexpr (std::is_integral_v<T>) {
            storeAs<T>(out, static_cast<T>(loadAs<T>(x) / divisor));
          } else if constexpr (std::is_floating_point_v<T>) {
            // One correctly rounded division (double rounding through double is harmless).
            storeAs<T>(out, static_cast<T>(static_cast<double>(loadAs<T>(x)) /
                                           static_cast<double>(divisor)));
          } else {
            const Format& f = formatOf<T>();
            storeAs<std::uint16_t>(
                out,
                roundTo(decode(loadAs<std::uint16_t>(x), f) / static_cast<double>(divisor), f));
          }
        });
      }
      EXPECT_TRUE(elementsMatch(type, after.data() + kOffset, want.data(), values.data(),
                                values.data(), kCount));
      EXPECT_TRUE(std::equal(after.begin(), after.begin() + kOffset, before.begin()));
      EXPECT_TRUE(std::equal(after.begin() + kOffset + values.size(), after.end(),
                             before.begin() + kOffset + values.size()));
    }
  }
}

// ---- dispatch ---------------------------------------------------------------------------

TEST(ReduceTest, DispatchPicksTheBestAvailableInstructionSet) {
  const std::string name = reduceIsa();
  EXPECT_TRUE(name == "avx512" || name == "avx2" || name == "scalar") << name;
  EXPECT_EQ(name, detail::reduceIsaName(detail::selectedReduceIsa()));
  EXPECT_TRUE(detail::reduceIsaAvailable(ReduceIsa::kScalar));
  ReduceIsa best = ReduceIsa::kScalar;
  for (ReduceIsa isa : {ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (detail::reduceIsaAvailable(isa)) best = isa;
  }
  EXPECT_EQ(detail::selectedReduceIsa(), best);
#if defined(__x86_64__) && defined(__GNUC__)
  // What the library says is available matches CPUID as read here.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  EXPECT_EQ(detail::reduceIsaAvailable(ReduceIsa::kAvx2), avx2);
  EXPECT_EQ(detail::reduceIsaAvailable(ReduceIsa::kAvx512), avx512);
#endif
  // A path that is not available is refused instead of dying of SIGILL.
  float x = 1;
  for (ReduceIsa isa : detail::kAllReduceIsas) {
    if (detail::reduceIsaAvailable(isa)) continue;
    EXPECT_THROW(detail::reduceWithIsa(isa, &x, &x, &x, 1, DataType::kFloat32, ReduceOpKind::kSum),
                 std::logic_error)
        << detail::reduceIsaName(isa);
  }
  std::printf("reduce kernels: dispatch chose %s\n", name.c_str());
}

}  // namespace
}  // namespace collx::algorithms
