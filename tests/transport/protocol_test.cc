// The pair protocol on its own (transport/src/protocol): two ProtocolPairs joined by an
// in-memory medium whose behaviour each test chooses (pull or push, DATA overtaking its
// announcement, writes straight into the peer's memory as RDMA does), so that every path
// of the protocol runs without sockets or shared memory, in any order of arrival.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/mesh.h"
#include "protocol/protocol_pair.h"

namespace collx::transport {
namespace {

// How the test medium moves large messages.
enum class Mode {
  kPush,       // READY, then DATA frames (tcp, shm without CMA)
  kPull,       // RTS carries the address, the receiver reads it (shm with CMA)
  kWriteInto,  // READY carries an address, the sender writes into it (RDMA WRITE WITH IMM)
};

struct Wire {
  Frame frame;
  std::vector<std::uint8_t> payload;
};

class LoopPair final : public ProtocolPair {
 public:
  LoopPair(int peer, LinkState& link, const Limits& limits, Mode mode)
      : ProtocolPair(peer, link, limits), mode_(mode) {}

  LoopPair* other = nullptr;
  std::deque<Wire> control;  // in order
  std::deque<Wire> data;     // DATA frames: may overtake control (several streams)
  std::deque<Transfer*> pullQueue;
  bool refusePulls = false;
  int flushes = 0;

  std::string describe() const override { return "loop"; }

  // Delivers one frame to the peer (from `lane`); false when the lane is empty.
  bool deliver(std::deque<Wire>& lane) {
    if (lane.empty()) return false;
    Wire w = std::move(lane.front());
    lane.pop_front();
    Sink sink = other->frameArrived(w.frame);
    if (w.frame.carriesPayload()) {
      EXPECT_EQ(sink.length, w.payload.size());
      if (sink.length > 0) std::memcpy(sink.dst, w.payload.data(), sink.length);
      other->payloadArrived(sink);
    }
    return true;
  }
  bool pumpPulls() {
    if (pullQueue.empty()) return false;
    Transfer* t = pullQueue.front();
    pullQueue.pop_front();
    if (refusePulls) {
      pullRefused(*t);
      return true;
    }
    std::memcpy(t->bytes(), reinterpret_cast<const void*>(t->address), t->length());
    pulled(*t);
    return true;
  }
  void end() { peerClosed(); }
  void goodbye() { peerClosing(); }
  [[noreturn]] void fail(ErrorKind kind, const std::string& text, int culprit) {
    raisePeerError(kind, text, culprit);
  }
  void credit() { returnCredit(); }

 protected:
  const char* medium() const noexcept override { return "loop"; }
  void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) override {
    Wire w;
    w.frame = frame;
    w.frame.credit = takeCredit();
    if (payload != nullptr) w.payload.assign(payload, payload + frame.length);
    control.push_back(std::move(w));
    if (transfer != nullptr) sent(*transfer);  // copied: the bytes have left
  }
  void flushOut() override { ++flushes; }
  bool outputQueued() const noexcept override { return !control.empty(); }
  void push(Transfer& t, const Frame& ready) override {
    if (mode_ == Mode::kWriteInto) {
      // Straight into the receiver's memory, then the "immediate" tells it.
      std::memcpy(reinterpret_cast<void*>(ready.address), t.bytes(), t.length());
      other->landed(ready.xfer, t.length());
      sent(t);
      return;
    }
    // DATA pieces of at most 1000 bytes.
    std::uint64_t offset = 0;
    do {
      Wire w;
      w.frame.type = FrameType::kData;
      w.frame.setMessage(t.request->key, t.request->fingerprint);
      w.frame.offset = offset;
      w.frame.length = std::min<std::uint64_t>(1000, t.length() - offset);
      w.frame.xfer = ready.xfer;
      w.payload.assign(t.bytes() + offset, t.bytes() + offset + w.frame.length);
      offset += w.frame.length;
      data.push_back(std::move(w));
    } while (offset < t.length());
    sent(t);
  }
  bool pulls() const noexcept override { return mode_ == Mode::kPull && !refusePulls; }
  void pull(Transfer& t) override { pullQueue.push_back(&t); }
  void describeSend(const Transfer& t, Frame& rts) override {
    if (mode_ == Mode::kPull) rts.address = reinterpret_cast<std::uint64_t>(t.request->data);
  }
  void describeRecv(const Transfer& t, Frame& ready) override {
    if (mode_ == Mode::kWriteInto) ready.address = reinterpret_cast<std::uint64_t>(t.request->data);
  }
  void dropQueued() noexcept override {
    control.clear();
    data.clear();
    pullQueue.clear();
  }

 private:
  void landed(std::uint32_t xfer, std::uint64_t bytes) { dataLanded(xfer, bytes); }
  Mode mode_;
};

struct TestRequest : Request {
  int completions = 0;
  std::string error;
  ErrorKind errorKind = ErrorKind::kIo;
  void onComplete(const Error* e) override {
    ++completions;
    if (e != nullptr) {
      error = e->what();
      errorKind = e->kind();
    }
  }
};

struct Loop {
  explicit Loop(Mode mode, ProtocolPair::Limits limits = {1024, 8192}) {
    link[0].rank = 0;
    link[1].rank = 1;
    a = std::make_unique<LoopPair>(1, link[0], limits, mode);
    b = std::make_unique<LoopPair>(0, link[1], limits, mode);
    a->other = b.get();
    b->other = a.get();
  }
  LinkState link[2];
  std::unique_ptr<LoopPair> a, b;

  // Delivers everything, control first unless `dataFirst` (then rank 1's frames go first
  // too, so that its READY reaches rank 0 before rank 0's RTS reaches it, and the DATA
  // overtakes the RTS).
  void run(bool dataFirst = false) {
    for (int guard = 0; guard < 100000; ++guard) {
      bool moved = false;
      LoopPair* order[2] = {dataFirst ? b.get() : a.get(), dataFirst ? a.get() : b.get()};
      for (LoopPair* p : order) {
        if (dataFirst)
          moved |= p->deliver(p->data) || p->deliver(p->control);
        else
          moved |= p->deliver(p->control) || p->deliver(p->data);
        moved |= p->pumpPulls();
        p->credit();  // as a medium does at the end of its progress
      }
      if (!moved) return;
    }
    FAIL() << "the loop never settles";
  }
};

std::unique_ptr<TestRequest> request(Request::Kind kind, int peer, std::vector<std::uint8_t>& buf,
                                     std::uint64_t seq, std::uint32_t step = 0) {
  auto r = std::make_unique<TestRequest>();
  r->kind = kind;
  r->peer = peer;
  r->data = buf.data();
  r->length = buf.size();
  r->key = MessageKey{seq, step, Space::kPointToPoint};
  r->fingerprint = Fingerprint{5, 0, 0, -1, buf.size()};
  return r;
}

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

struct Case {
  Mode mode;
  std::size_t bytes;
  bool recvFirst;
  bool dataFirst;
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  const char* mode[] = {"push", "pull", "write"};
  return std::string(mode[static_cast<int>(info.param.mode)]) + "_" +
         std::to_string(info.param.bytes) + (info.param.recvFirst ? "_recvfirst" : "_sendfirst") +
         (info.param.dataFirst ? "_dataovertakes" : "");
}

class ProtocolPaths : public ::testing::TestWithParam<Case> {};

// Every path delivers the bytes, completes each request exactly once, and leaves nothing
// in flight, whichever side posts first and whether DATA overtakes its announcement.
TEST_P(ProtocolPaths, DeliverTheBytesAndCompleteOnce) {
  const Case c = GetParam();
  Loop loop(c.mode);
  auto src = pattern(c.bytes, 3);
  std::vector<std::uint8_t> dst(c.bytes, 0);
  auto send = request(Request::Kind::kSend, 1, src, 42);
  auto recv = request(Request::Kind::kRecv, 0, dst, 42);
  if (c.recvFirst) {
    loop.b->post(*recv);
    loop.run(c.dataFirst);
    loop.a->post(*send);
  } else {
    loop.a->post(*send);
    loop.run(c.dataFirst);
    loop.b->post(*recv);
  }
  loop.run(c.dataFirst);
  EXPECT_EQ(send->completions, 1);
  EXPECT_EQ(recv->completions, 1);
  EXPECT_EQ(send->error, "");
  EXPECT_EQ(recv->error, "");
  EXPECT_EQ(dst, src);
  EXPECT_EQ(loop.a->inFlight(), 0u);
  EXPECT_EQ(loop.b->inFlight(), 0u);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Mode mode : {Mode::kPush, Mode::kPull, Mode::kWriteInto}) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{1024}, std::size_t{1025},
                              std::size_t{5000}}) {
      for (bool recvFirst : {false, true}) {
        for (bool dataFirst : {false, true}) {
          if (dataFirst && mode != Mode::kPush) continue;
          out.push_back(Case{mode, bytes, recvFirst, dataFirst});
        }
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Media, ProtocolPaths, ::testing::ValuesIn(cases()), caseName);

// A receive of more than the eager limit on a medium that pushes asks at once: the READY
// goes out before any RTS came, so the data need not wait for a round trip.
TEST(Protocol, ALargeReceiveOnAPushingMediumSaysReadyAtOnce) {
  Loop loop(Mode::kPush);
  std::vector<std::uint8_t> dst(5000);
  auto recv = request(Request::Kind::kRecv, 0, dst, 1);
  loop.b->post(*recv);
  ASSERT_EQ(loop.b->control.size(), 1u);
  EXPECT_EQ(loop.b->control.front().frame.type, FrameType::kReady);
  // A small one waits for its EAGER or RTS.
  std::vector<std::uint8_t> small(10);
  auto recv2 = request(Request::Kind::kRecv, 0, small, 2);
  loop.b->post(*recv2);
  EXPECT_EQ(loop.b->control.size(), 1u);
  // And on a medium that pulls, a large receive waits for the RTS with the address.
  Loop pulling(Mode::kPull);
  auto recv3 = request(Request::Kind::kRecv, 0, dst, 1);
  pulling.b->post(*recv3);
  EXPECT_TRUE(pulling.b->control.empty());
}

// Messages with one key match in posting order on both sides, whatever their paths; DATA of
// an earlier message that completes its receive before the RTS arrives must not make that
// RTS match the next receive.
TEST(Protocol, EqualKeysMatchInPostingOrderAcrossPaths) {
  for (bool dataFirst : {false, true}) {
    Loop loop(Mode::kPush);
    std::vector<std::size_t> sizes = {5000, 10, 3000, 0, 1024, 1025, 7};
    std::vector<std::vector<std::uint8_t>> src, dst;
    std::vector<std::unique_ptr<TestRequest>> sends, recvs;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      src.push_back(pattern(sizes[i], static_cast<std::uint8_t>(i)));
      dst.emplace_back(sizes[i], 0xEE);
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      recvs.push_back(request(Request::Kind::kRecv, 0, dst[i], 9));
      loop.b->post(*recvs.back());
    }
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      sends.push_back(request(Request::Kind::kSend, 1, src[i], 9));
      loop.a->post(*sends.back());
    }
    loop.run(dataFirst);
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(recvs[i]->completions, 1) << i;
      EXPECT_EQ(recvs[i]->error, "") << i;
      EXPECT_EQ(sends[i]->completions, 1) << i;
      EXPECT_EQ(dst[i], src[i]) << "message " << i << (dataFirst ? " (DATA first)" : "");
    }
    EXPECT_EQ(loop.b->inFlight(), 0u);
  }
}

// Early eager messages beyond the credit window wait as announcements; the receiver's
// consumption returns credit, so eager sends resume.
TEST(Protocol, CreditRunsOutThenComesBack) {
  Loop loop(Mode::kPush, {1024, 4096});
  std::vector<std::vector<std::uint8_t>> src, dst;
  std::vector<std::unique_ptr<TestRequest>> sends, recvs;
  const int n = 20;
  for (int i = 0; i < n; ++i) {
    src.push_back(pattern(1000, static_cast<std::uint8_t>(i)));
    dst.emplace_back(1000, 0);
    sends.push_back(request(Request::Kind::kSend, 1, src.back(), 100 + i));
    loop.a->post(*sends.back());
  }
  int eager = 0, rts = 0;
  for (const Wire& w : loop.a->control) {
    eager += w.frame.type == FrameType::kEager;
    rts += w.frame.type == FrameType::kRts;
  }
  EXPECT_EQ(eager, 4);  // 4096 bytes of credit
  EXPECT_EQ(rts, n - 4);
  loop.run();
  for (int i = n - 1; i >= 0; --i) {  // received in reverse: every early one waits
    recvs.push_back(request(Request::Kind::kRecv, 0, dst[i], 100 + i));
    loop.b->post(*recvs.back());
    loop.run();
  }
  for (int i = 0; i < n; ++i) EXPECT_EQ(dst[i], src[i]) << i;
  // The consumed eager bytes went back (with frames, or a CREDIT): eager again.
  auto again = pattern(1000, 9);
  auto send = request(Request::Kind::kSend, 1, again, 999);
  loop.a->post(*send);
  EXPECT_EQ(loop.a->control.back().frame.type, FrameType::kEager);
  loop.run();
  // Messages whose receive was posted first return their credit too: a stream of them
  // stays eager far beyond the window.
  std::vector<std::uint8_t> sink(1000);
  auto late = request(Request::Kind::kRecv, 0, sink, 999);
  loop.b->post(*late);
  for (int i = 0; i < 3 * n; ++i) {
    auto r = request(Request::Kind::kRecv, 0, sink, 5000 + i);
    loop.b->post(*r);
    loop.run();
    auto s = request(Request::Kind::kSend, 1, again, 5000 + i);
    loop.a->post(*s);
    EXPECT_EQ(loop.a->control.back().frame.type, FrameType::kEager) << "message " << i;
    loop.run();
    EXPECT_EQ(r->completions, 1);
  }
}

TEST(Protocol, ALengthMismatchNamesBothSides) {
  Loop loop(Mode::kPush);
  auto src = pattern(100, 1);
  std::vector<std::uint8_t> dst(200);
  auto recv = request(Request::Kind::kRecv, 0, dst, 5);
  auto send = request(Request::Kind::kSend, 1, src, 5);
  loop.b->post(*recv);
  loop.a->post(*send);
  try {
    loop.run();
    FAIL() << "no mismatch";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 expected"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("200 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100 bytes"), std::string::npos) << e.what();
    EXPECT_EQ(e.peer(), 0);
  }
  // The sender of a small message that meets a READY for a large one says so itself.
  Loop other(Mode::kPush);
  std::vector<std::uint8_t> big(5000);
  auto bigRecv = request(Request::Kind::kRecv, 0, big, 6);
  other.b->post(*bigRecv);
  other.run();  // the READY reaches rank 0
  auto smallSend = request(Request::Kind::kSend, 1, src, 6);
  EXPECT_THROW(other.a->post(*smallSend), MismatchError);
}

TEST(Protocol, ACollectiveRunningAsAnotherIsAMismatchAtOnce) {
  Loop loop(Mode::kPush);
  loop.link[1].addActive(7, Fingerprint{1, 6, 0, -1, 4});
  auto src = pattern(16, 1);
  auto send = request(Request::Kind::kSend, 1, src, 7);
  send->key.space = Space::kCollective;
  send->fingerprint = Fingerprint{3, 6, 0, 0, 4};  // "broadcast" where rank 1 runs "allreduce"
  loop.a->post(*send);
  EXPECT_THROW(loop.run(), MismatchError);
}

TEST(Protocol, FailAllEndsEveryRequestOnceAndForgetsItsBuffer) {
  Loop loop(Mode::kPush);
  std::vector<std::uint8_t> dst1(10, 0), dst2(5000, 0);
  auto src = pattern(5000, 1);
  auto r1 = request(Request::Kind::kRecv, 0, dst1, 1);
  auto r2 = request(Request::Kind::kRecv, 0, dst2, 2);
  auto s1 = request(Request::Kind::kSend, 0, src, 3);
  loop.b->post(*r1);
  loop.b->post(*r2);
  loop.b->post(*s1);
  EXPECT_EQ(loop.b->inFlight(), 3u);
  Aborted error(Where{1, "test", -1}, "stop");
  loop.b->failAll(error);
  loop.b->failAll(error);  // a second failure changes nothing
  for (TestRequest* r : {r1.get(), r2.get(), s1.get()}) {
    EXPECT_EQ(r->completions, 1);
    EXPECT_EQ(r->errorKind, ErrorKind::kAborted);
  }
  EXPECT_EQ(loop.b->inFlight(), 0u);
  EXPECT_TRUE(loop.b->control.empty());
  // Later posts fail; nothing writes the old buffers.
  auto r3 = request(Request::Kind::kRecv, 0, dst1, 1);
  EXPECT_THROW(loop.b->post(*r3), IoError);
  EXPECT_EQ(dst1, std::vector<std::uint8_t>(10, 0));
}

TEST(Protocol, APeerClosingWithMessagesInFlightIsAnIoErrorNamingIt) {
  Loop loop(Mode::kPush);
  std::vector<std::uint8_t> dst(10);
  auto recv = request(Request::Kind::kRecv, 0, dst, 1);
  loop.b->post(*recv);
  try {
    loop.b->end();
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 closed its context while this rank still had 1"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.peer(), 0);
  }
}

TEST(Protocol, WhatArrivedBeforeTheGoodbyeIsStillReceived) {
  Loop loop(Mode::kPush);
  auto src = pattern(50, 4);
  std::vector<std::uint8_t> dst(50);
  auto send = request(Request::Kind::kSend, 1, src, 8);
  loop.a->post(*send);
  loop.run();
  loop.b->goodbye();
  loop.b->end();  // nothing in flight: no error
  auto recv = request(Request::Kind::kRecv, 0, dst, 8);
  loop.b->post(*recv);
  EXPECT_EQ(recv->completions, 1);
  EXPECT_EQ(dst, src);
  // Anything else cannot complete any more.
  auto more = request(Request::Kind::kRecv, 0, dst, 9);
  EXPECT_THROW(loop.b->post(*more), IoError);
  auto out = request(Request::Kind::kSend, 0, dst, 9);
  EXPECT_THROW(loop.b->post(*out), IoError);
}

TEST(Protocol, APeersErrorIsRaisedNamingTheRankItNames) {
  Loop loop(Mode::kPush);
  try {
    loop.b->fail(ErrorKind::kTimeout, "timed out waiting for rank 3", 3);
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(e.peer(), 3);
    EXPECT_NE(std::string(e.what()).find("rank 0 failed: timed out waiting for rank 3"),
              std::string::npos)
        << e.what();
  }
  // An error that names nobody, or this rank, names the peer that sent it.
  try {
    loop.b->fail(ErrorKind::kIo, "gone", 1);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.peer(), 0);
  }
}

TEST(Protocol, MalformedFramesAreProtocolErrors) {
  Loop loop(Mode::kPush);
  Wire w;
  w.frame.type = FrameType::kData;
  w.frame.xfer = 12345;
  w.frame.length = 4;
  w.payload.assign(4, 0);
  loop.a->data.push_back(w);
  EXPECT_THROW(loop.run(), IoError);
  Loop second(Mode::kPush);
  Wire bad;
  bad.frame.magic = 0;
  second.a->control.push_back(bad);
  EXPECT_THROW(second.run(), IoError);
  Loop third(Mode::kPush);
  Wire unknown;
  unknown.frame.type = static_cast<FrameType>(99);
  third.a->control.push_back(unknown);
  EXPECT_THROW(third.run(), IoError);
  // DATA beyond the receive buffer.
  Loop fourth(Mode::kPush);
  std::vector<std::uint8_t> dst(2000);
  auto recv = request(Request::Kind::kRecv, 0, dst, 1);
  fourth.b->post(*recv);
  const std::uint32_t id = fourth.b->control.front().frame.xfer;
  Wire over;
  over.frame.type = FrameType::kData;
  over.frame.xfer = id;
  over.frame.offset = 1990;
  over.frame.length = 20;
  over.payload.assign(20, 1);
  fourth.b->control.clear();
  fourth.a->data.push_back(over);
  EXPECT_THROW(fourth.run(), IoError);
  EXPECT_EQ(dst, std::vector<std::uint8_t>(2000, 0));
}

// What a peer sends is bounded before this rank buffers anything for it: EAGER messages by
// the eager limit and the credit this rank gave, returned credit by what was sent, message
// spaces by the two there are (found missing while writing tests/fuzz/fuzz_frames.cc).
TEST(Protocol, HostileFramesAreRefusedBeforeAnythingIsBuffered) {
  auto failure = [](Loop& loop) {
    try {
      loop.run();
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto eager = [](std::uint64_t length, std::size_t payload, std::uint64_t seq) {
    Wire w;
    w.frame.type = FrameType::kEager;
    w.frame.space = static_cast<std::uint8_t>(Space::kPointToPoint);
    w.frame.seq = seq;
    w.frame.coll = 5;  // as request() describes its messages
    w.frame.count = length;
    w.frame.length = length;
    w.payload.assign(payload, 7);
    return w;
  };
  // An EAGER message of 1 TiB, for no receive: refused, not allocated.
  Loop huge(Mode::kPush);
  huge.a->control.push_back(eager(std::uint64_t{1} << 40, 0, 1));
  EXPECT_NE(failure(huge).find("beyond the eager limit of 1024 bytes"), std::string::npos);
  // Within the eager limit, beyond the credit window of 8192 bytes: the ninth of 1000 bytes.
  Loop flood(Mode::kPush);
  for (std::uint64_t i = 0; i < 9; ++i) flood.a->control.push_back(eager(1000, 1000, i));
  const std::string floodError = failure(flood);
  EXPECT_NE(floodError.find("or the 192 bytes of credit this rank gave"), std::string::npos)
      << floodError;
  // Eight fit, and their receives take them.
  Loop fits(Mode::kPush);
  for (std::uint64_t i = 0; i < 8; ++i) fits.a->control.push_back(eager(1000, 1000, i));
  fits.run();
  std::vector<std::uint8_t> dst(1000);
  auto recv = request(Request::Kind::kRecv, 0, dst, 3);
  fits.b->post(*recv);
  EXPECT_EQ(recv->completions, 1);
  EXPECT_EQ(dst, std::vector<std::uint8_t>(1000, 7));
  // Credit for bytes never sent.
  Loop credit(Mode::kPush);
  Wire gift;
  gift.frame.credit = 1;
  credit.a->control.push_back(gift);
  EXPECT_NE(failure(credit).find("returning 1 bytes of eager credit, more than the 0 bytes sent"),
            std::string::npos);
  // A message space that does not exist.
  Loop space(Mode::kPush);
  Wire rts;
  rts.frame.type = FrameType::kRts;
  rts.frame.space = 7;
  space.a->control.push_back(rts);
  EXPECT_NE(failure(space).find("unknown message space 7"), std::string::npos);
}

// A medium that turns out not to be allowed to read the sender's memory asks for the bytes
// instead (shm when process_vm_readv is refused after the probe passed).
TEST(Protocol, ARefusedPullFallsBackToPushing) {
  Loop loop(Mode::kPull);
  auto src = pattern(3000, 5);
  std::vector<std::uint8_t> dst(3000);
  auto send = request(Request::Kind::kSend, 1, src, 4);
  auto recv = request(Request::Kind::kRecv, 0, dst, 4);
  loop.a->post(*send);
  loop.b->post(*recv);
  loop.b->refusePulls = true;
  loop.run();
  EXPECT_EQ(dst, src);
  EXPECT_EQ(send->completions, 1);
  EXPECT_EQ(recv->completions, 1);
  // From now on large receives on it are receiver-ready.
  auto recv2 = request(Request::Kind::kRecv, 0, dst, 5);
  loop.b->post(*recv2);
  EXPECT_EQ(loop.b->control.back().frame.type, FrameType::kReady);
}

}  // namespace
}  // namespace collx::transport
