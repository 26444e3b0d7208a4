#include "reference.h"

#include <cmath>

namespace collx::test {

std::uint16_t floatToHalf(float f) {
  _Float16 h = static_cast<_Float16>(f);
  std::uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float halfToFloat(std::uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

std::uint16_t floatToBfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

float bfloat16ToFloat(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void storeValue(void* data, std::uint64_t i, DataType type, double v) {
  auto* p = static_cast<std::uint8_t*>(data);
  switch (type) {
    case DataType::kInt8:
      reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      break;
    case DataType::kUint8:
      reinterpret_cast<std::uint8_t*>(p)[i] =
          static_cast<std::uint8_t>(static_cast<std::int64_t>(v));
      break;
    case DataType::kInt32:
      reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      break;
    case DataType::kInt64:
      reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      break;
    case DataType::kFloat16: {
      std::uint16_t h = floatToHalf(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case DataType::kBfloat16: {
      std::uint16_t b = floatToBfloat16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &b, 2);
      break;
    }
    case DataType::kFloat32:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
  }
}

double loadValue(const void* data, std::uint64_t i, DataType type) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  switch (type) {
    case DataType::kInt8:
      return reinterpret_cast<const std::int8_t*>(p)[i];
    case DataType::kUint8:
      return reinterpret_cast<const std::uint8_t*>(p)[i];
    case DataType::kInt32:
      return reinterpret_cast<const std::int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
    case DataType::kFloat16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return halfToFloat(h);
    }
    case DataType::kBfloat16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bfloat16ToFloat(b);
    }
    case DataType::kFloat32:
      return reinterpret_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return reinterpret_cast<const double*>(p)[i];
  }
  return 0;
}

double inputValue(int rank, std::uint64_t i, ReduceOpKind op) {
  std::uint64_t mix = static_cast<std::uint64_t>(rank) * 7 + i * 3;
  if (op == ReduceOpKind::kProd) {
    switch ((static_cast<std::uint64_t>(rank) + i) % 4) {
      case 0:
        return 2;
      case 1:
        return -1;
      default:
        return 1;
    }
  }
  return static_cast<double>(static_cast<std::int64_t>(mix % 9) - 4);
}

std::vector<std::uint8_t> makeInput(int rank, std::uint64_t count, DataType type, ReduceOpKind op) {
  std::vector<std::uint8_t> out(count * dataTypeSize(type));
  for (std::uint64_t i = 0; i < count; ++i)
    storeValue(out.data(), i, type, inputValue(rank, i, op));
  return out;
}

namespace {

// Integer reduction in the type's width, with wraparound.
template <typename T>
T reduceInt(T a, T b, ReduceOpKind op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOpKind::kSum:
    case ReduceOpKind::kAvg:
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    case ReduceOpKind::kProd:
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    case ReduceOpKind::kMin:
      return a < b ? a : b;
    case ReduceOpKind::kMax:
      return a > b ? a : b;
    case ReduceOpKind::kBand:
      return static_cast<T>(a & b);
    case ReduceOpKind::kBor:
      return static_cast<T>(a | b);
    case ReduceOpKind::kBxor:
      return static_cast<T>(a ^ b);
    case ReduceOpKind::kCustom:
      break;
  }
  return a;
}

template <typename T>
void expectedInt(int size, std::uint64_t count, ReduceOpKind op, DataType type, T* out) {
  for (std::uint64_t i = 0; i < count; ++i) {
    T acc = static_cast<T>(static_cast<std::int64_t>(inputValue(0, i, op)));
    for (int r = 1; r < size; ++r) {
      acc = reduceInt<T>(acc, static_cast<T>(static_cast<std::int64_t>(inputValue(r, i, op))), op);
    }
    if (op == ReduceOpKind::kAvg) acc = static_cast<T>(acc / static_cast<T>(size));
    out[i] = acc;
  }
  (void)type;
}

}  // namespace

std::vector<std::uint8_t> expectedReduction(int size, std::uint64_t count, DataType type,
                                            ReduceOpKind op) {
  std::vector<std::uint8_t> out(count * dataTypeSize(type));
  switch (type) {
    case DataType::kInt8:
      expectedInt<std::int8_t>(size, count, op, type, reinterpret_cast<std::int8_t*>(out.data()));
      return out;
    case DataType::kUint8:
      expectedInt<std::uint8_t>(size, count, op, type, out.data());
      return out;
    case DataType::kInt32:
      expectedInt<std::int32_t>(size, count, op, type, reinterpret_cast<std::int32_t*>(out.data()));
      return out;
    case DataType::kInt64:
      expectedInt<std::int64_t>(size, count, op, type, reinterpret_cast<std::int64_t*>(out.data()));
      return out;
    default:
      break;
  }
  // Floating point: the inputs are small integers, so every partial result is exact.
  for (std::uint64_t i = 0; i < count; ++i) {
    double acc = inputValue(0, i, op);
    for (int r = 1; r < size; ++r) {
      double v = inputValue(r, i, op);
      switch (op) {
        case ReduceOpKind::kSum:
        case ReduceOpKind::kAvg:
          acc += v;
          break;
        case ReduceOpKind::kProd:
          acc *= v;
          break;
        case ReduceOpKind::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOpKind::kMax:
          acc = std::max(acc, v);
          break;
        default:
          break;
      }
    }
    if (op == ReduceOpKind::kAvg) {
      // One division in the type's arithmetic (float32 for the 16-bit types), one rounding.
      if (type == DataType::kFloat64) {
        acc = acc / static_cast<double>(size);
      } else {
        acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(size));
      }
    }
    storeValue(out.data(), i, type, acc);
  }
  return out;
}

std::int64_t firstDifference(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b,
                             DataType type) {
  const std::size_t es = dataTypeSize(type);
  const std::size_t n = std::min(a.size(), b.size()) / es;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::memcmp(a.data() + i * es, b.data() + i * es, es) != 0)
      return static_cast<std::int64_t>(i);
  }
  if (a.size() != b.size()) return static_cast<std::int64_t>(n);
  return -1;
}

std::uint64_t matmul(std::uint64_t a, std::uint64_t b) {
  auto at = [](std::uint64_t m, int i) { return (m >> (16 * i)) & 0xFFFF; };
  const std::uint64_t r0 = at(a, 0) * at(b, 0) + at(a, 1) * at(b, 2);
  const std::uint64_t r1 = at(a, 0) * at(b, 1) + at(a, 1) * at(b, 3);
  const std::uint64_t r2 = at(a, 2) * at(b, 0) + at(a, 3) * at(b, 2);
  const std::uint64_t r3 = at(a, 2) * at(b, 1) + at(a, 3) * at(b, 3);
  return (r0 & 0xFFFF) | (r1 & 0xFFFF) << 16 | (r2 & 0xFFFF) << 32 | (r3 & 0xFFFF) << 48;
}

ReduceOp matmulOp() {
  return ReduceOp::custom(
      [](void* inout, const void* in, std::size_t n, DataType) {
        auto* a = static_cast<std::uint64_t*>(inout);
        const auto* b = static_cast<const std::uint64_t*>(in);
        for (std::size_t i = 0; i < n; ++i) a[i] = matmul(a[i], b[i]);
      },
      "matmul", /*commutative=*/false);
}

std::int64_t matrixOf(int rank, std::uint64_t i) {
  const auto x = static_cast<std::uint64_t>(rank) + 1 + i % 11;
  const auto y = (static_cast<std::uint64_t>(rank) * 3 + i) % 5;
  return static_cast<std::int64_t>(1 | x << 16 | y << 32 | std::uint64_t{1} << 48);
}

}  // namespace collx::test
