#include "protocol_pair.h"

#include <algorithm>
#include <cstring>

#include "collx/base/copy.h"
#include "collx/base/units.h"

namespace collx::transport {

namespace {

constexpr std::uint32_t kIndexBits = ProtocolPair::kTransferIndexBits;
constexpr std::uint32_t kIndexMask = (1u << kIndexBits) - 1;
// An ERROR frame's text is bounded: anything longer is a corrupt stream.
constexpr std::uint64_t kMaxErrorText = 64 * kKiB;

}  // namespace

struct ProtocolPair::Unexpected {
  Frame frame;
  Buffer payload;                 // an EAGER message's bytes
  bool arrived = false;           // the payload is complete (an RTS or READY: at once)
  Transfer* claimedBy = nullptr;  // a receive posted while the payload was arriving
  Unexpected* next = nullptr;
};

ProtocolPair::ProtocolPair(int peer, LinkState& link, const Limits& limits)
    : Pair(peer),
      link_(link),
      limits_(limits),
      posted_(&pool_),
      awaitingReady_(&pool_),
      unexpected_(&pool_),
      readies_(&pool_),
      rtsOwed_(&pool_),
      credits_(limits.creditWindow),
      peerCredit_(limits.creditWindow) {}

ProtocolPair::~ProtocolPair() = default;

// ---- queues by key ------------------------------------------------------------------------

template <typename T>
void ProtocolPair::pushBack(Queue<T>& queue, T& item) {
  item.next = nullptr;
  if (queue.tail != nullptr) {
    queue.tail->next = &item;
  } else {
    queue.head = &item;
  }
  queue.tail = &item;
}

template <typename T, typename Map>
T* ProtocolPair::front(Map& map, const MessageKey& key) {
  if (map.empty()) return nullptr;  // the common case: a hash saved
  auto it = map.find(key);
  return it == map.end() ? nullptr : it->second.head;
}

template <typename T, typename Map>
T* ProtocolPair::popFront(Map& map, const MessageKey& key) {
  if (map.empty()) return nullptr;
  auto it = map.find(key);
  if (it == map.end()) return nullptr;
  T* item = it->second.head;
  it->second.head = item->next;
  if (it->second.head == nullptr) map.erase(it);
  item->next = nullptr;
  return item;
}

template <typename T, typename Map>
void ProtocolPair::unlink(Map& map, const MessageKey& key, T& item) {
  auto it = map.find(key);
  if (it == map.end()) return;
  T* prev = nullptr;
  for (T* at = it->second.head; at != nullptr; prev = at, at = at->next) {
    if (at != &item) continue;
    (prev != nullptr ? prev->next : it->second.head) = item.next;
    if (it->second.tail == &item) it->second.tail = prev;
    if (it->second.head == nullptr) map.erase(it);
    item.next = nullptr;
    return;
  }
}

// ---- transfers ----------------------------------------------------------------------------

Transfer& ProtocolPair::allocate(Request& request) {
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(transfers_.size());
    if (index >= kIndexMask) protocolError("more than 16 million messages in flight");
    transfers_.push_back(std::make_unique<Transfer>());
  }
  Transfer& t = *transfers_[index];
  const std::uint8_t generation = static_cast<std::uint8_t>(t.generation + 1);
  t = Transfer{};
  t.generation = generation;
  t.request = &request;
  t.id = (index + 1) | (std::uint32_t{generation} << kIndexBits);
  ++live_;
  return t;
}

void ProtocolPair::release(Transfer& t) noexcept {
  const std::uint32_t index = (t.id & kIndexMask) - 1;
  t.request = nullptr;
  t.id = 0;
  --live_;
  free_.push_back(index);
}

Transfer* ProtocolPair::find(std::uint32_t id, Request::Kind kind) {
  const std::uint32_t index = (id & kIndexMask) - 1;
  if (index >= transfers_.size()) return nullptr;
  Transfer& t = *transfers_[index];
  if (t.id != id || t.request == nullptr || t.request->kind != kind) return nullptr;
  return &t;
}

void ProtocolPair::complete(Transfer& t) {
  Request* request = t.request;
  release(t);
  request->onComplete(nullptr);
}

void ProtocolPair::sent(Transfer& t) { complete(t); }

// ---- posting ------------------------------------------------------------------------------

void ProtocolPair::post(Request& request) {
  if (dead_) protocolError("the connection already failed");
  const MessageKey& key = request.key;
  if (request.kind == Request::Kind::kSend) {
    if (closing_) peerGone(rankName() + " has closed its context");
    Transfer& t = allocate(request);
    if (request.length <= limits_.eagerLimit && credits_ >= charge(request.length)) {
      // A READY for this key asks for more than the eager limit: not this message.
      if (Unexpected* ready = front<Unexpected>(readies_, key)) verify(t, ready->frame);
      credits_ -= charge(request.length);
      Frame eager;
      eager.type = FrameType::kEager;
      eager.setMessage(key, request.fingerprint);
      eager.length = request.length;
      sendFrame(eager, static_cast<const std::uint8_t*>(request.data), &t);
    } else {
      Frame rts;
      rts.type = FrameType::kRts;
      rts.setMessage(key, request.fingerprint);
      rts.length = request.length;
      rts.xfer = t.id;
      describeSend(t, rts);
      sendFrame(rts, nullptr, nullptr);
      if (Unexpected* ready = popFront<Unexpected>(readies_, key)) {
        // The receiver was ready first.
        const Frame announced = ready->frame;
        spareUnexpected_.push_back(ready);
        verify(t, announced);
        push(t, announced);
      } else {
        pushBack(awaitingReady_[key], t);
      }
    }
    flushOut();  // the calling thread writes at once: latency is one trip, not a hand-off
    return;
  }

  // A receive: its message may have arrived already.
  if (!unexpected_.empty()) {
    auto found = unexpected_.find(key);
    if (found != unexpected_.end()) {
      Unexpected* u = found->second.head;
      while (u != nullptr && u->claimedBy != nullptr) u = u->next;
      // After the peer's goodbye, only what arrived whole can still be received.
      if (u != nullptr && closing_ && !(u->frame.type == FrameType::kEager && u->arrived)) {
        u = nullptr;
      }
      if (u != nullptr) {
        Transfer& t = allocate(request);
        verify(t, u->frame);
        if (u->frame.type == FrameType::kEager) {
          if (!u->arrived) {
            u->claimedBy = &t;  // completed when its last byte arrives
            return;
          }
          if (request.length > 0) copyBytes(request.data, u->payload.bytes.get(), request.length);
          creditsToReturn_ += charge(request.length);
          dropUnexpected(key, *u);
          complete(t);
          return;
        }
        const Frame rts = u->frame;  // an RTS: the sender waits for us
        dropUnexpected(key, *u);
        t.sawRts = true;
        accept(t, rts);
        flushOut();
        return;
      }
    }
  }
  if (closing_) peerGone(rankName() + " has closed its context");
  Transfer& t = allocate(request);
  pushBack(posted_[key], t);
  if (request.length > limits_.eagerLimit && !pulls()) {
    sendReady(t);  // receiver-ready: the data need not wait for the RTS
    flushOut();
  }
}

void ProtocolPair::accept(Transfer& t, const Frame& rts) {
  t.peerId = rts.xfer;
  t.address = rts.address;
  if (t.length() == 0) {
    sendDone(t.peerId);
    complete(t);
  } else if (pulls()) {
    pull(t);
  } else {
    sendReady(t);
  }
}

void ProtocolPair::sendReady(Transfer& t) {
  t.readySent = true;
  Frame ready;
  ready.type = FrameType::kReady;
  ready.setMessage(t.request->key, t.request->fingerprint);
  ready.length = t.length();
  ready.xfer = t.id;
  describeRecv(t, ready);
  sendFrame(ready, nullptr, nullptr);
}

void ProtocolPair::sendDone(std::uint32_t senderId) {
  Frame done;
  done.type = FrameType::kDone;
  done.xfer = senderId;
  sendFrame(done, nullptr, nullptr);
}

void ProtocolPair::pulled(Transfer& t) {
  sendDone(t.peerId);
  complete(t);
}

void ProtocolPair::pullRefused(Transfer& t) { sendReady(t); }

// ---- arrivals -----------------------------------------------------------------------------

ProtocolPair::Unexpected& ProtocolPair::newUnexpected(const Frame& frame) {
  Unexpected* u;
  if (!spareUnexpected_.empty()) {
    u = spareUnexpected_.back();
    spareUnexpected_.pop_back();
  } else {
    // RTS and READY take no credit: a peer that floods them is stopped here.
    if (unexpectedStore_.size() >= kMaxUnexpected) {
      protocolError("more than " + std::to_string(kMaxUnexpected) +
                    " messages came before their receive or send");
    }
    u = unexpectedStore_.emplace_back(std::make_unique<Unexpected>()).get();
  }
  u->frame = frame;
  u->payload = Buffer{};
  u->arrived = false;
  u->claimedBy = nullptr;
  u->next = nullptr;
  return *u;
}

void ProtocolPair::dropUnexpected(const MessageKey& key, Unexpected& u) {
  unlink(unexpected_, key, u);
  giveBuffer(std::move(u.payload));
  spareUnexpected_.push_back(&u);
}

ProtocolPair::Sink ProtocolPair::frameArrived(const Frame& f) {
  ++arrivals_;
  if (f.magic != kFrameMagic) {
    protocolError("a frame without the frame magic (the stream is corrupt)");
  }
  if (f.epoch != link_.epoch) [[unlikely]] {
    // Sent before the survivors went on in a new generation (or by a rank that has not yet
    // left the old one): read and dropped, credit and all.
    ++stale_;
    Sink sink;
    sink.frame = f;
    sink.stale = true;
    sink.length = f.carriesPayload() ? f.length : 0;
    if (sink.length > std::max({limits_.eagerLimit, kMostDataPiece, kMaxErrorText})) {
      protocolError("a frame of generation " + std::to_string(f.epoch) + " (mod 256) with " +
                    std::to_string(sink.length) + " bytes, more than any frame carries");
    }
    return sink;
  }
  // Credit comes back for eager bytes this rank sent, never beyond the window it started with.
  if (f.credit > limits_.creditWindow - credits_) {
    protocolError("a frame returning " + std::to_string(f.credit) + " bytes of eager credit, " +
                  "more than the " + std::to_string(limits_.creditWindow - credits_) +
                  " bytes sent");
  }
  credits_ += f.credit;
  if (f.space > static_cast<std::uint8_t>(Space::kPointToPoint)) {
    protocolError("a frame of unknown message space " + std::to_string(f.space));
  }
  Sink sink;
  sink.frame = f;
  const MessageKey key = f.key();
  switch (f.type) {
    case FrameType::kEager: {
      checkActive(f);
      // The peer sends eagerly what the limit and the credit this rank gave it allow; beyond,
      // this rank would hold bytes it never agreed to (an unexpected EAGER is buffered).
      if (f.length > limits_.eagerLimit || charge(f.length) > peerCredit_) {
        protocolError("an EAGER message of " + std::to_string(f.length) +
                      " bytes, beyond the eager limit of " + std::to_string(limits_.eagerLimit) +
                      " bytes or the " + std::to_string(peerCredit_) +
                      " bytes of credit this rank gave");
      }
      peerCredit_ -= charge(f.length);
      sink.length = f.length;
      if (Transfer* t = front<Transfer>(posted_, key)) {
        if (t->readySent) {
          verify(*t, f);
          protocolError("an EAGER message of " + std::to_string(f.length) +
                        " bytes for a receive that asked for DATA (the ranks' eager limits "
                        "differ)");
        }
        popFront<Transfer>(posted_, key);
        verify(*t, f);
        sink.transfer = t;
        sink.dst = t->bytes();
        return sink;
      }
      Unexpected& u = newUnexpected(f);
      if (f.length > 0) u.payload = takeBuffer(f.length);
      pushBack(unexpected_[key], u);
      sink.unexpected = &u;
      sink.dst = u.payload.bytes.get();
      return sink;
    }
    case FrameType::kRts: {
      checkActive(f);
      // A receive whose pushed bytes all landed before this RTS (DATA may overtake its
      // announcement on another stream) was older than anything still posted.
      if (!rtsOwed_.empty()) {
        auto owed = rtsOwed_.find(key);
        if (owed != rtsOwed_.end()) {
          if (--owed->second == 0) rtsOwed_.erase(owed);
          return sink;
        }
      }
      if (Transfer* t = popFront<Transfer>(posted_, key)) {
        verify(*t, f);
        t->sawRts = true;
        if (!t->readySent) accept(*t, f);  // else: the bytes are on their way already
        return sink;
      }
      Unexpected& u = newUnexpected(f);
      u.arrived = true;
      pushBack(unexpected_[key], u);
      return sink;
    }
    case FrameType::kReady: {
      if (Transfer* t = popFront<Transfer>(awaitingReady_, key)) {
        verify(*t, f);
        push(*t, f);
        return sink;
      }
      checkActive(f);
      Unexpected& u = newUnexpected(f);
      u.arrived = true;
      pushBack(readies_[key], u);
      return sink;
    }
    case FrameType::kData: {
      Transfer* t = find(f.xfer, Request::Kind::kRecv);
      if (t == nullptr || !t->readySent) {
        protocolError("DATA for unknown transfer " + std::to_string(f.xfer));
      }
      if (f.offset > t->length() || f.length > t->length() - f.offset) {
        protocolError("DATA [" + std::to_string(f.offset) + ", +" + std::to_string(f.length) +
                      ") outside a " + std::to_string(t->length()) + "-byte message");
      }
      sink.transfer = t;
      sink.dst = t->bytes() + f.offset;
      sink.length = f.length;
      return sink;
    }
    case FrameType::kDone: {
      Transfer* t = find(f.xfer, Request::Kind::kSend);
      if (t == nullptr) protocolError("DONE for unknown transfer " + std::to_string(f.xfer));
      unlink(awaitingReady_, t->request->key, *t);
      complete(*t);
      return sink;
    }
    case FrameType::kCredit:
      return sink;
    case FrameType::kError:
      if (f.length > kMaxErrorText) {
        protocolError("an ERROR frame of " + std::to_string(f.length) + " bytes");
      }
      errorText_.resize(f.length);
      sink.dst = errorText_.data();
      sink.length = f.length;
      return sink;
    case FrameType::kGoodbye:
      peerClosing();
      return sink;
  }
  protocolError("unknown frame type " + std::to_string(static_cast<int>(f.type)));
}

void ProtocolPair::payloadArrived(Sink& sink) {
  if (sink.stale) return;
  switch (sink.frame.type) {
    case FrameType::kEager:
      if (sink.transfer != nullptr) {
        creditsToReturn_ += charge(sink.frame.length);
        complete(*sink.transfer);
        return;
      }
      sink.unexpected->arrived = true;
      if (Transfer* t = sink.unexpected->claimedBy) {
        Unexpected& u = *sink.unexpected;
        if (t->length() > 0) copyBytes(t->bytes(), u.payload.bytes.get(), t->length());
        creditsToReturn_ += charge(t->length());
        dropUnexpected(t->request->key, u);
        complete(*t);
      }
      return;
    case FrameType::kData:
      dataLanded(sink.frame.xfer, sink.length);
      return;
    case FrameType::kError: {
      std::string text(errorText_.begin(), errorText_.end());
      ErrorKind kind = ErrorKind::kIo;
      if (!text.empty()) {
        kind = errorKindFrom(static_cast<std::uint8_t>(text[0]));
        text.erase(0, 1);
      }
      raisePeerError(kind, std::move(text), sink.frame.root);
    }
    default:
      return;
  }
}

void ProtocolPair::dataLanded(std::uint32_t xfer, std::uint64_t bytes) {
  ++arrivals_;
  Transfer* t = find(xfer, Request::Kind::kRecv);
  if (t == nullptr || !t->readySent || bytes > t->length() - t->done) {
    protocolError(std::to_string(bytes) + " bytes landed for unknown transfer " +
                  std::to_string(xfer));
  }
  t->done += bytes;
  if (t->done < t->length()) return;
  if (!t->sawRts) {
    // Its RTS is still on the way: that one is consumed when it comes.
    unlink(posted_, t->request->key, *t);
    ++rtsOwed_[t->request->key];
  }
  complete(*t);
}

// ---- credit -------------------------------------------------------------------------------

std::uint32_t ProtocolPair::takeCredit() noexcept {
  const auto credit =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(creditsToReturn_, 0xFFFFFFFFu));
  creditsToReturn_ -= credit;
  peerCredit_ += credit;
  return credit;
}

void ProtocolPair::returnCredit() {
  if (dead_ || creditsToReturn_ < limits_.creditWindow / 2 || outputQueued()) return;
  Frame credit;
  credit.type = FrameType::kCredit;
  sendFrame(credit, nullptr, nullptr);
}

ProtocolPair::Buffer ProtocolPair::takeBuffer(std::uint64_t bytes) {
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

void ProtocolPair::giveBuffer(Buffer buffer) {
  if (buffer.bytes == nullptr || spareBytes_ + buffer.capacity > limits_.creditWindow) return;
  spareBytes_ += buffer.capacity;
  spare_.push_back(std::move(buffer));
}

// ---- checks -------------------------------------------------------------------------------

void ProtocolPair::checkActive(const Frame& f) {
  if (f.space != static_cast<std::uint8_t>(Space::kCollective)) return;
  const Fingerprint* expected = link_.findActive(f.seq);
  if (expected == nullptr || *expected == f.fingerprint()) return;
  mismatch("rank " + std::to_string(link_.rank) + " expected " +
           link_.describe(f.key(), *expected) + " from " + rankName() + ", got " +
           link_.describe(f.key(), f.fingerprint()));
}

void ProtocolPair::verify(const Transfer& t, const Frame& f) {
  const Request& request = *t.request;
  if (request.fingerprint == f.fingerprint() && request.length == f.length) return;
  std::string mine = link_.describe(request.key, request.fingerprint) + " (" +
                     std::to_string(request.length) + " bytes)";
  std::string theirs =
      link_.describe(f.key(), f.fingerprint()) + " (" + std::to_string(f.length) + " bytes)";
  if (request.kind == Request::Kind::kRecv) {
    mismatch("rank " + std::to_string(link_.rank) + " expected " + mine + " from " + rankName() +
             ", got " + theirs);
  }
  mismatch("rank " + std::to_string(link_.rank) + " sends " + mine + " to " + rankName() +
           ", which expects " + theirs);
}

void ProtocolPair::mismatch(const std::string& text) {
  // The mesh tells every peer (this one too) when it fails with this error.
  throw MismatchError(where(), text);
}

void ProtocolPair::peerGone(const std::string& why) { throw IoError(where(), why); }

void ProtocolPair::protocolError(const std::string& why) {
  throw IoError(where(), "protocol error on the connection to " + rankName() + " (" + describe() +
                             "): " + why);
}

void ProtocolPair::raisePeerError(ErrorKind kind, std::string text, int culprit) {
  if (culprit < 0 || culprit == link_.rank) culprit = peer();
  // (A revoke names who revoked, whoever passed it on.)
  if (culprit != peer() && kind != ErrorKind::kRevoked) text = rankName() + " failed: " + text;
  throwError(kind, Where{link_.rank, medium(), culprit}, text);
}

// ---- closing and failure ------------------------------------------------------------------

void ProtocolPair::peerClosed() {
  closing_ = true;
  closed_ = true;
  if (live_ > 0) {
    peerGone(rankName() + " closed its context while this rank still had " + std::to_string(live_) +
             " message(s) in flight with it");
  }
}

void ProtocolPair::reset() {
  if (!dead_) failAll(Aborted(where(), "the pair is reset"));
  // Every transfer is free again; their ids' generations go on (a late frame naming an old id
  // is of the old epoch, dropped before any lookup).
  free_.clear();
  for (std::size_t i = transfers_.size(); i-- > 0;) free_.push_back(static_cast<std::uint32_t>(i));
  live_ = 0;
  credits_ = limits_.creditWindow;
  creditsToReturn_ = 0;
  peerCredit_ = limits_.creditWindow;
  resetMedium();
  dead_ = false;
}

void ProtocolPair::failAll(const Error& error) noexcept {
  if (dead_) return;
  dead_ = true;
  dropQueued();
  std::vector<Request*> pending;
  for (auto& t : transfers_) {
    if (t->request != nullptr) {
      pending.push_back(t->request);
      t->request = nullptr;
      t->id = 0;
    }
  }
  live_ = 0;
  free_.clear();
  posted_.clear();
  awaitingReady_.clear();
  readies_.clear();
  rtsOwed_.clear();
  unexpected_.clear();
  spareUnexpected_.clear();
  for (auto& u : unexpectedStore_) spareUnexpected_.push_back(u.get());
  for (Request* request : pending) request->onComplete(&error);
}

}  // namespace collx::transport
