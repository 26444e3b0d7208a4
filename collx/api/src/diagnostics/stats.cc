// Context::stats(): the engine's counters (messages per peer, failures, waits) and the
// runtime's (calls per algorithm) in public terms.
#include "collx/stats.h"

#include <cstdio>

#include "../runtime.h"
#include "collx/algorithms/registry.h"
#include "collx/context.h"

namespace collx {

namespace {

std::string count(std::uint64_t messages, std::uint64_t bytes) {
  return std::to_string(messages) + (messages == 1 ? " message, " : " messages, ") +
         std::to_string(bytes) + " B";
}

// "sent 4 messages, 16000 B; received ..."
std::string traffic(const MessageStats& m) {
  return "sent " + count(m.messagesSent, m.bytesSent) + "; received " +
         count(m.messagesReceived, m.bytesReceived);
}

std::string millis(std::chrono::nanoseconds t) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(t.count()) / 1e6);
  return text;
}

}  // namespace

ContextStats Context::stats() const {
  ContextStats out;
  if (!runtime_) return out;
  const algorithms::EngineStats engine = runtime_->engine->stats();
  const std::vector<std::string> names = transports();
  std::map<std::string, TransportStats> byTransport;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    // (A sub-context's peers by their ranks in the shared mesh.)
    const auto& counted = engine.peers[static_cast<std::size_t>(runtime_->meshRank(r))];
    PeerStats peer;
    peer.rank = r;
    peer.transport = names[static_cast<std::size_t>(r)];
    peer.messagesSent = counted.messagesSent;
    peer.bytesSent = counted.bytesSent;
    peer.messagesReceived = counted.messagesReceived;
    peer.bytesReceived = counted.bytesReceived;
    byTransport[peer.transport] += peer;
    out += peer;
    out.peers.push_back(std::move(peer));
  }
  const auto& registry = algorithms::algorithmRegistry();
  for (std::size_t i = 0; i < engine.calls.size(); ++i) {
    if (engine.calls[i].calls == 0) continue;
    AlgorithmStats a;
    a.calls = engine.calls[i].calls;
    a.bytes = engine.calls[i].bytes;
    if (i < registry.size()) {
      a.collective = algorithms::collectiveName(registry[i].coll);
      a.algorithm = registry[i].name;
      if (registry[i].shared) {
        TransportStats& shm = byTransport["shm"];
        shm.sharedCalls += a.calls;
        shm.sharedBytes += a.bytes;
      }
    } else {
      a.collective = i == detail::Runtime::sendCounter() ? "send" : "recv";
    }
    out.collectives[a.collective] += a.calls;
    out.calls += a.calls;
    out.algorithms.push_back(std::move(a));
  }
  for (auto& [name, medium] : byTransport) {
    medium.transport = name;
    out.transports.push_back(std::move(medium));
  }
  out.failedCalls = engine.failedCalls;
  out.waiting = engine.waited + engine.sharedWaited;
  out.sharedMemoryWaiting = engine.sharedWaited;
  return out;
}

std::string ContextStats::describe() const {
  std::string out = std::to_string(calls) + (calls == 1 ? " call" : " calls") + " (" +
                    std::to_string(failedCalls) + " failed)";
  const char* separator = ": ";
  for (const auto& [name, n] : collectives) {
    out += separator + name + " " + std::to_string(n);
    separator = ", ";
  }
  out += "\n" + traffic(*this) + "; waiting " + millis(waiting) + " (shared memory " +
         millis(sharedMemoryWaiting) + ")\n";
  for (const TransportStats& t : transports) {
    out += "  transport " + t.transport + ": " + traffic(t);
    if (t.sharedCalls > 0) {
      out += "; " + std::to_string(t.sharedCalls) + " shared-memory calls, " +
             std::to_string(t.sharedBytes) + " B";
    }
    out += "\n";
  }
  for (const PeerStats& p : peers) {
    out += "  peer " + std::to_string(p.rank) + " (" + p.transport + "): " + traffic(p) + "\n";
  }
  for (const AlgorithmStats& a : algorithms) {
    out += "  " + a.collective + (a.algorithm.empty() ? "" : " " + a.algorithm) + ": " +
           std::to_string(a.calls) + (a.calls == 1 ? " call, " : " calls, ") +
           std::to_string(a.bytes) + " B\n";
  }
  return out;
}

}  // namespace collx
