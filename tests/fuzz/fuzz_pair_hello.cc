// Harness: what a rank reads when another connects over tcp (transport/src/tcp/tcp_hello.h):
// the dialer's Hello through checkHello, the acceptor's Ack through isCollxAck and ackText,
// and a peer's published address through parseEndpoint. Input: a Hello (88 bytes), an Ack
// (80 bytes), then an address text.
#include <algorithm>
#include <cstring>
#include <string>

#include "fuzz.h"
#include "tcp/tcp_hello.h"

namespace tt = collx::transport::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tt::Hello hello;
  std::memset(&hello, 0, sizeof hello);
  std::memcpy(&hello, data, std::min(size, sizeof hello));
  // Rank 2 of job 0x1234, generation 1, two streams; a secret when the Hello's reserved
  // word is odd, TLS when its second bit is set (so that every answer is reached).
  const tt::HelloExpectation expect{
      0x1234, 1, 2, 2, (hello.reserved & 1) != 0, (hello.reserved & 2) != 0};
  for (bool fromPeer : {false, true}) {
    const tt::HelloVerdict v = tt::checkHello(hello, expect, fromPeer);
    if (v.status == tt::kAckOk) {
      // Accepted: exactly what the acceptor then relies on.
      if (!fromPeer || hello.to != expect.self || hello.from <= expect.self ||
          hello.stream >= expect.streams || hello.job != expect.job || !v.why.empty() ||
          ((hello.flags & tt::kUsesTls) != 0) != expect.usesTls) {
        __builtin_trap();
      }
    } else if (v.why.empty() || v.why.size() > 512) {
      __builtin_trap();
    }
  }
  tt::Ack ack;
  std::memset(&ack, 0, sizeof ack);
  if (size > sizeof hello)
    std::memcpy(&ack, data + sizeof hello, std::min(size - sizeof hello, sizeof ack));
  if (tt::isCollxAck(ack) && tt::ackText(ack.status) == nullptr) __builtin_trap();
  const std::size_t at = sizeof hello + sizeof ack;
  const std::string text = size > at ? std::string(collx::fuzz::textOf(data + at, size - at)) : "";
  collx::fuzz::refusedOrParsed(
      [&] {
        const auto endpoint = tt::parseEndpoint(text, collx::Where{0, "tcp", 1});
        if (endpoint.port() == 0) __builtin_trap();
      },
      512);
  return 0;
}
