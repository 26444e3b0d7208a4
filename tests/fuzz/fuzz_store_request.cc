// Harness: what a TCP store server reads from a client (rendezvous/src/tcp_store_protocol.h):
// the client's hello, and a request's body through proto::parseRequest. Input: the body of
// one request (op byte, then its payload); its first 44 bytes are also read as a hello.
#include <algorithm>
#include <cstring>

#include "collx/rendezvous/store.h"
#include "fuzz.h"
#include "tcp_store_protocol.h"

namespace proto = collx::rendezvous::proto;

namespace {

// The request written back as a client writes it: the same bytes as the body it came from.
std::vector<std::uint8_t> encode(const proto::Request& q) {
  proto::Writer w;
  w.u8(static_cast<std::uint8_t>(q.op));
  switch (q.op) {
    case proto::Op::kPing:
      break;
    case proto::Op::kSet:
      w.str(q.keys[0]).str(q.values[0]);
      break;
    case proto::Op::kMultiSet:
      w.keys(q.keys).u32(static_cast<std::uint32_t>(q.values.size()));
      for (std::string_view v : q.values) w.str(v);
      break;
    case proto::Op::kGet:
    case proto::Op::kWait:
      w.u64(q.timeoutMs).keys(q.keys);
      break;
    case proto::Op::kAdd:
      w.str(q.keys[0]).i64(q.delta);
      break;
    case proto::Op::kCompareSet:
      w.str(q.keys[0]).str(q.values[0]).str(q.values[1]);
      break;
    case proto::Op::kCheck:
      w.keys(q.keys);
      break;
    case proto::Op::kErase:
      w.str(q.keys[0]);
      break;
  }
  std::vector<std::uint8_t> frame = std::move(w.finish());
  frame.erase(frame.begin(), frame.begin() + 4);  // the length prefix
  return frame;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)proto::parseClientHello(data, std::min(size, proto::kClientHelloBytes));
    if (size < proto::kClientHelloBytes) __builtin_trap();
  } catch (const proto::ProtocolError&) {
  }
  if (size == 0) return 0;
  // Small limits, so that the fuzzer reaches them.
  const proto::Limits limits{16, 256};
  proto::Reader r(data + 1, size - 1);
  const auto op = static_cast<proto::Op>(data[0]);
  try {
    const proto::Request q = proto::parseRequest(op, r, limits);
    if (q.keys.size() > limits.maxKeys) __builtin_trap();
    for (const std::string& key : q.keys) {
      if (key.empty() || key.size() > collx::rendezvous::kMaxKeyBytes) __builtin_trap();
    }
    const std::vector<std::uint8_t> again = encode(q);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  } catch (const proto::ProtocolError&) {
  } catch (const collx::InvalidArgument&) {
  }
  return 0;
}
