// Harness: the pair protocol's decoding of what a peer sends (transport/src/protocol):
// frames and their payloads into a ProtocolPair whose medium does nothing, with receives and
// sends posted in between. The input is a script: each step a byte choosing what happens,
// then that step's bytes (a request's size and key, or a 64-byte frame header and its
// payload, or a reset of the pair into the next generation), read front to back
// (FuzzedDataProvider is Clang's: every build compiles this).
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "collx/transport/mesh.h"
#include "fuzz.h"
#include "protocol/protocol_pair.h"
#include "runtime.h"

namespace collx::transport {
namespace {

constexpr std::uint64_t kEagerLimit = 1024;
constexpr std::uint64_t kCreditWindow = 8192;
// Far more than any payload this pair agreed to take: a larger sink is a finding.
constexpr std::uint64_t kMostPayload = std::uint64_t{1} << 20;

// The input, read front to back; zeros once it ends.
class Script {
 public:
  Script(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  template <typename T>
  T next() {
    T v{};
    const std::size_t n = std::min(sizeof(T), left());
    std::memcpy(&v, p_, n);
    p_ += n;
    return v;
  }
  bool flag() { return (next<std::uint8_t>() & 1) != 0; }
  // A number in [0, most].
  std::uint64_t upTo(std::uint64_t most) { return next<std::uint16_t>() % (most + 1); }
  std::vector<std::uint8_t> bytes(std::size_t n) {
    n = std::min(n, left());
    std::vector<std::uint8_t> out(p_, p_ + n);
    p_ += n;
    return out;
  }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

struct FuzzRequest : Request {
  std::vector<std::uint8_t> buffer;
  bool completed = false;
  void onComplete(const Error*) override {
    if (completed) __builtin_trap();  // exactly once
    completed = true;
  }
};

// The medium: frames go nowhere, sends leave at once, large messages are pushed instantly.
class FuzzPair final : public ProtocolPair {
 public:
  explicit FuzzPair(LinkState& link) : ProtocolPair(1, link, Limits{kEagerLimit, kCreditWindow}) {}

  std::string describe() const override { return "fuzz"; }

  // A frame from the peer, with its payload from `payload` (zeros where it runs out).
  void arrive(const Frame& f, Script& in) {
    Sink sink = frameArrived(f);
    if (!f.carriesPayload()) return;
    // (A stale frame's payload, of an older generation, is read and dropped: no sink.)
    if (sink.length > kMostPayload || (sink.length > 0 && sink.dst == nullptr && !sink.stale)) {
      __builtin_trap();
    }
    const std::vector<std::uint8_t> bytes = in.bytes(sink.length);
    if (sink.dst != nullptr) {
      if (sink.length > 0) std::memset(sink.dst, 0, sink.length);
      if (!bytes.empty()) std::memcpy(sink.dst, bytes.data(), bytes.size());
    }
    payloadArrived(sink);
  }
  void land(std::uint32_t xfer, std::uint64_t bytes) { dataLanded(xfer, bytes); }
  void closing() { peerClosing(); }
  void closed() { peerClosed(); }
  void credit() { returnCredit(); }

 protected:
  const char* medium() const noexcept override { return "fuzz"; }
  void sendFrame(const Frame& frame, const std::uint8_t*, Transfer* transfer) override {
    lastSent = frame;
    (void)takeCredit();
    if (transfer != nullptr) sent(*transfer);
  }
  void flushOut() override {}
  bool outputQueued() const noexcept override { return false; }
  void push(Transfer& t, const Frame&) override { sent(t); }
  void dropQueued() noexcept override {}

 public:
  Frame lastSent;
};

Frame frameOf(Script& in, const Frame& last, std::uint8_t epoch) {
  Frame f;
  std::vector<std::uint8_t> raw = in.bytes(sizeof(Frame));
  raw.resize(sizeof(Frame), 0);
  std::memcpy(&f, raw.data(), sizeof(Frame));
  // Mostly frames that pass the magic, often about what this rank sent last (its transfer
  // id and message), so that the fuzzer reaches past the first checks.
  if ((raw[0] & 0x80) == 0) f.magic = kFrameMagic;
  // Mostly of this generation (the others are read and dropped).
  if ((raw[5] & 0x80) == 0) f.epoch = epoch;
  if ((raw[1] & 0x80) == 0) {
    f.xfer = last.xfer;
    f.seq = last.seq;
    f.step = last.step;
    f.space = last.space;
    f.coll = last.coll;
    f.dtype = last.dtype;
    f.op = last.op;
    f.root = last.root;
    f.count = last.count;
  }
  f.type = static_cast<FrameType>(static_cast<std::uint8_t>(f.type) % 10);
  return f;
}

}  // namespace
}  // namespace collx::transport

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace collx::transport;
  Script in(data, size);
  LinkState link;
  link.rank = 0;
  // Errors describe messages as a context does: any collective and data type byte.
  link.describer = collx::detail::describeMessage;
  std::deque<std::unique_ptr<FuzzRequest>> requests;
  auto pair = std::make_unique<FuzzPair>(link);
  try {
    while (in.left() > 0) {
      switch (in.next<std::uint8_t>() % 9) {
        case 0:
        case 1: {  // a receive or a send, of up to 3 eager limits
          auto r = std::make_unique<FuzzRequest>();
          r->kind = in.flag() ? Request::Kind::kRecv : Request::Kind::kSend;
          r->peer = 1;
          r->buffer.resize(in.upTo(3 * kEagerLimit));
          r->data = r->buffer.data();
          r->length = r->buffer.size();
          r->key.seq = in.upTo(3);
          r->key.step = static_cast<std::uint32_t>(in.upTo(1));
          r->key.space = in.flag() ? Space::kCollective : Space::kPointToPoint;
          r->fingerprint.coll = in.next<std::uint8_t>();
          r->fingerprint.count = r->buffer.size();
          if (r->key.space == Space::kCollective && in.flag()) {
            link.addActive(r->key.seq, r->fingerprint);
          }
          // Kept before it is posted: a post that throws (a mismatch with what already came)
          // may leave it in flight until failAll().
          requests.push_back(std::move(r));
          pair->post(*requests.back());
          break;
        }
        case 2:
        case 3:
        case 4:  // a frame from the peer
          pair->arrive(frameOf(in, pair->lastSent, link.epoch), in);
          break;
        case 5:  // bytes landed without a frame (RDMA)
          pair->land(in.flag() ? pair->lastSent.xfer : in.next<std::uint32_t>(),
                     in.upTo(4 * kEagerLimit));
          break;
        case 6:
          pair->credit();
          break;
        case 7:
          if (in.flag()) {
            pair->closing();
          } else {
            pair->closed();
          }
          break;
        case 8:  // the survivors go on in the next generation (Mesh::reform)
          pair->failAll(collx::IoError(collx::Where{0, "fuzz", 2}, "a rank was lost"));
          link.active.clear();
          ++link.epoch;
          pair->reset();
          break;
      }
    }
  } catch (const collx::Error& e) {
    // What a medium does with a protocol error: fail everything in flight.
    pair->failAll(e);
  }
  pair->failAll(collx::IoError(collx::Where{0, "fuzz", 1}, "the input ended"));
  pair.reset();
  return 0;
}
