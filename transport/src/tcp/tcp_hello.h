// The tcp transport's connection handshake (internal): the Hello a dialing rank sends, the
// Ack it gets back, and the pure checks of both, which tcp_device.cc runs on what arrives
// from the network (and tests/fuzz/fuzz_pair_hello.cc on anything).
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <string>

#include "collx/base/error.h"
#include "collx/secure/job_secret.h"

namespace collx::transport::tcp {

inline constexpr char kHelloMagic[4] = {'C', 'L', 'X', 'T'};
inline constexpr std::uint32_t kHelloVersion = 3;
inline constexpr std::uint32_t kHoldsSecret = 1;
// The connection goes on in TLS once the hello's proofs held (COLLX_TLS=1).
inline constexpr std::uint32_t kUsesTls = 2;

struct Hello {
  char magic[4];
  std::uint32_t version;
  std::uint64_t job;
  std::int64_t generation;
  std::int32_t from;
  std::int32_t to;
  std::uint32_t stream;
  std::uint32_t streams;
  std::uint64_t eagerLimit;  // the dialer's: the pair's is the smaller of both sides'
  std::uint32_t flags;       // kHoldsSecret, kUsesTls
  std::uint32_t reserved;
  secure::Nonce nonce;
};
static_assert(sizeof(Hello) == 88);

struct Ack {
  char magic[4];
  std::uint32_t status;
  std::uint64_t eagerLimit;  // the acceptor's
  secure::Nonce nonce;
  secure::Tag proof;
};
static_assert(sizeof(Ack) == 80);

enum AckStatus : std::uint32_t {
  kAckOk = 0,
  kAckWrongJob = 1,
  kAckWrongRank = 2,
  kAckDuplicate = 3,
  kAckBadStream = 4,
  kAckAuthFailed = 5,
  kAckSecretMismatch = 6,
  kAckTlsMismatch = 7,
};

// Not even a collx hello: the connection is closed without an Ack.
inline constexpr std::uint32_t kNotCollx = 0xFFFFFFFFu;

// The words for an Ack's refusal ("it belongs to another job or generation", ...).
const char* ackText(std::uint32_t status);

// What the accepting rank expects of a Hello.
struct HelloExpectation {
  std::uint64_t job = 0;  // the job id and generation's hash
  std::int64_t generation = 0;
  int self = 0;               // this rank: the Hello's `to`
  std::uint32_t streams = 1;  // COLLX_TCP_STREAMS
  bool holdsSecret = false;
  bool usesTls = false;
};

struct HelloVerdict {
  std::uint32_t status = kAckOk;  // kAckOk, an AckStatus, or kNotCollx
  std::string why;                // for the log, when refused
};

// The checks of a Hello from the network, in order: magic and version, job and generation,
// ranks (`fromPeer`: its `from` is a rank this one waits for, which must be higher), stream
// counts, whether both hold a job secret, whether both use TLS. Pure.
HelloVerdict checkHello(const Hello& hello, const HelloExpectation& expect, bool fromPeer);

// Whether an Ack is one a collx rank wrote (its magic).
bool isCollxAck(const Ack& ack);

// "ip:port" / "[v6]:port" -> endpoint. Throws InvalidArgument naming the text (cut to 200
// bytes).
asio::ip::tcp::endpoint parseEndpoint(const std::string& text, const Where& where);

}  // namespace collx::transport::tcp
