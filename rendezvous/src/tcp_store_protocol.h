// The TCP store's wire protocol (internal to the client and the server).
//
// Connection: the client sends a hello, "CLXS" + u32 version + u32 flags (kHoldsSecret) +
// a nonce Nc (32 random bytes); the server answers "CLXS" + u32 version + u32 status:
// - kHelloOk: a server without a job secret serves at once (a client that holds a secret
//   refuses it: it is not its job's store);
// - kHelloChallenge, followed by the server's nonce Ns and its proof
//   Ms = HMAC(store key, "server" | Nc | Ns): the client checks Ms first (a fake store cannot
//   make it), then sends its proof Mc = HMAC(store key, "client" | Nc | Ns); the server
//   answers u32 kHelloOk, or kHelloAuthFailed and closes. Nothing is served before that, and
//   a client that fails learns nothing of the keys. The secret never crosses the network;
//   the store key is the job secret's (secure::Purpose::kStore).
// - kHelloBadVersion, kHelloTooManyConnections, kHelloAuthRequired (the client holds no
//   secret): the server closes the connection.
// - kHelloBusy, in place of the server's hello or of the proof's result: the server closed
//   this handshake to make room for newer ones (more clients than its limits were in their
//   handshakes at once, as when hundreds of ranks start together). A client of the job
//   connects again, backing off, until its deadline.
// A client that does not finish the handshake within the server's handshake timeout is
// closed.
//
// Then requests and replies alternate, one request in flight per connection:
//   request: u32 length | u8 op     | payload        (length counts op + payload)
//   reply:   u32 length | u8 status | payload        (length counts status + payload)
// All integers are little endian; byte strings are u32 length + bytes; key lists are
// u32 count + strings.
//
//   op          request payload                        ok reply payload
//   kPing       -                                      -
//   kSet        key, value                             -
//   kMultiSet   keys, u32 count + values               -
//   kGet        u64 timeout_ms, keys                   u32 count + values   (get = multiGet)
//   kWait       u64 timeout_ms, keys                   -
//   kAdd        key, i64 delta                         i64 new value
//   kCompareSet key, expected, desired                 value
//   kCheck      keys                                   u8 all present
//   kErase      key                                    u8 existed
//
// Status kTimeout carries the keys still missing; kError carries u8 ErrorKind + message.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "collx/base/error.h"

namespace collx::rendezvous::proto {

inline constexpr char kMagic[4] = {'C', 'L', 'X', 'S'};
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::size_t kHelloHeadBytes = 8;     // magic, version: any version has them
inline constexpr std::size_t kClientHelloBytes = 44;  // + flags, Nc
inline constexpr std::size_t kServerHelloBytes = 12;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = 32;
inline constexpr std::size_t kChallengeBytes = kNonceBytes + kProofBytes;  // Ns, Ms
inline constexpr std::size_t kAuthResultBytes = 4;
inline constexpr std::uint32_t kHoldsSecret = 1;  // client hello flag
inline constexpr std::uint32_t kHelloOk = 0;
inline constexpr std::uint32_t kHelloBadVersion = 1;
inline constexpr std::uint32_t kHelloTooManyConnections = 2;
inline constexpr std::uint32_t kHelloChallenge = 3;
inline constexpr std::uint32_t kHelloAuthRequired = 4;
inline constexpr std::uint32_t kHelloAuthFailed = 5;
inline constexpr std::uint32_t kHelloBusy = 6;
// The parts the proofs are made of (secure::JobSecret::mac with Purpose::kStore).
inline constexpr const char* kServerProofLabel = "server";
inline constexpr const char* kClientProofLabel = "client";

enum class Op : std::uint8_t {
  kPing = 1,
  kSet = 2,
  kMultiSet = 3,
  kGet = 4,
  kWait = 5,
  kAdd = 6,
  kCompareSet = 7,
  kCheck = 8,
  kErase = 9,
};

inline const char* opName(Op op) {
  switch (op) {
    case Op::kPing:
      return "ping";
    case Op::kSet:
      return "set";
    case Op::kMultiSet:
      return "multiSet";
    case Op::kGet:
      return "get";
    case Op::kWait:
      return "wait";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compareSet";
    case Op::kCheck:
      return "check";
    case Op::kErase:
      return "erase";
  }
  return "unknown";
}

enum class Status : std::uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// A malformed message: the reader ran past the end or found an impossible value.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds one frame: reserves the u32 length prefix, which finish() fills in.
class Writer {
 public:
  Writer() : buf_(4, 0) {}
  Writer& u8(std::uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  Writer& u32(std::uint32_t v) { return raw(&v, 4); }
  Writer& u64(std::uint64_t v) { return raw(&v, 8); }
  Writer& i64(std::int64_t v) { return raw(&v, 8); }
  Writer& bytes(const void* data, std::size_t size) {
    u32(static_cast<std::uint32_t>(size));
    return raw(data, size);
  }
  Writer& str(std::string_view s) { return bytes(s.data(), s.size()); }
  Writer& keys(const std::vector<std::string>& keys) {
    u32(static_cast<std::uint32_t>(keys.size()));
    for (const std::string& key : keys) str(key);
    return *this;
  }
  // The frame, length prefix included.
  std::vector<std::uint8_t>& finish() {
    std::uint32_t length = static_cast<std::uint32_t>(buf_.size() - 4);
    std::memcpy(buf_.data(), &length, 4);
    return buf_;
  }

 private:
  Writer& raw(const void* data, std::size_t size) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    buf_.insert(buf_.end(), p, p + size);
    return *this;
  }
  std::vector<std::uint8_t> buf_;
};

// Reads a frame's body (after the length prefix), bounds-checked.
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  std::uint8_t u8() {
    need(1);
    return *p_++;
  }
  std::uint32_t u32() { return raw<std::uint32_t>(); }
  std::uint64_t u64() { return raw<std::uint64_t>(); }
  std::int64_t i64() { return raw<std::int64_t>(); }
  std::string_view str() {
    std::uint32_t size = u32();
    need(size);
    std::string_view out(reinterpret_cast<const char*>(p_), size);
    p_ += size;
    return out;
  }
  std::vector<std::string> keys(std::size_t maxCount) {
    std::uint32_t count = u32();
    if (count > maxCount) {
      throw ProtocolError("a list of " + std::to_string(count) + " keys exceeds the limit of " +
                          std::to_string(maxCount));
    }
    std::vector<std::string> out;
    out.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) out.emplace_back(str());
    return out;
  }
  bool done() const { return p_ == end_; }
  void expectDone() const {
    if (!done()) {
      throw ProtocolError(std::to_string(end_ - p_) + " unexpected bytes after the message");
    }
  }

 private:
  template <typename T>
  T raw() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  void need(std::size_t n) const {
    if (static_cast<std::size_t>(end_ - p_) < n) {
      throw ProtocolError("the message is truncated: " + std::to_string(n) +
                          " more bytes needed, " + std::to_string(end_ - p_) + " left");
    }
  }
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

// ---- the parsers of what crosses the network: pure, each fuzzed (tests/fuzz/) ----

// The hello's first kHelloHeadBytes (magic, version), which every protocol version keeps:
// false when the magic is not "CLXS".
bool parseHelloHead(const std::uint8_t* data, std::size_t size, std::uint32_t& version);

struct ClientHello {
  std::uint32_t version = 0;
  std::uint32_t flags = 0;  // kHoldsSecret
  std::array<std::uint8_t, kNonceBytes> nonce{};
};
// A client's hello of kClientHelloBytes. Throws ProtocolError for another size or magic.
ClientHello parseClientHello(const std::uint8_t* data, std::size_t size);

struct ServerHello {
  std::uint32_t version = 0;
  std::uint32_t status = 0;  // kHelloOk, kHelloChallenge, ...
};
// A server's answer of kServerHelloBytes. Throws ProtocolError for another size or magic.
ServerHello parseServerHello(const std::uint8_t* data, std::size_t size);

// What a server accepts in one request.
struct Limits {
  std::size_t maxKeys = std::size_t{1} << 16;
  std::size_t maxValueBytes = std::size_t{1} << 30;
};

// One request, parsed. The values are views into the request's body.
struct Request {
  Op op = Op::kPing;
  std::vector<std::string> keys;         // kSet, kAdd, kCompareSet, kErase: exactly one
  std::vector<std::string_view> values;  // kSet: one; kMultiSet: one per key; kCompareSet:
                                         // expected, desired
  std::uint64_t timeoutMs = 0;           // kGet, kWait
  std::int64_t delta = 0;                // kAdd
};

// The request of operation `op` (the body's first byte, which the caller read: its errors
// name it) from the rest of the body. Throws ProtocolError when the message is malformed
// (truncated, bytes left over, an unknown op, more than limits.maxKeys keys, as many values
// as keys not given) and InvalidArgument when it breaks a limit (a key outside
// 1..kMaxKeyBytes, a value stored beyond limits.maxValueBytes), in that order.
Request parseRequest(Op op, Reader& r, const Limits& limits);

// A reply, parsed for the request it answers.
struct Reply {
  Status status = Status::kOk;
  // kError: what the server said (its message cut to kMaxErrorMessageBytes).
  ErrorKind errorKind = ErrorKind::kIo;
  std::string message;
  // kTimeout (get, wait): the keys still missing.
  std::vector<std::string> missing;
  // kOk: get's values, one per key; compareSet's value.
  std::vector<std::vector<std::uint8_t>> values;
  std::int64_t number = 0;  // kOk: add's new value
  bool flag = false;        // kOk: check's "all present", erase's "existed"
};
inline constexpr std::size_t kMaxErrorMessageBytes = 4096;

// The largest reply a client reads for a request of `op` with `keys` keys, given the largest
// value it expects (the server's maxValueBytes): get's values and the status, length prefixes
// and 1 MiB for the rest. A longer reply is refused before its body is read.
std::uint64_t maxReplyBytes(Op op, std::size_t keys, std::uint64_t maxValueBytes);

// The reply (its body: status byte and payload) to a request of `op` with `keys` keys.
// Throws ProtocolError when it is malformed: empty, an unknown status or error kind, a
// payload that is not `op`'s, more missing keys or values than keys asked for.
Reply parseReply(Op op, std::size_t keys, const std::uint8_t* data, std::size_t size);

}  // namespace collx::rendezvous::proto
