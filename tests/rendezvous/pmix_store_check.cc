// Run under mpirun (any number of ranks): the PMIx store against the PMIx server mpirun
// gives every process, and two init()s in a row. Exits non-zero, naming the rank and the
// check, on any mismatch.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "collx/collx.h"
#include "collx/rendezvous/pmix_store.h"

namespace {

using namespace std::chrono_literals;
using collx::rendezvous::PmixStore;
using collx::rendezvous::toBytes;
using collx::rendezvous::toString;

int failures = 0;
int me = -1;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: check failed: %s\n", me, what.c_str());
    ++failures;
  }
}

// Runs `call`, which must throw E whose message contains `words`.
template <typename E, typename F>
void expectThrows(F call, const std::string& words, const std::string& what) {
  try {
    call();
    expect(false, what + ": did not throw");
  } catch (const E& e) {
    expect(std::string(e.what()).find(words) != std::string::npos,
           what + ": '" + e.what() + "' lacks '" + words + "'");
  } catch (const std::exception& e) {
    expect(false, what + ": threw another error: " + e.what());
  }
}

}  // namespace

int main() {
  try {
    const auto job = collx::rendezvous::pmixJob(10s);
    me = job.rank;
    expect(job.size >= 2, "a job of at least 2 ranks (run under mpirun -np N, N >= 2)");
    expect(job.localRank >= 0 && job.localRank < job.size, "a local rank");
    expect(!job.nspace.empty(), "a namespace");

    collx::rendezvous::StoreOptions options;
    options.timeout = 10s;
    options.rank = job.rank;
    PmixStore store(options, 0, "check.");
    // A long key (hashed into PMIx's key length) and a short one, with bytes of every value.
    const std::string longKey(1000, 'k');
    collx::rendezvous::Bytes all(256);
    for (int i = 0; i < 256; ++i) all[i] = static_cast<std::uint8_t>(i);
    if (job.rank == 0) {
      store.set("short", "value 0");
      store.set(longKey, all);
    } else {
      expectThrows<collx::InvalidArgument>([&] { store.set("short", "x"); },
                                           "only rank 0 sets values in this PMIx store",
                                           "set on a rank that is not the writer");
    }
    expect(toString(store.get("short")) == "value 0", "get of rank 0's short key");
    expect(store.get(longKey) == all, "get of rank 0's long key, every byte value");
    auto both = store.multiGet({"short", longKey});
    expect(both.size() == 2 && toString(both[0]) == "value 0" && both[1] == all, "multiGet");
    store.wait({"short"});
    expect(store.check({"short"}), "check of a key that is there");
    expect(!store.check({"absent"}), "check of a key that is not");
    // A key never set: a TimeoutError naming it, at the deadline.
    const auto start = std::chrono::steady_clock::now();
    expectThrows<collx::TimeoutError>([&] { store.get("never-set", 1500ms); },
                                      "waiting for key [never-set]", "get of a key never set");
    const auto waited = std::chrono::steady_clock::now() - start;
    expect(waited >= 1400ms && waited < 5s,
           "the get waited about its 1.5 s deadline, not " + std::to_string(waited / 1ms) + " ms");
    // What PMIx cannot offer.
    expectThrows<collx::Unsupported>([&] { store.add("n", 1); }, "set, get, wait and check only",
                                     "add");
    expectThrows<collx::Unsupported>([&] { store.compareSet("n", {}, toBytes("1")); },
                                     "no atomic update or deletion", "compareSet");
    expectThrows<collx::Unsupported>([&] { store.erase("short"); }, "set, get, wait and check only",
                                     "erase");
    expect(store.reopen() == nullptr, "reopen() is not offered");
    expectThrows<collx::InvalidArgument>([&] { PmixStore(options, job.size, "x."); },
                                         "outside the job's", "a writer outside the job");

    // Two init()s in a row, each through PMIx with a store of its own.
    for (int round = 0; round < 2; ++round) {
      collx::Bootstrap used;
      auto context = collx::init({}, &used);
      expect(used.viaPmix && used.launcher == "pmix",
             "init() " + std::to_string(round) + " went through PMIx");
      expect(context->rank() == job.rank && context->size() == job.size,
             "init() " + std::to_string(round) + ": PMIx's rank and size");
      float value = static_cast<float>(job.rank + 1);
      collx::allreduce(*context, &value, &value, 1, collx::DataType::kFloat32);
      expect(value == static_cast<float>(job.size * (job.size + 1) / 2),
             "init() " + std::to_string(round) + ": allreduce");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", me, e.what());
    return 1;
  }
  if (failures == 0) std::printf("rank %d: pmix store checks passed\n", me);
  return failures == 0 ? 0 : 1;
}
