// The flight recorder's ring (algorithms/recorder.h): what a call's entry holds through its
// life, the ring wrapping, and readers racing a writer without ever seeing a torn entry.
#include "collx/algorithms/recorder.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace collx::algorithms {
namespace {

Recorder::Call callFor(std::uint64_t n) {
  Recorder::Call c;
  c.seq = n - 1;  // a collective's id is its seq + 1: call n has id n
  c.fingerprint.coll = static_cast<std::uint8_t>(n % 7 + 1);
  c.fingerprint.dtype = static_cast<std::uint8_t>(n % 5);
  c.fingerprint.op = static_cast<std::uint8_t>(n % 3);
  c.fingerprint.root = static_cast<std::int32_t>(n % 11) - 1;
  c.fingerprint.count = n * 7;
  c.algorithm = n % 2 ? "ring" : "halving_doubling";
  c.peer = static_cast<int>(n % 13) - 1;
  c.admittedNs = static_cast<std::int64_t>(n * 1000);
  c.timeoutMs = static_cast<std::uint32_t>(n % 60000);
  return c;
}

TEST(Recorder, CapacityIsAPowerOfTwo) {
  EXPECT_EQ(Recorder(1000).capacity(), 1024u);
  EXPECT_EQ(Recorder(1024).capacity(), 1024u);
  EXPECT_EQ(Recorder(0).capacity(), 1u);
  EXPECT_EQ(Recorder(3).capacity(), 4u);
}

TEST(Recorder, AnEntryFollowsItsCallFromQueuedToEnd) {
  Recorder r(8);
  EXPECT_TRUE(r.snapshot().empty());
  const std::uint64_t id = r.admit(callFor(5), CallState::kQueued);
  EXPECT_EQ(id, 5u);  // seq 4 + 1
  CallRecord c;
  ASSERT_TRUE(r.find(id, &c));
  EXPECT_EQ(c.state, CallState::kQueued);
  EXPECT_EQ(c.seq, 4u);
  EXPECT_EQ(c.fingerprint, callFor(5).fingerprint);
  EXPECT_STREQ(c.algorithm, "ring");
  EXPECT_EQ(c.peer, 4);
  EXPECT_EQ(c.admittedNs, 5000);
  EXPECT_EQ(c.timeoutMs, 5u);
  EXPECT_EQ(c.runningNs, 0);
  EXPECT_EQ(c.waitKind, WaitKind::kNone);

  r.running(id, 7000);
  r.waiting(id, WaitKind::kRecv, 4, 3, 14, 1u << 20, 9000);
  ASSERT_TRUE(r.find(id, &c));
  EXPECT_EQ(c.state, CallState::kRunning);
  EXPECT_EQ(c.runningNs, 7000);
  EXPECT_EQ(c.waitKind, WaitKind::kRecv);
  EXPECT_EQ(c.waitPeer, 4);
  EXPECT_EQ(c.step, 3u);
  EXPECT_EQ(c.steps, 14u);
  EXPECT_EQ(c.waitBytes, 1u << 20);
  EXPECT_EQ(c.waitSinceNs, 9000);

  r.end(id, true, 2, 5000 + std::int64_t{123456} * 1000);  // admitted at 5000 ns
  ASSERT_TRUE(r.find(id, &c));
  EXPECT_EQ(c.state, CallState::kFailed);
  EXPECT_EQ(c.errorKind, 2);
  EXPECT_EQ(c.endedUs, 123456u);
  EXPECT_EQ(c.waitKind, WaitKind::kNone);  // it waits for nothing any more
  EXPECT_EQ(c.timeoutMs, 5u);

  const std::uint64_t second = r.admit(callFor(6), CallState::kRunning);
  r.end(second, false, 0, 6000 + 10000);
  ASSERT_TRUE(r.find(second, &c));
  EXPECT_EQ(c.state, CallState::kCompleted);
  EXPECT_EQ(c.runningNs, 6000);  // ran at once
  EXPECT_EQ(c.errorKind, 0);
  EXPECT_EQ(c.endedUs, 10u);
  ASSERT_EQ(r.snapshot().size(), 2u);
  EXPECT_EQ(r.snapshot()[0].id, 5u);
  EXPECT_EQ(r.snapshot()[1].id, 6u);
}

TEST(Recorder, KeepsTheLastFailuresText) {
  Recorder r(4);
  EXPECT_EQ(r.failureOf(1), "");
  for (std::uint64_t id = 1; id <= 10; ++id) r.noteFailure(id, "failure " + std::to_string(id));
  EXPECT_EQ(r.failureOf(10), "failure 10");
  EXPECT_EQ(r.failureOf(3), "failure 3");
  EXPECT_EQ(r.failureOf(2), "");  // only the last eight are kept
  EXPECT_EQ(r.failureOf(0), "");
}

TEST(Recorder, CoarseClockIsTheSteadyClock) {
  const auto before = std::chrono::steady_clock::now().time_since_epoch();
  const std::int64_t coarse = Recorder::coarseNowNs();
  const auto after = std::chrono::steady_clock::now().time_since_epoch();
  // Within the coarse clock's resolution (a tick of at most 10 ms) of the precise one.
  EXPECT_GE(coarse,
            std::chrono::duration_cast<std::chrono::nanoseconds>(before).count() - 10'000'000);
  EXPECT_LE(coarse, std::chrono::duration_cast<std::chrono::nanoseconds>(after).count());
}

TEST(Recorder, TheRingKeepsTheLastCallsAndIgnoresWritesForOverwrittenOnes) {
  Recorder r(4);
  for (std::uint64_t n = 1; n <= 10; ++n) r.admit(callFor(n), CallState::kRunning);
  const auto calls = r.snapshot();
  ASSERT_EQ(calls.size(), 4u);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].id, 7 + i);
    EXPECT_EQ(calls[i].seq, 6 + i);
  }
  CallRecord c;
  EXPECT_FALSE(r.find(3, &c));
  EXPECT_FALSE(r.find(0, &c));
  EXPECT_FALSE(r.find(11, &c));
  // Call 3's entry now holds call 7: a late end of call 3 changes nothing.
  r.end(3, true, 1, 99000);
  ASSERT_TRUE(r.find(7, &c));
  EXPECT_EQ(c.state, CallState::kRunning);
  EXPECT_EQ(c.endedUs, 0u);
}

TEST(Recorder, SendsAndReceivesHaveARingOfTheirOwnAndTakeTheirPlaceInTime) {
  Recorder r(64);
  Recorder::Call send = callFor(1);
  send.space = transport::Space::kPointToPoint;
  send.seq = 42;           // a tag: many calls may share it
  send.admittedNs = 1500;  // between collectives 1 and 2 (admitted at 1000 and 2000)
  r.admit(callFor(1), CallState::kRunning);
  r.admit(callFor(2), CallState::kRunning);
  const std::uint64_t a = r.admit(send, CallState::kRunning);
  const std::uint64_t b = r.admit(send, CallState::kRunning);
  EXPECT_NE(a, b);
  EXPECT_NE(a, 43u);  // not a collective's id
  const auto calls = r.snapshot();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].id, 1u);
  EXPECT_EQ(calls[1].id, a);
  EXPECT_EQ(calls[2].id, b);
  EXPECT_EQ(calls[3].id, 2u);
  CallRecord c;
  ASSERT_TRUE(r.find(b, &c));
  EXPECT_EQ(c.space, transport::Space::kPointToPoint);
  EXPECT_EQ(c.seq, 42u);
  r.end(b, false, 0, 2500);
  ASSERT_TRUE(r.find(b, &c));
  EXPECT_EQ(c.state, CallState::kCompleted);
  EXPECT_EQ(c.endedUs, 1u);
}

TEST(Recorder, ACallAdmittedWithoutATimeGetsOneWhenItWaitsOrEnds) {
  Recorder r(8);
  Recorder::Call call = callFor(1);
  call.admittedNs = 0;
  const std::uint64_t fast = r.admit(call, CallState::kRunning);
  CallRecord c;
  ASSERT_TRUE(r.find(fast, &c));
  EXPECT_EQ(c.admittedNs, 0);
  r.end(fast, false, 0, 7000);
  ASSERT_TRUE(r.find(fast, &c));
  EXPECT_EQ(c.admittedNs, 7000);  // within the tick it ended in
  EXPECT_EQ(c.runningNs, 7000);
  EXPECT_EQ(c.endedUs, 0u);
  call = callFor(2);
  call.admittedNs = 0;
  const std::uint64_t slow = r.admit(call, CallState::kRunning);
  r.waiting(slow, WaitKind::kShared, 1, 0, 0, 3, 9000);
  r.end(slow, false, 0, 9000 + 5'000'000);
  ASSERT_TRUE(r.find(slow, &c));
  EXPECT_EQ(c.admittedNs, 9000);  // no later than its wait began
  EXPECT_EQ(c.endedUs, 5000u);
}

// Recorder::completed with a Call's fields.
std::uint64_t complete(Recorder& r, const Recorder::Call& call, std::int64_t endedNs) {
  return r.completed(call.seq, call.fingerprint, call.algorithm, call.timeoutMs, call.admittedNs,
                     endedNs);
}

TEST(Recorder, ACallWrittenOnceWhenItEndedHoldsAllOfIt) {
  Recorder r(8);
  Recorder::Call call = callFor(3);
  call.admittedNs = 2000;  // its first wait began then
  EXPECT_EQ(complete(r, call, 2000 + 7000), 3u);
  CallRecord c;
  ASSERT_TRUE(r.find(3, &c));
  EXPECT_EQ(c.state, CallState::kCompleted);
  EXPECT_EQ(c.seq, 2u);
  EXPECT_EQ(c.fingerprint, callFor(3).fingerprint);
  EXPECT_STREQ(c.algorithm, "ring");
  EXPECT_EQ(c.admittedNs, 2000);
  EXPECT_EQ(c.runningNs, 2000);
  EXPECT_EQ(c.endedUs, 7u);
  EXPECT_EQ(c.timeoutMs, 3u);
  EXPECT_EQ(c.waitKind, WaitKind::kNone);
  EXPECT_EQ(c.peer, -1);  // a collective
  // Never waited: no time of its own, it takes the one it ended at.
  call = callFor(4);
  call.admittedNs = 0;
  complete(r, call, 9000);
  ASSERT_TRUE(r.find(4, &c));
  EXPECT_EQ(c.admittedNs, 9000);
  EXPECT_EQ(c.endedUs, 0u);
  ASSERT_EQ(r.snapshot().size(), 2u);
}

TEST(Recorder, AReusedEntryKeepsNothingOfTheCallBefore) {
  Recorder r(1);  // every call takes the one entry
  const std::uint64_t first = r.admit(callFor(1), CallState::kQueued);
  r.running(first, 7000);
  r.waiting(first, WaitKind::kRecv, 3, 1, 2, 64, 8000);
  const std::uint64_t second = r.admit(callFor(2), CallState::kRunning);
  CallRecord c;
  EXPECT_FALSE(r.find(first, &c));
  ASSERT_TRUE(r.find(second, &c));
  EXPECT_EQ(c.runningNs, 2000);  // its own admission, not call 1's start
  EXPECT_EQ(c.waitKind, WaitKind::kNone);
  EXPECT_EQ(c.seq, 1u);
  r.waiting(second, WaitKind::kSend, 5, 0, 1, 32, 2500);
  ASSERT_TRUE(r.find(second, &c));
  EXPECT_EQ(c.runningNs, 2000);
  EXPECT_EQ(c.waitPeer, 5);
  EXPECT_EQ(c.waitSinceNs, 2500);
  // Sends and receives: their tag is theirs, whatever the entry held before.
  Recorder::Call send = callFor(9);
  send.space = transport::Space::kPointToPoint;
  std::uint64_t last = 0;
  for (std::uint64_t tag = 100; tag < 140; ++tag) {  // around their ring (16) twice
    send.seq = tag;
    last = r.admit(send, tag % 2 ? CallState::kQueued : CallState::kRunning);
    if (tag % 2) r.running(last, 1);
  }
  ASSERT_TRUE(r.find(last, &c));
  EXPECT_EQ(c.seq, 139u);
  EXPECT_EQ(c.runningNs, 1);
}

TEST(Recorder, ReadersNeverSeeATornEntry) {
  // One writer runs calls through every state while readers copy the ring: every entry a
  // reader gets is one call's own (its fields all derive from its id).
  Recorder r(16);
  constexpr std::uint64_t kCalls = 200000;
  std::atomic<bool> done{false};
  std::atomic<int> reading{0};  // the writer starts once both readers do
  std::thread writer([&] {
    while (reading.load() < 2) std::this_thread::yield();
    for (std::uint64_t n = 1; n <= kCalls; ++n) {
      if (n % 3 == 0) {  // a short call, written once when it ended, n us after admission
        complete(r, callFor(n), static_cast<std::int64_t>(n * 1000 + n * 1000));
        continue;
      }
      const std::uint64_t id = r.admit(callFor(n), CallState::kQueued);
      r.running(id, static_cast<std::int64_t>(n * 1000 + 1));
      r.waiting(id, WaitKind::kSend, static_cast<int>(n % 17), static_cast<std::uint32_t>(n % 100),
                100, n * 5, static_cast<std::int64_t>(n * 1000 + 2));
      r.end(id, n % 7 == 0, static_cast<std::uint8_t>(n % 7 == 0 ? 1 : 0),
            static_cast<std::int64_t>(n * 1000 + n * 1000));  // n us after admission
    }
    done = true;
  });
  std::atomic<std::uint64_t> seen{0};
  std::atomic<int> torn{0};
  auto check = [&] {
    for (const CallRecord& c : r.snapshot()) {
      const Recorder::Call expected = callFor(c.id);
      bool ok = c.seq == expected.seq && c.fingerprint == expected.fingerprint &&
                c.peer == (c.id % 3 == 0 ? -1 : expected.peer) &&
                c.admittedNs == expected.admittedNs &&
                std::string(c.algorithm) == expected.algorithm;
      if (c.state != CallState::kQueued) {
        ok = ok && c.runningNs == c.admittedNs + (c.id % 3 == 0 ? 0 : 1);
      }
      if (c.waitKind != WaitKind::kNone) {
        ok = ok && c.waitPeer == static_cast<int>(c.id % 17) && c.waitBytes == c.id * 5 &&
             c.step == c.id % 100 && c.waitSinceNs == c.admittedNs + 2;
      }
      if (c.state == CallState::kCompleted || c.state == CallState::kFailed) {
        ok = ok && c.endedUs == c.id &&
             (c.state == CallState::kFailed) == (c.id % 7 == 0 && c.id % 3 != 0);
      }
      if (!ok) ++torn;
      ++seen;
    }
  };
  auto reader = [&] {
    ++reading;
    while (!done) check();  // racing the writer
    check();                // and once more after it (however fast it was)
  };
  std::thread a(reader), b(reader);
  writer.join();
  a.join();
  b.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(seen.load(), 0u);
  EXPECT_EQ(r.snapshot().size(), 16u);
}

}  // namespace
}  // namespace collx::algorithms
