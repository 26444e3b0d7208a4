// Harness: what a TCP store client reads from a server (rendezvous/src/tcp_store_protocol.h):
// the server's hello and a reply through proto::parseReply. Input: the op asked (byte 0), the
// number of keys asked (byte 1), then the reply's body (status byte, payload); the first 12
// bytes are also read as a server hello.
#include <algorithm>

#include "fuzz.h"
#include "tcp_store_protocol.h"

namespace proto = collx::rendezvous::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)proto::parseServerHello(data, std::min(size, proto::kServerHelloBytes));
    if (size < proto::kServerHelloBytes) __builtin_trap();
  } catch (const proto::ProtocolError&) {
  }
  if (size < 2) return 0;
  const auto op = static_cast<proto::Op>(data[0] % 9 + 1);
  const std::size_t keys = data[1];
  try {
    const proto::Reply reply = proto::parseReply(op, keys, data + 2, size - 2);
    if (reply.missing.size() > keys || reply.message.size() > proto::kMaxErrorMessageBytes + 32)
      __builtin_trap();
    if (reply.status == proto::Status::kOk && op == proto::Op::kGet &&
        reply.values.size() != keys) {
      __builtin_trap();
    }
    if (reply.status == proto::Status::kError && reply.errorKind > collx::kLastErrorKind) {
      __builtin_trap();
    }
  } catch (const proto::ProtocolError&) {
  }
  return 0;
}
