// ContextStats: what a context has done since it connected (Context::stats()): the messages
// and bytes it sent to and received from each peer and over each transport, its calls per
// collective and algorithm, the calls that failed, and the time it spent waiting.
//
// Counting is always on and costs no locked instruction per message: the engine's driving
// thread counts each transfer as it completes. A call is counted when it starts (after its
// arguments were checked), a message when it completed, a failure when its call ended.
// The library's own messages while connecting are not counted.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace collx {

// Messages and bytes, each way.
struct MessageStats {
  std::uint64_t messagesSent = 0;
  std::uint64_t bytesSent = 0;
  std::uint64_t messagesReceived = 0;
  std::uint64_t bytesReceived = 0;

  MessageStats& operator+=(const MessageStats& o) noexcept {
    messagesSent += o.messagesSent;
    bytesSent += o.bytesSent;
    messagesReceived += o.messagesReceived;
    bytesReceived += o.bytesReceived;
    return *this;
  }
};

struct PeerStats : MessageStats {
  int rank = -1;
  std::string transport;  // "shm", "tcp", "ibverbs"
};

struct TransportStats : MessageStats {
  std::string transport;
  // Calls of the shared-memory algorithms (algorithm "shm"), which move no messages, and
  // their bytes (count x element size): under transport "shm".
  std::uint64_t sharedCalls = 0;
  std::uint64_t sharedBytes = 0;
};

struct AlgorithmStats {
  std::string collective;  // "allreduce", ..., "send", "recv"
  std::string algorithm;   // "ring", "shm", ...; "" for a send or receive
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;  // over its calls: count x element size, as each call was made
};

// The sums over peers are the MessageStats part.
struct ContextStats : MessageStats {
  std::vector<PeerStats> peers;                      // every other rank, in rank order
  std::vector<TransportStats> transports;            // every transport of a peer, and "shm" if used
  std::vector<AlgorithmStats> algorithms;            // those called, in the registry's order
  std::map<std::string, std::uint64_t> collectives;  // calls per collective (and send, recv)
  std::uint64_t calls = 0;
  std::uint64_t failedCalls = 0;
  // Time spent waiting for peers: the engine asleep in the transports' poll while calls
  // were in flight, plus blocking shared-memory calls asleep in their waits (each such wait
  // from its start to its end). Waits that only spun or yielded are not counted.
  std::chrono::nanoseconds waiting{0};
  std::chrono::nanoseconds sharedMemoryWaiting{0};  // the shared-memory part of `waiting`

  // A few lines for people: totals, then per transport, peer and algorithm.
  std::string describe() const;
};

}  // namespace collx
