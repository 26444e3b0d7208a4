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

}  // namespace

ShmPair::ShmPair(LinkState& link, const ShmPairOptions& options, const Mapping& self,
                 const Layout& selfLayout, PeerView peer, int bellSocket)
    : Pair(peer.rank),
      link_(link),
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
  // The eager limit fits twice in the ring the peer gave us.
  options_.eagerLimit = std::min(options_.eagerLimit, outBytes_ / 2 - sizeof(Record));
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

// ---- posting ------------------------------------------------------------------------------

void ShmPair::post(Request& request) {
  if (dead_) protocolError("the connection already failed");
  request.progress = 0;
  request.pending = 0;
  request.xfer = 0;
  request.sawAnnouncement = false;
  if (request.kind == Request::Kind::kSend) {
    if (peerClosed_) peerGone("rank " + std::to_string(peer()) + " has closed its context");
    live_.insert(&request);
    bool eager = false;
    if (request.length <= options_.eagerLimit) {
      const std::uint64_t need = charge(request.length);
      if (options_.creditWindow - (eagerCharged_ - creditSeen_) < need) {
        creditSeen_ = atomic(out_->creditReturned).load(std::memory_order_acquire);
      }
      eager = options_.creditWindow - (eagerCharged_ - creditSeen_) >= need;
      if (eager) eagerCharged_ += need;
    }
    Record r;
    r.setMessage(request.key, request.fingerprint);
    r.length = request.length;
    if (eager) {
      r.type = static_cast<std::uint8_t>(RecordType::kEager);
      queueControl(r, &request, static_cast<const std::uint8_t*>(request.data), request.length);
    } else {
      request.xfer = nextXfer_++;
      if (nextXfer_ == 0) nextXfer_ = 1;
      sends_[request.xfer] = &request;
      r.type = static_cast<std::uint8_t>(RecordType::kRts);
      r.address = reinterpret_cast<std::uint64_t>(request.data);
      r.xfer = request.xfer;
      queueControl(r);
    }
    flush();  // the calling thread writes at once: latency is one trip, not a hand-off
    return;
  }

  // A receive: something may have arrived for it already.
  auto found = unexpected_.find(request.key);
  if (found != unexpected_.end() && !found->second.empty()) {
    Unexpected u = std::move(found->second.front());
    found->second.pop_front();
    if (found->second.empty()) unexpected_.erase(found);
    live_.insert(&request);
    verify(request, u.record);
    if (u.record.type == static_cast<std::uint8_t>(RecordType::kEager)) {
      if (request.length > 0) copyBytes(request.data, u.payload.bytes.get(), request.length);
      giveBuffer(std::move(u.payload));
      returnCredit(charge(request.length));
      complete(request);
    } else {
      startPull(request, u.record);
    }
    if (!control_.empty()) flush();
    return;
  }
  if (peerClosed_) peerGone("rank " + std::to_string(peer()) + " has closed its context");
  live_.insert(&request);
  posted_[request.key].push_back(&request);
}

void ShmPair::queueControl(const Record& record, Request* request, const std::uint8_t* payload,
                           std::uint64_t length) {
  Out out;
  out.record = record;
  out.request = request;
  out.payload = payload;
  out.payloadLength = length;
  control_.push_back(out);
}

void ShmPair::startPull(Request& request, const Record& rts) {
  request.sawAnnouncement = true;
  if (request.length == 0) {
    Record done;
    done.type = static_cast<std::uint8_t>(RecordType::kDone);
    done.xfer = rts.xfer;
    queueControl(done);
    complete(request);
    return;
  }
  if (!options_.cma || !peer_.cma) {
    askForData(request, rts);
    return;
  }
  pulls_.push_back(Pull{&request, rts.address, rts.xfer});
  std::uint64_t budget = options_.pullChunkBytes;
  pumpPulls(budget);
}

void ShmPair::askForData(Request& request, const Record& rts) {
  request.xfer = nextXfer_++;
  if (nextXfer_ == 0) nextXfer_ = 1;
  recvs_[request.xfer] = &request;
  Record ready;
  ready.type = static_cast<std::uint8_t>(RecordType::kReady);
  ready.setMessage(request.key, request.fingerprint);
  ready.length = request.length;
  ready.xfer = rts.xfer;
  ready.reply = request.xfer;
  queueControl(ready);
}

void ShmPair::complete(Request& request) {
  live_.erase(&request);
  request.onComplete(nullptr);
}

ShmPair::Buffer ShmPair::takeBuffer(std::uint64_t bytes) {
  // The smallest spare that fits.
  std::size_t best = spare_.size();
  for (std::size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].capacity >= bytes &&
        (best == spare_.size() || spare_[i].capacity < spare_[best].capacity)) {
      best = i;
    }
  }
  if (best == spare_.size()) {
    Buffer fresh;
    fresh.bytes = std::make_unique_for_overwrite<std::uint8_t[]>(bytes);
    fresh.capacity = bytes;
    return fresh;
  }
  Buffer found = std::move(spare_[best]);
  spare_[best] = std::move(spare_.back());
  spare_.pop_back();
  spareBytes_ -= found.capacity;
  return found;
}

void ShmPair::giveBuffer(Buffer buffer) {
  if (buffer.capacity == 0 || spareBytes_ + buffer.capacity > options_.creditWindow) return;
  spareBytes_ += buffer.capacity;
  spare_.push_back(std::move(buffer));
}

void ShmPair::returnCredit(std::uint64_t bytes) {
  creditReturned_ += bytes;
  atomic(in_->creditReturned).store(creditReturned_, std::memory_order_release);
}

// ---- checks -------------------------------------------------------------------------------

void ShmPair::checkActive(const Record& r) {
  if (r.space != static_cast<std::uint8_t>(Space::kCollective)) return;
  const Fingerprint* expected = link_.findActive(r.seq);
  if (expected == nullptr || *expected == r.fingerprint()) return;
  mismatch("rank " + std::to_string(link_.rank) + " expected " +
           link_.describe(r.key(), *expected) + " from rank " + std::to_string(peer()) + ", got " +
           link_.describe(r.key(), r.fingerprint()));
}

void ShmPair::verify(const Request& request, const Record& r) {
  if (request.fingerprint == r.fingerprint() && request.length == r.length) return;
  std::string mine = link_.describe(request.key, request.fingerprint) + " (" +
                     std::to_string(request.length) + " bytes)";
  std::string theirs =
      link_.describe(r.key(), r.fingerprint()) + " (" + std::to_string(r.length) + " bytes)";
  if (request.kind == Request::Kind::kRecv) {
    mismatch("rank " + std::to_string(link_.rank) + " expected " + mine + " from rank " +
             std::to_string(peer()) + ", got " + theirs);
  }
  mismatch("rank " + std::to_string(link_.rank) + " sends " + mine + " to rank " +
           std::to_string(peer()) + ", which expects " + theirs);
}

void ShmPair::mismatch(const std::string& text) { throw MismatchError(where(), text); }

void ShmPair::peerGone(const std::string& why) { throw IoError(where(), why); }

void ShmPair::protocolError(const std::string& why) {
  throw IoError(where(), "protocol error on the shared-memory connection to rank " +
                             std::to_string(peer()) + " (" + describe() + "): " + why);
}

// ---- the rings ----------------------------------------------------------------------------

bool ShmPair::room(std::uint64_t bytes) {
  if (outBytes_ - (outTail_ - outHeadSeen_) >= bytes) return true;
  outHeadSeen_ = atomic(out_->head).load(std::memory_order_acquire);
  return outBytes_ - (outTail_ - outHeadSeen_) >= bytes;
}

void ShmPair::writeRecord(const Record& record, const std::uint8_t* payload, std::uint64_t length) {
  ringCopyIn(outData_, outBytes_, outTail_, &record, sizeof(Record));
  if (length > 0) ringCopyIn(outData_, outBytes_, outTail_ + sizeof(Record), payload, length);
  outTail_ += sizeof(Record) + padded(length);
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
      if (!room(sizeof(Record) + padded(o.payloadLength))) {
        blocked_ = true;
        break;
      }
      writeRecord(o.record, o.payload, o.payloadLength);
      Request* request = o.request;
      control_.pop_front();
      moved = true;
      if (request != nullptr) complete(*request);
    }
    while (!blocked_ && !data_.empty()) {
      Stream& s = data_.front();
      Request& request = *s.request;
      const std::uint64_t left = request.length - s.offset;
      room(outBytes_);  // refreshes the consumer's head
      const std::uint64_t free = outBytes_ - (outTail_ - outHeadSeen_);
      std::uint64_t piece =
          free > sizeof(Record) ? (free - sizeof(Record)) & ~std::uint64_t{63} : 0;
      piece = std::min({piece, left, options_.dataChunkBytes});
      if (piece < std::min(left, minPiece_)) {
        blocked_ = true;
        break;
      }
      Record d;
      d.type = static_cast<std::uint8_t>(RecordType::kData);
      d.setMessage(request.key, request.fingerprint);
      d.length = piece;
      d.offset = s.offset;
      d.xfer = s.xfer;
      writeRecord(d, static_cast<const std::uint8_t*>(request.data) + s.offset, piece);
      s.offset += piece;
      moved = true;
      if (s.offset == request.length) {
        sends_.erase(request.xfer);
        data_.pop_front();
        complete(request);
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
  while (inHead_ != tail && budget > 0 && !dead_) {
    Record r;
    ringCopyOut(inData_, inBytes_, inHead_, &r, sizeof(Record));
    const bool carries = r.type == static_cast<std::uint8_t>(RecordType::kEager) ||
                         r.type == static_cast<std::uint8_t>(RecordType::kData);
    const std::uint64_t bytes = sizeof(Record) + (carries ? padded(r.length) : 0);
    if (bytes > tail - inHead_) {
      protocolError("a record of " + std::to_string(bytes) + " bytes in " +
                    std::to_string(tail - inHead_) + " published bytes");
    }
    onRecord(r, inHead_ + sizeof(Record));
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

Request* ShmPair::takePosted(const MessageKey& key) {
  auto posted = posted_.find(key);
  if (posted == posted_.end() || posted->second.empty()) return nullptr;
  Request* request = posted->second.front();
  posted->second.pop_front();
  if (posted->second.empty()) posted_.erase(posted);
  return request;
}

void ShmPair::onRecord(const Record& r, std::uint64_t payloadAt) {
  const MessageKey key = r.key();
  switch (static_cast<RecordType>(r.type)) {
    case RecordType::kEager: {
      checkActive(r);
      if (Request* request = takePosted(key)) {
        verify(*request, r);
        if (r.length > 0) ringCopyOut(inData_, inBytes_, payloadAt, request->data, r.length);
        returnCredit(charge(r.length));
        complete(*request);
        return;
      }
      Unexpected u;
      u.record = r;
      if (r.length > 0) {
        u.payload = takeBuffer(r.length);
        ringCopyOut(inData_, inBytes_, payloadAt, u.payload.bytes.get(), r.length);
      }
      unexpected_[key].push_back(std::move(u));
      return;
    }
    case RecordType::kRts: {
      checkActive(r);
      if (Request* request = takePosted(key)) {
        verify(*request, r);
        startPull(*request, r);
        return;
      }
      Unexpected u;
      u.record = r;
      unexpected_[key].push_back(std::move(u));
      return;
    }
    case RecordType::kReady: {
      auto it = sends_.find(r.xfer);
      if (it == sends_.end()) protocolError("READY for unknown transfer " + std::to_string(r.xfer));
      Request& request = *it->second;
      verify(request, r);
      data_.push_back(Stream{&request, r.reply, 0});
      return;
    }
    case RecordType::kData: {
      auto it = recvs_.find(r.xfer);
      if (it == recvs_.end()) protocolError("DATA for unknown transfer " + std::to_string(r.xfer));
      Request& request = *it->second;
      if (r.offset != request.progress || r.length > request.length - r.offset) {
        protocolError("DATA [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) +
                      ") out of order in a " + std::to_string(request.length) + "-byte message");
      }
      ringCopyOut(inData_, inBytes_, payloadAt, static_cast<std::uint8_t*>(request.data) + r.offset,
                  r.length);
      request.progress += r.length;
      if (request.progress == request.length) {
        recvs_.erase(it);
        complete(request);
      }
      return;
    }
    case RecordType::kDone: {
      auto it = sends_.find(r.xfer);
      if (it == sends_.end()) protocolError("DONE for unknown transfer " + std::to_string(r.xfer));
      Request& request = *it->second;
      sends_.erase(it);
      complete(request);
      return;
    }
  }
  protocolError("unknown record type " + std::to_string(r.type));
}

// ---- single copy --------------------------------------------------------------------------

bool ShmPair::pumpPulls(std::uint64_t& budget) {
  bool moved = false;
  while (!pulls_.empty() && budget > 0 && !dead_) {
    Pull& p = pulls_.front();
    Request& request = *p.request;
    const std::uint64_t n =
        std::min({request.length - request.progress, options_.pullChunkBytes, budget});
    // The peer's buffer is valid while its send is in flight, and a peer that fails or
    // closes waits for `pulling` to drop to zero before it lets go of its buffers.
    auto pulling = atomic(peerHeader_->pulling);
    pulling.fetch_add(1, std::memory_order_seq_cst);
    const auto state = atomic(peerHeader_->state).load(std::memory_order_seq_cst);
    if (state != static_cast<std::uint32_t>(State::kOpen)) {
      pulling.fetch_sub(1, std::memory_order_release);
      checkPeerState(state);
      peerGone("rank " + std::to_string(peer()) + " closed its context during a transfer");
    }
    int err = 0;
    bool ok =
        readProcessMemory(peer_.pid, peer_.samePid, p.address + request.progress,
                          static_cast<std::uint8_t*>(request.data) + request.progress, n, err);
    pulling.fetch_sub(1, std::memory_order_release);
    if (!ok) {
      if (request.progress == 0 && (err == EPERM || err == ENOSYS || err == EACCES)) {
        // Not permitted after all (the probe passed): send through the ring from now on.
        COLLX_WARN(kShm,
                   "rank {}: reading rank {}'s memory failed ({}): copying through the ring "
                   "from now on",
                   link_.rank, peer(), std::strerror(err));
        peer_.cma = false;
        std::deque<Pull> waiting;
        waiting.swap(pulls_);
        for (const Pull& w : waiting) {
          Record rts;
          rts.xfer = w.xfer;
          askForData(*w.request, rts);
        }
        flush();
        return true;
      }
      const auto now = atomic(peerHeader_->state).load(std::memory_order_acquire);
      if (now != static_cast<std::uint32_t>(State::kOpen)) checkPeerState(now);
      if (err == ESRCH) {
        peerGone("rank " + std::to_string(peer()) + " (" + describe() +
                 ") exited during a transfer: rank " + std::to_string(peer()) +
                 " died or was killed");
      }
      peerGone("reading rank " + std::to_string(peer()) + "'s buffer (" + describe() +
               ") failed: " + std::strerror(err));
    }
    request.progress += n;
    budget -= n;
    moved = true;
    if (request.progress == request.length) {
      Record done;
      done.type = static_cast<std::uint8_t>(RecordType::kDone);
      done.xfer = p.xfer;
      pulls_.pop_front();
      queueControl(done);
      complete(request);
    }
  }
  if (moved && !control_.empty()) flush();
  return moved;
}

// ---- progress, failure, closing -----------------------------------------------------------

bool ShmPair::progress(std::uint64_t& budget) {
  if (dead_) return false;
  // The state first: a peer that closed wrote everything before it said so.
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  bool moved = receive(budget);
  if (!pulls_.empty()) moved |= pumpPulls(budget);
  if (!control_.empty() || !data_.empty()) moved |= flush();
  if (state != static_cast<std::uint32_t>(State::kOpen) && !peerClosed_) {
    checkPeerState(state);
    moved = true;
  }
  return moved;
}

bool ShmPair::wouldWake() {
  if (dead_) return false;
  if (atomic(in_->tail).load(std::memory_order_acquire) != inHead_) return true;
  if (!pulls_.empty()) return true;
  if ((!control_.empty() || !data_.empty())) {
    if (!blocked_) return true;
    if (atomic(out_->head).load(std::memory_order_acquire) != outHeadSeen_) return true;
  }
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  return state != static_cast<std::uint32_t>(State::kOpen) && !peerClosed_;
}

void ShmPair::checkPeerState(std::uint32_t state) {
  if (state == static_cast<std::uint32_t>(State::kFailed)) raisePeerFailure();
  if (state == static_cast<std::uint32_t>(State::kClosed)) {
    peerClosed_ = true;
    if (!live_.empty()) {
      peerGone("rank " + std::to_string(peer()) + " closed its context while this rank still " +
               "had " + std::to_string(live_.size()) + " message(s) in flight with it");
    }
  }
}

void ShmPair::raisePeerFailure() {
  // The peer failed: raise its error here, naming the rank it names.
  const ArenaHeader& h = *peerHeader_;
  const std::uint32_t length = std::min<std::uint32_t>(h.errorLength, kErrorTextBytes);
  std::string text(h.errorText, length);
  auto kind = static_cast<ErrorKind>(h.errorKind);
  int culprit = h.culprit;
  if (culprit < 0 || culprit == link_.rank) culprit = peer();
  if (culprit != peer()) text = "rank " + std::to_string(peer()) + " failed: " + text;
  throwError(kind, Where{link_.rank, "shm", culprit}, text);
}

void ShmPair::peerExited() {
  if (dead_ || exited_) return;
  const auto state = atomic(peerHeader_->state).load(std::memory_order_acquire);
  std::uint64_t budget = ~std::uint64_t{0};
  receive(budget);  // what it wrote before it went
  if (state == static_cast<std::uint32_t>(State::kOpen)) {
    peerGone("rank " + std::to_string(peer()) + " (" + describe() +
             ") exited without closing its context: rank " + std::to_string(peer()) +
             " died or was killed");
  }
  checkPeerState(state);
  exited_ = true;
}

void ShmPair::failAll(const Error& error) noexcept {
  if (dead_) return;
  dead_ = true;
  std::vector<Request*> pending(live_.begin(), live_.end());
  live_.clear();
  posted_.clear();
  unexpected_.clear();
  sends_.clear();
  recvs_.clear();
  control_.clear();
  data_.clear();
  pulls_.clear();
  for (Request* request : pending) request->onComplete(&error);
}

}  // namespace collx::transport::shm
