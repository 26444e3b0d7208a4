// Recovery: Context::agree and Context::shrink (revoke is in context.cc, beside abort).
#include "recovery.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/context.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/store.h"
#include "diagnostics/hang_report.h"
#include "runtime.h"

namespace collx {

namespace detail {

std::string encodeAgreement(std::uint64_t flags, const std::set<int>& failed) {
  char head[32];
  std::snprintf(head, sizeof(head), "1 %016" PRIx64 " ", flags);
  std::string out = head;
  bool first = true;
  for (int r : failed) {
    out += (first ? "" : ",") + std::to_string(r);
    first = false;
  }
  return out;
}

bool decodeAgreement(const std::string& text, int size, std::uint64_t& flags,
                     std::set<int>& failed) {
  // "1 <16 hex digits> <ranks, comma-separated, ascending>" (outside input: bounded).
  if (text.size() < 19 || text.size() > 19 + 12 * static_cast<std::size_t>(size) ||
      text.compare(0, 2, "1 ") != 0 || text[18] != ' ') {
    return false;
  }
  flags = 0;
  for (std::size_t i = 2; i < 18; ++i) {
    const char c = text[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return false;
    flags = flags << 4 | static_cast<std::uint64_t>(digit);
  }
  failed.clear();
  std::size_t at = 19;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    if (end == at || end - at > 10) return false;
    long rank = 0;
    for (std::size_t i = at; i < end; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      rank = rank * 10 + (text[i] - '0');
    }
    if (rank >= size) return false;
    failed.insert(static_cast<int>(rank));
    at = end + 1;
    if (end + 1 == text.size()) return false;  // a trailing comma
  }
  return true;
}

}  // namespace detail

namespace {

// Of `ranks` (whose keys keyOf() gives), those whose key is absent now, in order, with one
// request; the others go to `came`.
std::vector<int> absentOf(rendezvous::Store& store, const std::vector<int>& ranks,
                          const std::function<std::string(int)>& keyOf, std::vector<int>& came) {
  std::vector<std::string> keys;
  keys.reserve(ranks.size());
  for (int r : ranks) keys.push_back(keyOf(r));
  const std::vector<std::string> absent = store.missing(keys);
  std::vector<int> still;
  for (std::size_t i = 0, a = 0; i < keys.size(); ++i) {
    if (a < absent.size() && absent[a] == keys[i]) {
      still.push_back(ranks[i]);
      ++a;
    } else {
      came.push_back(ranks[i]);
    }
  }
  return still;
}

// The value of `key` when it is there (one check, then the read), else nullopt.
std::optional<std::string> valueIfAny(rendezvous::Store& store, const std::string& key,
                                      std::chrono::milliseconds wait) {
  if (!store.check({key})) return std::nullopt;
  return rendezvous::toString(store.get(key, wait));
}

std::string listOf(const std::set<int>& ranks) {
  std::string out;
  int shown = 0;
  for (int r : ranks) {
    if (shown == 16) {
      out += ", ... " + std::to_string(ranks.size() - 16) + " more";
      break;
    }
    out += (shown++ ? ", " : "") + std::to_string(r);
  }
  return out;
}

}  // namespace

Agreement Context::agree(std::uint64_t flags, std::optional<std::chrono::milliseconds> timeout) {
  using Clock = std::chrono::steady_clock;
  Where where{rank_, "agree", -1};
  if (!runtime_) throw InvalidArgument(where, "the context has no transports");
  const std::chrono::milliseconds wait = timeout.value_or(timeout_);
  if (wait.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(wait.count()) + " ms");
  }
  if (runtime_->replaced.load()) runtime_->throwOver(where);
  const std::uint64_t round = runtime_->agreements.fetch_add(1) + 1;
  where.op = "agree#" + std::to_string(round);
  const auto start = Clock::now();
  const auto deadline = start + wait;
  const std::string base =
      "agree/" + std::to_string(subContext_) + "/" + std::to_string(round) + "/";
  const std::string decisionKey = base + "decision";
  auto entryKey = [&](int r) { return base + "in/" + std::to_string(r); };
  transport::Mesh& mesh = runtime_->engine->mesh();

  // What this rank knows failed: the rank that its context's error names as the one that
  // broke (an IoError: a death, a closed or silent connection; not a timeout, a mismatch,
  // an abort or a revoke, whose ranks may well live).
  std::set<int> failed;
  std::map<int, std::string> why;  // for the log
  auto contextRank = [&](int meshRank) {
    if (runtime_->meshRanks.empty()) return meshRank < size_ ? meshRank : -1;
    auto it = std::find(runtime_->meshRanks.begin(), runtime_->meshRanks.end(), meshRank);
    return it == runtime_->meshRanks.end() ? -1
                                           : static_cast<int>(it - runtime_->meshRanks.begin());
  };
  if (const std::exception_ptr error = runtime_->engine->failure()) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      const int r = e.kind() == ErrorKind::kIo ? contextRank(e.peer()) : -1;
      if (r >= 0 && r != rank_) {
        failed.insert(r);
        why[r] = e.what();
      }
    }
  }
  store_->set(entryKey(rank_), detail::encodeAgreement(flags, failed));

  std::map<int, std::uint64_t> flagsOf{{rank_, flags}};
  std::vector<int> awaited;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && failed.count(r) == 0) awaited.push_back(r);
  }
  std::string decided;
  auto step = std::chrono::milliseconds(1);
  while (true) {
    if (auto answer = valueIfAny(*store_, decisionKey, wait)) {
      decided = std::move(*answer);
      break;
    }
    if (!awaited.empty()) {
      // The entries that came since the last look: one request for which, one for them.
      std::vector<int> came;
      const std::vector<int> still = absentOf(*store_, awaited, entryKey, came);
      std::vector<std::string> cameKeys;
      cameKeys.reserve(came.size());
      for (int r : came) cameKeys.push_back(entryKey(r));
      if (!cameKeys.empty()) {
        const std::vector<rendezvous::Bytes> values = store_->multiGet(cameKeys, wait);
        for (std::size_t i = 0; i < came.size(); ++i) {
          std::uint64_t theirFlags = 0;
          std::set<int> theirFailed;
          if (!detail::decodeAgreement(rendezvous::toString(values[i]), size_, theirFlags,
                                       theirFailed)) {
            COLLX_WARN(kCore,
                       "rank {}: {}: rank {}'s entry in the store is malformed; it counts "
                       "as flags 0 and no failures",
                       rank_, where.op, came[i]);
          }
          flagsOf[came[i]] = theirFlags;
          for (int f : theirFailed) {
            if (failed.insert(f).second)
              why[f] = "rank " + std::to_string(came[i]) + " found it so";
          }
        }
      }
      awaited.clear();
      for (int r : still) {
        if (failed.count(r) != 0) continue;
        const std::string lost = mesh.lost(runtime_->meshRank(r), start);
        if (!lost.empty()) {
          failed.insert(r);
          why[r] = lost;
          continue;
        }
        awaited.push_back(r);
      }
    }
    const bool late = Clock::now() >= deadline;
    if (awaited.empty() || late) {
      for (int r : awaited) {
        failed.insert(r);
        why[r] = "it did not come within " + std::to_string(wait.count()) + " ms";
      }
      std::uint64_t all = ~std::uint64_t{0};
      for (const auto& [r, f] : flagsOf) {
        if (failed.count(r) == 0) all &= f;
      }
      // The first proposal is every rank's answer.
      decided = rendezvous::toString(store_->compareSet(
          decisionKey, {}, rendezvous::toBytes(detail::encodeAgreement(all, failed))));
      break;
    }
    rendezvous::detail::backoffSleep(step, deadline, std::chrono::milliseconds(50));
  }

  Agreement result;
  std::set<int> agreedFailed;
  if (!detail::decodeAgreement(decided, size_, result.flags, agreedFailed)) {
    throw MismatchError(where,
                        "the store holds a malformed agreement: '" + decided.substr(0, 200) + "'");
  }
  result.failed.assign(agreedFailed.begin(), agreedFailed.end());
  const auto tookMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  if (!agreedFailed.empty()) {
    std::string reasons;
    for (int r : agreedFailed) {
      auto it = why.find(r);
      if (it != why.end()) reasons += "; rank " + std::to_string(r) + ": " + it->second;
    }
    COLLX_DEBUG(kCore, "rank {}: {}: flags {:#x}, failed ranks {} in {} ms{}", rank_, where.op,
                result.flags, listOf(agreedFailed), tookMs, reasons);
  } else {
    COLLX_DEBUG(kCore, "rank {}: {}: flags {:#x}, no rank failed, in {} ms", rank_, where.op,
                result.flags, tookMs);
  }
  if (agreedFailed.count(rank_) != 0) {
    throw ExcludedError(where,
                        "the other ranks agreed without this one: they found it failed "
                        "(its connection to one of them broke, it answered nothing for "
                        "COLLX_PEER_TIMEOUT, or it came after their deadline); this "
                        "context is over for it");
  }
  // The last rank to read the answer erases the entries (the answer itself stays: a rank that
  // was excluded may come to read it late).
  try {
    const auto readers = static_cast<std::int64_t>(size_ - agreedFailed.size());
    if (store_->add(base + "read", 1) == readers) {
      for (int r = 0; r < size_; ++r) store_->erase(entryKey(r));
      store_->erase(base + "read");
    }
  } catch (const Error& e) {
    COLLX_DEBUG(kCore, "rank {}: {}: erasing its entries: {}", rank_, where.op, e.what());
  }
  return result;
}

std::shared_ptr<Context> Context::shrink(std::optional<std::chrono::milliseconds> timeout) {
  using Clock = std::chrono::steady_clock;
  Where where{rank_, "shrink", -1};
  if (!runtime_) throw InvalidArgument(where, "the context has no transports");
  if (parent_) {
    throw InvalidArgument(where,
                          "a sub-context does not shrink (its parent's connections are "
                          "not its own): shrink the context it was split from");
  }
  if (runtime_->replaced.load()) runtime_->throwOver(where);
  const std::chrono::milliseconds wait = timeout.value_or(timeout_);
  if (wait.count() <= 0) {
    throw InvalidArgument(
        where, "the timeout must be positive, got " + std::to_string(wait.count()) + " ms");
  }
  const auto start = Clock::now();
  const auto deadline = start + wait;
  // Who goes on: the same answer on every survivor (a rank left out gets ExcludedError).
  const Agreement agreed = agree(~std::uint64_t{0}, wait);
  // Every survivor makes the same attempts (an attempt fails on all of them alike, below):
  // the k-th takes generation + k, whose namespace no earlier attempt used.
  const std::uint64_t attempt = runtime_->shrinks.fetch_add(1) + 1;
  const std::int64_t next = generation_ + static_cast<std::int64_t>(attempt);
  where.op = "shrink(generation " + std::to_string(next) + ")";
  std::vector<int> members;
  std::vector<bool> keep(static_cast<std::size_t>(runtime_->engine->mesh().size()), false);
  for (int r = 0, f = 0; r < size_; ++r) {
    if (f < static_cast<int>(agreed.failed.size()) &&
        agreed.failed[static_cast<std::size_t>(f)] == r) {
      ++f;
      continue;
    }
    members.push_back(r);
    keep[static_cast<std::size_t>(runtime_->meshRank(r))] = true;
  }
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  // This generation ends on this rank (every call of it fails), the pairs with the survivors
  // go on in the next.
  runtime_->engine->reform(next, keep, deadline);

  // The survivors meet in the new generation's namespace before any of them uses it: each
  // says it is there, and the first to know the outcome (all there, or one lost) writes it;
  // every survivor takes that one (a survivor's late arrival then changes nothing).
  rendezvous::StoreOptions storeOptions;
  storeOptions.timeout = wait;
  storeOptions.rank = newRank;
  auto store = std::make_shared<rendezvous::PrefixStore>(
      "collx/" + jobId_ + "/" + std::to_string(next), rootStore_, storeOptions);
  const std::string outcomeKey = "shrink/outcome";
  auto readyKey = [](int i) { return "shrink/ready/" + std::to_string(i); };
  store->set(readyKey(newRank), "1");
  std::vector<int> awaited;
  for (int i = 0; i < static_cast<int>(members.size()); ++i) {
    if (i != newRank) awaited.push_back(i);
  }
  transport::Mesh& mesh = runtime_->engine->mesh();
  const auto met = Clock::now();
  const auto metDeadline = met + wait;  // (a round of its own: the agreement may have waited)
  std::string outcome;
  auto step = std::chrono::milliseconds(1);
  while (true) {
    if (auto known = valueIfAny(*store, outcomeKey, wait)) {
      outcome = std::move(*known);
      break;
    }
    std::string proposal;
    if (!awaited.empty()) {
      std::vector<int> came;
      awaited = absentOf(*store, awaited, readyKey, came);
      for (int i : awaited) {
        const int old = members[static_cast<std::size_t>(i)];
        const std::string lost = mesh.lost(runtime_->meshRank(old), met);
        if (!lost.empty()) {
          proposal = "lost " + std::to_string(old) + " " + lost;
          break;
        }
      }
    }
    if (proposal.empty() && awaited.empty()) proposal = "ok";
    if (proposal.empty() && Clock::now() >= metDeadline) {
      proposal = "late " + std::to_string(members[static_cast<std::size_t>(awaited.front())]);
    }
    if (!proposal.empty()) {
      outcome =
          rendezvous::toString(store->compareSet(outcomeKey, {}, rendezvous::toBytes(proposal)));
      break;
    }
    rendezvous::detail::backoffSleep(step, metDeadline, std::chrono::milliseconds(50));
  }
  if (outcome != "ok") {
    // The attempt failed on every survivor alike: the new generation fails here (naming the
    // rank lost, for the next agreement) and shrink() may be called again.
    int lostRank = -1;
    std::string why = outcome;
    if (outcome.rfind("lost ", 0) == 0 || outcome.rfind("late ", 0) == 0) {
      const std::size_t space = outcome.find(' ', 5);
      try {
        lostRank = std::stoi(outcome.substr(5, space - 5));
      } catch (const std::exception&) {
        lostRank = -1;
      }
      why = space == std::string::npos ? "" : outcome.substr(space + 1);
    }
    if (lostRank < 0 || lostRank >= size_) {
      throw MismatchError(where,
                          "the store holds a malformed outcome: '" + outcome.substr(0, 200) + "'");
    }
    const std::string text = outcome[0] == 'l' && outcome[1] == 'o'
                                 ? "rank " + std::to_string(lostRank) +
                                       " was lost before the survivors went on (" + why +
                                       "): call shrink() again"
                                 : "rank " + std::to_string(lostRank) + " did not come within " +
                                       std::to_string(wait.count()) + " ms: call shrink() again";
    // (Named by its mesh rank there, as the transport names ranks.)
    runtime_->engine->stop(ErrorKind::kIo, runtime_->meshRank(lostRank), text);
    throw IoError(Where{rank_, where.op, lostRank}, text);
  }
  auto shrunk = std::make_shared<Context>(Key{}, *this, members, next);
  runtime_->replaced = true;
  if (reporter_) reporter_->stop();  // this generation's reports are over
  shrunk->startReporter(Config::process());
  COLLX_DEBUG(kCore,
              "rank {}: shrink: generation {} of {} ranks (failed: {}), rank {} there, in {} "
              "ms",
              rank_, next, members.size(), listOf({agreed.failed.begin(), agreed.failed.end()}),
              newRank,
              std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  return shrunk;
}

}  // namespace collx
