// The TCP store's parsers (tcp_store_protocol.h): hellos, requests and replies, with no
// socket in sight.
#include "tcp_store_protocol.h"

#include <algorithm>

#include "collx/rendezvous/store.h"

namespace collx::rendezvous::proto {

namespace {

std::uint32_t u32At(const std::uint8_t* data) {
  std::uint32_t v;
  std::memcpy(&v, data, 4);
  return v;
}

void checkKey(const std::string& key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    throw InvalidArgument(Where{}, "key of " + std::to_string(key.size()) +
                                       " bytes is outside 1.." + std::to_string(kMaxKeyBytes));
  }
}

void checkValue(std::string_view value, const Limits& limits) {
  if (value.size() > limits.maxValueBytes) {
    throw InvalidArgument(Where{}, "value of " + std::to_string(value.size()) +
                                       " bytes exceeds the server's limit of " +
                                       std::to_string(limits.maxValueBytes) + " bytes");
  }
}

}  // namespace

bool parseHelloHead(const std::uint8_t* data, std::size_t size, std::uint32_t& version) {
  if (size < kHelloHeadBytes || std::memcmp(data, kMagic, 4) != 0) return false;
  version = u32At(data + 4);
  return true;
}

ClientHello parseClientHello(const std::uint8_t* data, std::size_t size) {
  ClientHello hello;
  if (size != kClientHelloBytes || !parseHelloHead(data, size, hello.version)) {
    throw ProtocolError("not a collx store client's hello");
  }
  hello.flags = u32At(data + 8);
  std::memcpy(hello.nonce.data(), data + 12, hello.nonce.size());
  return hello;
}

ServerHello parseServerHello(const std::uint8_t* data, std::size_t size) {
  ServerHello hello;
  if (size != kServerHelloBytes || !parseHelloHead(data, size, hello.version)) {
    throw ProtocolError("not a collx store's answer");
  }
  hello.status = u32At(data + 8);
  return hello;
}

Request parseRequest(Op op, Reader& r, const Limits& limits) {
  Request q;
  q.op = op;
  switch (op) {
    case Op::kPing:
      r.expectDone();
      return q;
    case Op::kSet:
      q.keys.emplace_back(r.str());
      q.values.push_back(r.str());
      r.expectDone();
      checkKey(q.keys[0]);
      checkValue(q.values[0], limits);
      return q;
    case Op::kMultiSet: {
      q.keys = r.keys(limits.maxKeys);
      const std::uint32_t count = r.u32();
      if (count != q.keys.size()) {
        throw ProtocolError(std::to_string(q.keys.size()) + " keys but " + std::to_string(count) +
                            " values");
      }
      for (std::uint32_t i = 0; i < count; ++i) q.values.push_back(r.str());
      r.expectDone();
      for (const std::string& key : q.keys) checkKey(key);
      for (std::string_view value : q.values) checkValue(value, limits);
      return q;
    }
    case Op::kGet:
    case Op::kWait:
      q.timeoutMs = r.u64();
      q.keys = r.keys(limits.maxKeys);
      r.expectDone();
      for (const std::string& key : q.keys) checkKey(key);
      return q;
    case Op::kAdd:
      q.keys.emplace_back(r.str());
      q.delta = r.i64();
      r.expectDone();
      checkKey(q.keys[0]);
      return q;
    case Op::kCompareSet:
      q.keys.emplace_back(r.str());
      q.values.push_back(r.str());  // expected
      q.values.push_back(r.str());  // desired
      r.expectDone();
      checkKey(q.keys[0]);
      checkValue(q.values[1], limits);
      return q;
    case Op::kCheck:
      q.keys = r.keys(limits.maxKeys);
      r.expectDone();
      for (const std::string& key : q.keys) checkKey(key);
      return q;
    case Op::kErase:
      q.keys.emplace_back(r.str());
      r.expectDone();
      checkKey(q.keys[0]);
      return q;
  }
  throw ProtocolError("unknown operation " + std::to_string(static_cast<int>(op)));
}

std::uint64_t maxReplyBytes(Op op, std::size_t keys, std::uint64_t maxValueBytes) {
  constexpr std::uint64_t kRest = std::uint64_t{1} << 20;
  constexpr std::uint64_t kFrameLimit = 0xFFFFFFFFull;  // a u32 length
  // A timeout's missing keys, or get's values: at most one of either per key.
  const std::uint64_t perKey =
      4 + std::max<std::uint64_t>(kMaxKeyBytes, op == Op::kGet ? maxValueBytes : 0);
  std::uint64_t most = kRest;
  if (op == Op::kGet || op == Op::kWait) {
    if (keys > (kFrameLimit - kRest) / perKey) return kFrameLimit;
    most += keys * perKey;
  } else if (op == Op::kCompareSet) {
    most += std::min(maxValueBytes, kFrameLimit - kRest);
  }
  return std::min(most, kFrameLimit);
}

Reply parseReply(Op op, std::size_t keys, const std::uint8_t* data, std::size_t size) {
  if (size == 0) throw ProtocolError("an empty reply");
  Reply reply;
  const std::uint8_t status = data[0];
  Reader r(data + 1, size - 1);
  switch (status) {
    case static_cast<std::uint8_t>(Status::kError): {
      reply.status = Status::kError;
      const std::uint8_t kind = r.u8();
      if (kind > static_cast<std::uint8_t>(kLastErrorKind)) {
        throw ProtocolError("an error reply of unknown kind " + std::to_string(kind));
      }
      reply.errorKind = static_cast<ErrorKind>(kind);
      const std::string_view message = r.str();
      reply.message = std::string(message.substr(0, kMaxErrorMessageBytes));
      if (message.size() > kMaxErrorMessageBytes) {
        reply.message += "... (" + std::to_string(message.size()) + " bytes)";
      }
      return reply;
    }
    case static_cast<std::uint8_t>(Status::kTimeout):
      if (op != Op::kGet && op != Op::kWait) {
        throw ProtocolError(std::string("a timeout reply to ") + opName(op));
      }
      reply.status = Status::kTimeout;
      reply.missing = r.keys(keys);
      return reply;
    case static_cast<std::uint8_t>(Status::kOk):
      break;
    default:
      throw ProtocolError("unknown status " + std::to_string(status));
  }
  switch (op) {
    case Op::kGet: {
      const std::uint32_t count = r.u32();
      if (count != keys) {
        throw ProtocolError(std::to_string(count) + " values for " + std::to_string(keys) +
                            " keys");
      }
      reply.values.reserve(count);
      for (std::uint32_t i = 0; i < count; ++i) {
        const std::string_view v = r.str();
        reply.values.emplace_back(v.begin(), v.end());
      }
      break;
    }
    case Op::kAdd:
      reply.number = r.i64();
      break;
    case Op::kCompareSet: {
      const std::string_view v = r.str();
      reply.values.emplace_back(v.begin(), v.end());
      break;
    }
    case Op::kCheck:
    case Op::kErase:
      reply.flag = r.u8() != 0;
      break;
    case Op::kPing:
    case Op::kSet:
    case Op::kMultiSet:
    case Op::kWait:
      break;
  }
  return reply;
}

}  // namespace collx::rendezvous::proto
