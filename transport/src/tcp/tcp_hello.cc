#include "tcp_hello.h"

#include <charconv>
#include <cstring>

#include "collx/base/echo.h"

namespace collx::transport::tcp {

const char* ackText(std::uint32_t status) {
  switch (status) {
    case kAckOk:
      return "ok";
    case kAckWrongJob:
      return "it belongs to another job or generation";
    case kAckWrongRank:
      return "it is not the rank this connection was meant for";
    case kAckDuplicate:
      return "a connection for that stream already exists";
    case kAckBadStream:
      return "the stream counts differ (COLLX_TCP_STREAMS)";
    case kAckAuthFailed:
      return "this rank's proof of the job's secret did not hold (the ranks were given different "
             "secrets)";
    case kAckSecretMismatch:
      return "one of the two ranks holds a job secret and the other does not";
    case kAckTlsMismatch:
      return "one of the two ranks uses TLS (COLLX_TLS=1) and the other does not";
    default:
      return "unknown refusal";
  }
}

HelloVerdict checkHello(const Hello& hello, const HelloExpectation& expect, bool fromPeer) {
  if (std::memcmp(hello.magic, kHelloMagic, 4) != 0 || hello.version != kHelloVersion) {
    return {kNotCollx, "not a collx rank (bad hello)"};
  }
  if (hello.job != expect.job || hello.generation != expect.generation) {
    return {kAckWrongJob, "rank " + std::to_string(hello.from) + " of another job or generation"};
  }
  if (hello.to != expect.self || !fromPeer || hello.from <= expect.self) {
    return {kAckWrongRank, "hello from rank " + std::to_string(hello.from) + " to rank " +
                               std::to_string(hello.to)};
  }
  if (hello.streams != expect.streams || hello.stream >= expect.streams) {
    return {kAckBadStream, "rank " + std::to_string(hello.from) + " uses " +
                               std::to_string(hello.streams) + " streams, this rank " +
                               std::to_string(expect.streams)};
  }
  const bool theirs = (hello.flags & kHoldsSecret) != 0;
  if (theirs != expect.holdsSecret) {
    return {kAckSecretMismatch, "it says it is rank " + std::to_string(hello.from) + " and " +
                                    (theirs ? "holds a job secret; this rank has none"
                                            : "holds no job secret; this rank has one")};
  }
  const bool theirTls = (hello.flags & kUsesTls) != 0;
  if (theirTls != expect.usesTls) {
    return {kAckTlsMismatch, "it says it is rank " + std::to_string(hello.from) + " and " +
                                 (theirTls ? "uses TLS; this rank does not (COLLX_TLS)"
                                           : "does not use TLS; this rank does (COLLX_TLS=1)")};
  }
  return {};
}

bool isCollxAck(const Ack& ack) { return std::memcmp(ack.magic, kHelloMagic, 4) == 0; }

asio::ip::tcp::endpoint parseEndpoint(const std::string& text, const Where& where) {
  auto bad = [&] { throw InvalidArgument(where, "bad tcp address '" + echoText(text) + "'"); };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) bad();
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  asio::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  // The whole rest is the port, in 1..65535 (atoi read "80x" as 80, and overflowed on more
  // digits than an int holds).
  unsigned port = 0;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [end, err] = std::from_chars(first, last, port);
  if (ec || err != std::errc() || end != last || port == 0 || port > 65535) bad();
  return asio::ip::tcp::endpoint(address, static_cast<std::uint16_t>(port));
}

}  // namespace collx::transport::tcp
