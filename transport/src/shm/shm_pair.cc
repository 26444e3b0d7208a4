#include "shm_pair.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "collx/base/copy.h"
#include "collx/base/log.h"

namespace collx::transport::shm {

namespace {

// A DATA piece smaller than this waits for more room (unless it is the message's last).
constexpr std::uint64_t kMinDataPiece = 4096;

void ringCopyIn(std::uint8_t* ring, std::uint64_t bytes, std::uint64_t at, const void* src,
                std::uint64_t n) {
  const std::uint64_t pos = at & (bytes - 1);
  const std::uint64_t first = std::min(n, bytes - pos);
  copyBytes(ring + pos, src, first);
  if (n > first) copyBytes(ring, static_cast<const std::uint8_t*>(src) + first, n - first);
}

void ringCopyOut(const std::uint8_t* ring, std::uint64_t bytes, std::uint64_t at, void* dst,
                 std::uint64_t n) {
  const std::uint64_t pos = at & (bytes - 1);
  const std::uint64_t first = std::min(n, bytes - pos);
  copyBytes(dst, ring + pos, first);
  if (n > first) copyBytes(static_cast<std::uint8_t*>(dst) + first, ring, n - first);
}

ProtocolPair::Limits limitsOf(const ShmPairOptions& options, const ArenaHeader& self,
                              const ArenaHeader& peer) {
  ProtocolPair::Limits limits;
  limits.eagerLimit = ShmPair::agreedEagerLimit(self, peer);
  limits.creditWindow = options.creditWindow;
  return limits;
}

}  // namespace

std::uint64_t ShmPair::agreedEagerLimit(const ArenaHeader& a, const ArenaHeader& b) {
  return std::min({std::uint64_t{a.eagerLimit}, std::uint64_t{b.eagerLimit},
                   a.ringBytes / 2 - sizeof(Frame), b.ringBytes / 2 - sizeof(Frame)});
}

ShmPair::ShmPair(LinkState& link, const ShmPairOptions& options, const Mapping& self,
                 const Layout& selfLayout, PeerView peer, int bellSocket)
    : ProtocolPair(peer.rank, link, limitsOf(options, *self.header(), *peer.mapping->header())),
      options_(options),
      peer_(std::move(peer)),
      bellSocket_(bellSocket),
      self_(self.header()),
      peerHeader_(peer_.mapping->header()) {
  in_ = self.ring(selfLayout, peer_.rank);
  inData_ = reinterpret_cast<std::uint8_t*>(in_ + 1);
  inBytes_ = self_->ringBytes;
  out_ = peer_.mapping->ring(peer_.layout, link_.rank);
  outData_ = reinterpret_cast<std::uint8_t*>(out_ + 1);
  outBytes_ = peerHeader_->ringBytes;
  // DATA pieces: up to a quarter of the ring, so that the reader copies one out while the
  // writer copies the next ones in.
  options_.dataChunkBytes = std::max<std::uint64_t>(
      64, std::min(options_.dataChunkBytes, outBytes_ / 4) & ~std::uint64_t{63});
  minPiece_ = std::min(kMinDataPiece, options_.dataChunkBytes);
}

ShmPair::~ShmPair() = default;

std::string ShmPair::describe() const {
  if (peer_.samePid) {
    return std::string("shm same process") + (options_.cma ? "" : ", ring copy");
  }
  return "shm pid " + std::to_string(peer_.pid) +
         (options_.cma && peer_.cma ? ", cma" : ", ring copy");
}

// ---- the protocol's hooks -----------------------------------------------------------------

void ShmPair::sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) {
  Out out;
  out.frame = frame;
  out.payload = payload;
  out.payloadLength = payload != nullptr ? frame.length : 0;
  out.transfer = transfer;
  control_.push_back(out);
}

void ShmPair::flushOut() {
  if (!control_.empty() || !data_.empty()) flush();
}

void ShmPair::push(Transfer& transfer, const Frame& ready) {
  data_.push_back(Piece{&transfer, ready.xfer});
}

void ShmPair::describeSend(const Transfer& transfer, Frame& rts) {
  rts.address = reinterpret_cast<std::uint64_t>(transfer.request->data);
}

void ShmPair::pull(Transfer& transfer) {
  pulls_.push_back(&transfer);
  // The first piece at once: the caller is here anyway, and the sender waits.
  std::uint64_t budget = options_.pullChunkBytes;
  pumpPulls(budget);
}

void ShmPair::dropQueued() noexcept {
  control_.clear();
  data_.clear();
  pulls_.clear();
}

// ---- the rings ----------------------------------------------------------------------------

bool ShmPair::room(std::uint64_t bytes) {
  if (outBytes_ - (outTail_ - outHeadSeen_) >= bytes) return true;
  outHeadSeen_ = atomic(out_->head).load(std::memory_order_acquire);
  return outBytes_ - (outTail_ - outHeadSeen_) >= bytes;
}

void ShmPair::writeFrame(Frame frame, const std::uint8_t* payload, std::uint64_t length) {
  if (frame.credit == 0) frame.credit = takeCredit();
  frame.epoch = link_.epoch;
  ringCopyIn(outData_, outBytes_, outTail_, &frame, sizeof(Frame));
  if (length > 0) ringCopyIn(outData_, outBytes_, outTail_ + sizeof(Frame), payload, length);
  outTail_ += sizeof(Frame) + padded(length);
  atomic(out_->tail).store(outTail_, std::memory_order_release);
  wrote_ = true;
}

void ShmPair::ring() noexcept {
  ssize_t ignored = ::sendto(bellSocket_, "", 0, MSG_DONTWAIT | MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&peer_.bell), peer_.bellLength);
  (void)ignored;  // a full queue already holds a wakeup; a gone peer is noticed otherwise
}

void ShmPair::notifyPeer() {
  wrote_ = false;
  // Pairs with the peer's prepareToSleep(): it sets `sleeping`, fences, then looks at its
  // rings; we published, fence, then look at `sleeping`. One of us sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto sleeping = atomic(peerHeader_->sleeping);
  if (sleeping.load(std::memory_order_relaxed) != 0 &&
      sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
    ring();
  }
}

bool ShmPair::flush() {
  bool moved = false;
  while (true) {
    blocked_ = false;
    while (!control_.empty()) {
      Out& o = control_.front();
      if (!room(sizeof(Frame) + padded(o.payloadLength))) {
        blocked_ = true;
        break;
      }
      writeFrame(o.frame, o.payload, o.payloadLength);
      Transfer* transfer = o.transfer;
      control_.pop_front();
      moved = true;
      if (transfer != nullptr) sent(*transfer);
    }
    while (!blocked_ && !data_.empty()) {
      Piece& p = data_.front();
      Transfer& t = *p.transfer;
      const std::uint64_t left = t.length() - t.done;
      room(outBytes_);  // refreshes the consumer's head
      const std::uint64_t free = outBytes_ - (outTail_ - outHeadSeen_);
      std::uint64_t piece = free > sizeof(Frame) ? (free - sizeof(Frame)) & ~std::uint64_t{63} : 0;
      piece = std::min({piece, left, options_.dataChunkBytes});
      if (piece < std::min(left, minPiece_)) {
        blocked_ = true;
        break;
      }
      Frame d;
      d.type = FrameType::kData;
      d.setMessage(t.request->key, t.request->fingerprint);
      d.length = piece;
      d.offset = t.done;
      d.xfer = p.xfer;
      writeFrame(d, t.bytes() + t.done, piece);
      t.done += piece;
      moved = true;
      if (t.done == t.length()) {
        data_.pop_front();
        sent(t);
      }
    }
    if (wrote_) notifyPeer();
    if (!blocked_) return moved;
    // Full: ask the consumer to ring us when it frees room, then look once more (it may
    // have freed room before it could see the flag).
    atomic(out_->producerWaiting).store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const std::uint64_t head = atomic(out_->head).load(std::memory_order_acquire);
    if (head == outHeadSeen_) return moved;
    outHeadSeen_ = head;
  }
}

bool ShmPair::receive(std::uint64_t& budget) {
  const std::uint64_t tail = atomic(in_->tail).load(std::memory_order_acquire);
  if (tail == inHead_) return false;
  if (tail - inHead_ > inBytes_) protocolError("the ring's tail is beyond its head");
  while (inHead_ != tail && budget > 0 && !dead()) {
    Frame f;
    ringCopyOut(inData_, inBytes_, inHead_, &f, sizeof(Frame));
    const std::uint64_t payload = f.carriesPayload() ? f.length : 0;
    const std::uint64_t bytes = sizeof(Frame) + padded(payload);
    if (payload > inBytes_ || bytes > tail - inHead_) {
      protocolError("a frame of " + std::to_string(bytes) + " bytes in " +
                    std::to_string(tail - inHead_) + " published bytes");
    }
    Sink sink = frameArrived(f);
    if (sink.length > 0 && sink.dst != nullptr) {  // (a stale frame's payload is dropped)
      ringCopyOut(inData_, inBytes_, inHead_ + sizeof(Frame), sink.dst, sink.length);
    }
    if (f.carriesPayload()) payloadArrived(sink);
    inHead_ += bytes;
    budget -= std::min(budget, bytes);
    // Room for the producer as we go: a DATA stream continues while we copy.
    atomic(in_->head).store(inHead_, std::memory_order_release);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto waiting = atomic(in_->producerWaiting);
  if (waiting.load(std::memory_order_relaxed) != 0 &&
      waiting.exchange(0, std::memory_order_acq_rel) != 0) {
    ring();
  }
  return true;
}

// ---- single copy --------------------------------------------------------------------------

bool ShmPair::pumpPulls(std::uint64_t& budget) {
  bool moved = false;
  while (!pulls_.empty() && budget > 0 && !dead()) {
    Transfer& t = *pulls_.front();
    const std::uint64_t n = std::min({t.length() - t.done, options_.pullChunkBytes, budget});
    // The peer's buffer is valid while its send is in flight, and a peer that fails or
    // closes waits for `pulling` to drop to zero before it lets go of its buffers.
    auto pulling = atomic(peerHeader_->pulling);
    pulling.fetch_add(1, std::memory_order_seq_cst);
    const auto state = atomic(peerHeader_->state).load(std::memory_order_seq_cst);
    if (state != static_cast<std::uint32_t>(State::kOpen)) {
      pulling.fetch_sub(1, std::memory_order_release);
      checkPeerState(state);
      peerGone(rankName() + " closed its context during a transfer");
    }
    int err = 0;
    bool ok =
        readProcessMemory(peer_.pid, peer_.samePid, t.address + t.done, t.bytes() + t.done, n, err);
    pulling.fetch_sub(1, std::memory_order_release);
    if (!ok) {
      if (t.done == 0 && (err == EPERM || err == ENOSYS || err == EACCES)) {
        // Not permitted after all (the probe passed): through the ring from now on.
        COLLX_WARN(kShm,
                   "rank {}: reading rank {}'s memory failed ({}): copying through the ring "
                   "from now on",
                   link_.rank, peer(), std::strerror(err));
        peer_.cma = false;
        std::deque<Transfer*> waiting;
        waiting.swap(pulls_);
        for (Transfer* w : waiting) pullRefused(*w);
        flush();
        return true;
      }
      const auto now = atomic(peerHeader_->state).load(std::memory_order_acquire);
      if (now != static_cast<std::uint32_t>(State::kOpen)) checkPeerState(now);
      if (err == ESRCH) {
        peerGone(rankName() + " (" + describe() + ") exited during a transfer: " + rankName() +
                 " died or was killed");
      }
      peerGone("reading " + rankName() + "'s buffer (" + describe() +
               ") failed: " + std::strerror(err));
    }
    t.done += n;
    budget -= n;
    moved = true;
    if (t.done == t.length()) {
      pulls_.pop_front();
      pulled(t);
    }
  }
  if (moved && !control_.empty()) flush();
  return moved;
}

// ---- progress, failure, closing -----------------------------------------------------------

bool ShmPair::progress(std::uint64_t& budget) {
  if (dead()) return false;
  // The state first: a peer that closed wrote everything before it said so.
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  bool moved = receive(budget);
  if (!pulls_.empty()) moved |= pumpPulls(budget);
  returnCredit();
  if (!control_.empty() || !data_.empty()) moved |= flush();
  if (state != static_cast<std::uint32_t>(State::kOpen) && !closing()) {
    checkPeerState(state);
    moved = true;
  } else if (peerFailedInThisGeneration() && !closing()) {
    raisePeerFailure();  // it failed, then re-formed before this rank looked
  }
  return moved;
}

bool ShmPair::peerFailedInThisGeneration() const noexcept {
  const std::int64_t failed = atomic(peerHeader_->failedIn).load(std::memory_order_acquire);
  return failed >= 0 && static_cast<std::uint8_t>(failed) == link_.epoch;
}

bool ShmPair::wouldWake() {
  if (dead()) return false;
  if (atomic(in_->tail).load(std::memory_order_acquire) != inHead_) return true;
  if (!pulls_.empty()) return true;
  if ((!control_.empty() || !data_.empty())) {
    if (!blocked_) return true;
    if (atomic(out_->head).load(std::memory_order_acquire) != outHeadSeen_) return true;
  }
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  return (state != static_cast<std::uint32_t>(State::kOpen) || peerFailedInThisGeneration()) &&
         !closing();
}

bool ShmPair::peerClosedArena() const noexcept {
  return atomic(peerHeader_->state).load(std::memory_order_acquire) ==
         static_cast<std::uint32_t>(State::kClosed);
}

void ShmPair::checkPeerState(std::uint32_t state) {
  if (state == static_cast<std::uint32_t>(State::kFailed)) raisePeerFailure();
  if (state == static_cast<std::uint32_t>(State::kClosed)) peerClosed();
}

void ShmPair::raisePeerFailure() {
  // The peer failed: raise its error here, naming the rank it names.
  PublishedError e = readError(*peerHeader_);
  raisePeerError(errorKindFrom(e.kind), std::move(e.text), e.culprit);
}

void ShmPair::peerExited() {
  if (dead() || exited_) return;
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  std::uint64_t budget = ~std::uint64_t{0};
  receive(budget);  // what it wrote before it went
  if (state == static_cast<std::uint32_t>(State::kOpen)) {
    peerGone(rankName() + " (" + describe() +
             ") exited without closing its context: " + rankName() + " died or was killed");
  }
  checkPeerState(state);
  exited_ = true;
}

}  // namespace collx::transport::shm
