// What the recovery operations (Context::revoke, Context::agree) keep in the context's
// namespace of the store, shared by the context and the hang report's watcher.
//
// An agreement (round k of a context, its sub-context number s) under "agree/<s>/<k>/":
// "in/<rank>" each rank's flags and the failures it knows, "decision" the first proposal
// (compareSet), "read" the count of ranks that read it (the last erases the entries).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "collx/base/setting.h"
#include "collx/context.h"
#include "collx/rendezvous/store.h"

namespace collx {

// A newcomer's place (collx::join, from the survivors' plan): the generation the job's mesh
// was formed in (its hellos prove it), the mesh's size, the newcomer's place in it, and the
// place of every member of the new context, by its rank there.
struct Context::Newcomer {
  std::int64_t formed = 0;
  int meshSize = 0;
  int slot = -1;
  std::vector<int> slots;
};

}  // namespace collx

namespace collx::detail {

// A revoke: "<rank>\n<the error's text>", written by the rank that revoked, read by every
// rank's watcher (ranks that no connection reaches learn it so).
inline constexpr const char* kRevokedKey = "revoked";

inline std::string formatRevoked(int rank, const std::string& text) {
  return std::to_string(rank) + "\n" + text;
}

// The rank and text of a revoke record; rank -1 and the whole value as text when it is not
// one (a value in the store is outside input).
inline void parseRevoked(const std::string& value, int& rank, std::string& text) {
  const std::size_t line = value.find('\n');
  char* end = nullptr;
  const long parsed = line == std::string::npos ? -1 : std::strtol(value.c_str(), &end, 10);
  if (line == std::string::npos || end != value.c_str() + line || parsed < 0 || parsed > 1L << 30) {
    rank = -1;
    text = value.substr(0, 1024);
    return;
  }
  rank = static_cast<int>(parsed);
  text = value.substr(line + 1, 1024);
}

// An agreement's entry or answer: "1 <flags, 16 hex digits> <failed ranks, ascending, comma-
// separated>". decodeAgreement() reads one of a context of `size` ranks (outside input:
// false for anything else).
std::string encodeAgreement(std::uint64_t flags, const std::set<int>& failed);
// Where rank `rank` enters round `round` of sub-context `subContext`'s agreements.
std::string agreeEntryKey(std::uint64_t subContext, std::uint64_t round, int rank);
bool decodeAgreement(const std::string& text, int size, std::uint64_t& flags,
                     std::set<int>& failed);

// The cause that `why` (a failed rank's evidence: a transport's error, or the agreement's
// note) names; `stoppedHere`: its process is on this host and still exists, which tells a
// stopped rank from an unreachable one when it answered nothing.
FailureCause causeOf(const std::string& why, bool stoppedHere);

// COLLX_MAX_SIZE: the most ranks a job may grow to (ContextOptions::maxSize).
extern const Setting<kind::Integer> kMaxSize;

// A join record ("host=...\npid=...\n"), as Context::join writes it (context.cc).
rendezvous::Bytes encodePeerInfo(const PeerInfo& info);
PeerInfo decodePeerInfo(int rank, const rendezvous::Bytes& bytes);

// Where newcomers wait for a job (collx::join) in the job's store: "count" their tickets
// (add), "<ticket>/plan" the plan that took it, "next" the first ticket no plan took yet.
inline std::string joinsKey(const std::string& jobId, const std::string& what) {
  return "collx/" + jobId + "/joins/" + what;
}

// The plan of a grow or reform, decided once (compareSet) and read by every member and
// newcomer: "1 <next generation> <mesh's generation> <mesh size> <first ticket> <newcomers>
// <members>", the members by their new rank, comma-separated: "o<old rank>@<place>" or
// "j<ticket>@<place>" (place: the mesh's rank). Outside input: decodePlan() checks it.
struct Plan {
  std::int64_t next = 0;
  std::int64_t formed = 0;
  int meshSize = 0;
  std::int64_t firstTicket = 0;
  int newcomers = 0;
  std::vector<int> old;              // per member: its old rank, -1 a newcomer
  std::vector<std::int64_t> ticket;  // per member: its ticket, 0 an old rank
  std::vector<int> place;            // per member: its place in the mesh
};
std::string encodePlan(const Plan& plan);
bool decodePlan(const std::string& text, Plan& plan);

// The members of a new generation meet in its namespace `store` before any of them uses it,
// once per `phase` ("grow": before the newcomers connect, each member's value its address
// blob; "shrink": at the end, its join record): each writes "<phase>/ready/<rank>" = `mine`
// (unless `failure` says why it cannot go on: then it proposes that), and the first to know
// the outcome writes it (compareSet): "ok" when all are there, "lost <rank> <why>" when
// lostOf(rank) (the failure detector) says one is lost, "failed <rank> <why>" when one could
// not go on, "late <rank>" past `wait`. Returns the outcome, the same on every member.
std::string meet(rendezvous::Store& store, const std::string& phase, int self, int count,
                 const std::string& mine, const std::string& failure,
                 const std::function<std::string(int)>& lostOf, std::chrono::milliseconds wait);
inline std::string readyKey(const std::string& phase, int rank) {
  return phase + "/ready/" + std::to_string(rank);
}
// An outcome other than "ok": its word ("lost", "failed", "late"), the rank it names and why
// (false: malformed).
bool parseOutcome(const std::string& outcome, int count, std::string& word, int& rank,
                  std::string& why);

}  // namespace collx::detail
