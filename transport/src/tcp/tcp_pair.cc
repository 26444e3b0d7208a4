#include "tcp_pair.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "collx/base/copy.h"
#include "collx/base/log.h"

namespace collx::transport::tcp {

namespace {

constexpr std::size_t kStagingBytes = 64 * 1024;
// Payloads at least this large are read straight into their destination, not via staging.
constexpr std::uint64_t kDirectReadBytes = 16 * 1024;
constexpr int kMaxIov = 64;
// Bytes one progress() reads from one stream before giving the other pairs a turn.
constexpr std::uint64_t kReadBudget = 32u << 20;

}  // namespace

int TcpPair::unsent(OutFrame& f, iovec* iov) {
  int n = 0;
  std::uint64_t skip = f.sent;
  if (skip < sizeof(FrameHeader)) {
    iov[n++] = {reinterpret_cast<std::uint8_t*>(&f.header) + skip, sizeof(FrameHeader) - skip};
    skip = 0;
  } else {
    skip -= sizeof(FrameHeader);
  }
  if (f.payloadLength > skip) {
    iov[n++] = {const_cast<std::uint8_t*>(f.payload) + skip, f.payloadLength - skip};
  }
  return n;
}

TcpPair::TcpPair(int peer, LinkState& link, std::vector<int> fds, const TcpPairOptions& options,
                 std::string address)
    : Pair(peer),
      link_(link),
      options_(options),
      address_(std::move(address)),
      credits_(options.creditWindow) {
  for (int fd : fds) {
    Stream stream;
    stream.fd = fd;
    stream.rx.staging = std::make_unique<std::uint8_t[]>(kStagingBytes);
    streams_.push_back(std::move(stream));
  }
}

TcpPair::~TcpPair() {
  for (Stream& s : streams_) {
    if (s.fd >= 0) ::close(s.fd);
  }
}

// ---- posting ------------------------------------------------------------------------------

void TcpPair::post(Request& request) {
  if (dead_) protocolError("the connection already failed");
  if (peerClosing_ && !(request.kind == Request::Kind::kRecv && arrivedEager(request.key))) {
    // What the peer sent before its goodbye is still delivered (a gather's root may post
    // its receive after the other ranks have sent their blocks and left); nothing else can
    // complete any more.
    peerGone("rank " + std::to_string(peer()) + " has closed its context");
  }
  request.progress = 0;
  request.pending = 0;
  request.xfer = 0;
  request.sawAnnouncement = false;
  live_.insert(&request);
  Stream& control = streams_[0];
  if (request.kind == Request::Kind::kSend) {
    if (request.length <= options_.eagerLimit && credits_ >= charge(request.length)) {
      credits_ -= charge(request.length);
      FrameHeader h;
      h.type = static_cast<std::uint8_t>(FrameType::kEager);
      h.setMessage(request.key, request.fingerprint);
      h.length = request.length;
      OutFrame frame;
      frame.header = h;
      frame.payload = static_cast<const std::uint8_t*>(request.data);
      frame.payloadLength = request.length;
      frame.request = &request;
      request.pending = 1;
      control.control.push_back(std::move(frame));
    } else {
      auto ready = readies_.find(request.key);
      if (ready != readies_.end() && !ready->second.empty()) {
        FrameHeader announced = ready->second.front();
        ready->second.pop_front();
        if (ready->second.empty()) readies_.erase(ready);
        verify(request, announced);
        queueData(request, announced.xfer);
      } else {
        sendsAwaitingReady_[request.key].push_back(&request);
      }
      FrameHeader rts;
      rts.type = static_cast<std::uint8_t>(FrameType::kRts);
      rts.setMessage(request.key, request.fingerprint);
      rts.length = request.length;
      queueControl(rts);
    }
    flush(control);  // the calling thread writes at once: latency is one trip, not a hand-off
    return;
  }

  // A receive: something may have arrived for it already.
  auto found = unexpected_.find(request.key);
  if (found != unexpected_.end()) {
    auto& queue = found->second;
    auto it = std::find_if(queue.begin(), queue.end(),
                           [](const auto& u) { return u->claimedBy == nullptr; });
    if (it != queue.end()) {
      Unexpected& u = **it;
      verify(request, u.header);
      if (u.header.type == static_cast<std::uint8_t>(FrameType::kEager)) {
        if (!u.arrived) {
          u.claimedBy = &request;  // completed when its last byte arrives
          return;
        }
        if (request.length > 0) std::memcpy(request.data, u.payload.data(), request.length);
        creditsToReturn_ += charge(request.length);
        queue.erase(it);
        if (queue.empty()) unexpected_.erase(found);
        complete(request);
        return;
      }
      // An RTS: the sender waits for our READY.
      queue.erase(it);
      if (queue.empty()) unexpected_.erase(found);
      request.sawAnnouncement = true;
      sendReady(request);
      flush(control);
      return;
    }
  }
  if (request.length > options_.eagerLimit) {
    largeByKey_[request.key].push_back(&request);
    sendReady(request);  // receiver-ready: no need to wait for the RTS
    flush(control);
  } else {
    smallRecvs_[request.key].push_back(&request);
  }
}

bool TcpPair::arrivedEager(const MessageKey& key) const {
  auto found = unexpected_.find(key);
  if (found == unexpected_.end()) return false;
  for (const auto& u : found->second) {
    if (u->claimedBy == nullptr) {
      return u->header.type == static_cast<std::uint8_t>(FrameType::kEager) && u->arrived;
    }
  }
  return false;
}

void TcpPair::sendReady(Request& request) {
  request.xfer = nextXfer_++;
  if (nextXfer_ == 0) nextXfer_ = 1;
  largeRecvs_[request.xfer] = &request;
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(FrameType::kReady);
  h.setMessage(request.key, request.fingerprint);
  h.length = request.length;
  h.xfer = request.xfer;
  queueControl(h);
}

void TcpPair::queueControl(FrameHeader header, Request* request,
                           std::shared_ptr<std::vector<std::uint8_t>> owned) {
  OutFrame frame;
  frame.header = header;
  frame.request = request;
  if (owned) {
    frame.payload = owned->data();
    frame.payloadLength = owned->size();
    frame.header.length = owned->size();
    frame.owned = std::move(owned);
  }
  streams_[0].control.push_back(std::move(frame));
}

void TcpPair::queueData(Request& request, std::uint32_t xfer) {
  const std::uint64_t frameBytes = std::max<std::uint64_t>(options_.dataFrameBytes, 4096);
  std::uint64_t frames = request.length == 0 ? 1 : (request.length + frameBytes - 1) / frameBytes;
  request.pending = static_cast<std::uint32_t>(frames);
  const auto* base = static_cast<const std::uint8_t*>(request.data);
  for (std::uint64_t i = 0; i < frames; ++i) {
    std::uint64_t offset = i * frameBytes;
    std::uint64_t length = std::min(frameBytes, request.length - offset);
    OutFrame frame;
    frame.header.type = static_cast<std::uint8_t>(FrameType::kData);
    frame.header.setMessage(request.key, request.fingerprint);
    frame.header.length = length;
    frame.header.offset = offset;
    frame.header.xfer = xfer;
    frame.payload = base + offset;
    frame.payloadLength = length;
    frame.request = &request;
    Stream& s = streams_[nextDataStream_];
    nextDataStream_ = (nextDataStream_ + 1) % streams_.size();
    s.data.push_back(std::move(frame));
  }
}

void TcpPair::complete(Request& request) {
  live_.erase(&request);
  request.onComplete(nullptr);
}

// ---- checks -------------------------------------------------------------------------------

void TcpPair::checkActive(const FrameHeader& h) {
  if (h.space != static_cast<std::uint8_t>(Space::kCollective)) return;
  const Fingerprint* expected = link_.findActive(h.seq);
  if (expected == nullptr || *expected == h.fingerprint()) return;
  mismatch("rank " + std::to_string(link_.rank) + " expected " +
           link_.describe(h.key(), *expected) + " from rank " + std::to_string(peer()) + ", got " +
           link_.describe(h.key(), h.fingerprint()));
}

void TcpPair::verify(const Request& request, const FrameHeader& h) {
  if (request.fingerprint == h.fingerprint() && request.length == h.length) return;
  const bool receiving = request.kind == Request::Kind::kRecv;
  std::string mine = link_.describe(request.key, request.fingerprint) + " (" +
                     std::to_string(request.length) + " bytes)";
  std::string theirs =
      link_.describe(h.key(), h.fingerprint()) + " (" + std::to_string(h.length) + " bytes)";
  if (receiving) {
    mismatch("rank " + std::to_string(link_.rank) + " expected " + mine + " from rank " +
             std::to_string(peer()) + ", got " + theirs);
  }
  mismatch("rank " + std::to_string(link_.rank) + " sends " + mine + " to rank " +
           std::to_string(peer()) + ", which expects " + theirs);
}

void TcpPair::mismatch(const std::string& text) {
  // The mesh tells every peer (this one too) when it fails with this error.
  throw MismatchError(where(), text);
}

void TcpPair::peerGone(const std::string& why) { throw IoError(where(), why); }

void TcpPair::protocolError(const std::string& why) {
  throw IoError(where(), "protocol error on the connection to rank " + std::to_string(peer()) +
                             " (" + describe() + "): " + why);
}

// ---- progress -----------------------------------------------------------------------------

std::size_t TcpPair::addPollFds(std::vector<pollfd>& fds) const {
  for (const Stream& s : streams_) {
    short events = s.open ? POLLIN : 0;
    if (s.writeBlocked && s.hasOutput()) events |= POLLOUT;
    fds.push_back(pollfd{s.open || s.hasOutput() ? s.fd : -1, events, 0});
  }
  return streams_.size();
}

bool TcpPair::progress(const pollfd* results, std::size_t count) {
  if (dead_) return false;
  bool moved = false;
  for (std::size_t i = 0; i < streams_.size() && i < count; ++i) {
    Stream& s = streams_[i];
    short revents = results[i].revents;
    if (s.open && (revents & (POLLIN | POLLHUP | POLLERR))) moved |= receive(s);
    if (s.rx.begin < s.rx.end) {  // staged bytes left by the read budget
      consumeStaged(s);
      moved = true;
    }
  }
  // Return credit explicitly when the peer may be starving for it and nothing else carries it.
  if (creditsToReturn_ >= options_.creditWindow / 2 && !streams_[0].hasOutput()) {
    FrameHeader h;
    h.type = static_cast<std::uint8_t>(FrameType::kCredit);
    queueControl(h);
  }
  for (Stream& s : streams_) {
    if (s.hasOutput()) moved |= flush(s);
  }
  return moved;
}

bool TcpPair::flush(Stream& s) {
  bool moved = false;
  while (s.hasOutput()) {
    // Gather frames: a partly written frame first, then control, then data.
    iovec iov[kMaxIov];
    OutFrame* frames[kMaxIov];
    int laneOf[kMaxIov];
    int n = 0, nframes = 0;
    auto add = [&](OutFrame& f, int lane) {
      if (n + 2 > kMaxIov) return false;
      if (f.sent == 0 && f.header.credit == 0 && creditsToReturn_ > 0) {
        f.header.credit =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(creditsToReturn_, 0xFFFFFFFFu));
        creditsToReturn_ -= f.header.credit;
      }
      n += unsent(f, iov + n);
      frames[nframes] = &f;
      laneOf[nframes++] = lane;
      return true;
    };
    std::size_t ci = 0, di = 0;
    if (s.partialLane == 0) {
      add(s.control.front(), 0);
      ci = 1;
    } else if (s.partialLane == 1) {
      add(s.data.front(), 1);
      di = 1;
    }
    for (; ci < s.control.size() && add(s.control[ci], 0); ++ci) {
    }
    // Data only after every control frame is in: control frames overtake data.
    if (ci == s.control.size()) {
      for (; di < s.data.size() && add(s.data[di], 1); ++di) {
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    ssize_t written = ::sendmsg(s.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s.writeBlocked = true;
        return moved;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        readWhatIsLeft();  // raises the peer's own ERROR frame if it sent one
        peerGone("the connection to rank " + std::to_string(peer()) + " (" + describe() +
                 ") broke while sending: rank " + std::to_string(peer()) + " died or was killed");
      }
      int err = errno;
      peerGone("sending to rank " + std::to_string(peer()) + " (" + describe() +
               ") failed: " + std::strerror(err));
    }
    moved = true;
    s.writeBlocked = false;
    s.partialLane = -1;
    std::uint64_t left = static_cast<std::uint64_t>(written);
    for (int i = 0; i < nframes && left > 0; ++i) {
      OutFrame& f = *frames[i];
      std::uint64_t need = f.total() - f.sent;
      if (left < need) {
        f.sent += left;
        s.partialLane = laneOf[i];
        left = 0;
        break;
      }
      left -= need;
      f.sent = f.total();
    }
    // Pop the frames written in full, in lane order (they are the lanes' fronts).
    bool partial = false;
    for (int i = 0; i < nframes; ++i) {
      OutFrame& f = *frames[i];
      if (f.sent < f.total()) {
        partial = true;
        continue;
      }
      Request* request = f.request;
      std::deque<OutFrame>& lane = laneOf[i] == 0 ? s.control : s.data;
      // Frames are written in order within a lane, so a finished frame is its lane's front.
      lane.pop_front();
      if (request != nullptr && --request->pending == 0) complete(*request);
    }
    if (partial) {
      s.writeBlocked = true;  // the socket took less than offered: wait for POLLOUT
      return moved;
    }
  }
  return moved;
}

bool TcpPair::receive(Stream& s) {
  Rx& rx = s.rx;
  std::uint64_t budget = kReadBudget;
  bool moved = false;
  bool drained = false;  // a read got less than it asked for: nothing more was there
  while (budget > 0 && !dead_) {
    if (rx.begin < rx.end) {
      consumeStaged(s);
      moved = true;
      continue;
    }
    // (Not another read that would only say EAGAIN: a system call saved per message.)
    if (drained) return moved;
    ssize_t n;
    const bool direct = rx.inPayload && rx.remaining >= kDirectReadBytes && rx.dst != nullptr;
    const std::size_t asked =
        direct ? static_cast<std::size_t>(std::min<std::uint64_t>(rx.remaining, budget))
               : kStagingBytes;
    n = ::recv(s.fd, direct ? static_cast<void*>(rx.dst) : rx.staging.get(), asked, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == ECONNRESET)
        n = 0;  // handled as end of stream below
      else {
        int err = errno;
        peerGone("receiving from rank " + std::to_string(peer()) + " (" + describe() +
                 ") failed: " + std::strerror(err));
      }
    }
    if (n == 0) {
      if (peerClosing_ && live_.empty() && !rx.inPayload && rx.headerGot == 0) {
        s.open = false;  // the peer said goodbye and owes us nothing
        return moved;
      }
      if (peerClosing_) {
        peerGone("rank " + std::to_string(peer()) + " closed its context while this rank still " +
                 "had " + std::to_string(live_.size()) + " message(s) in flight with it");
      }
      peerGone("the connection to rank " + std::to_string(peer()) + " (" + describe() +
               ") was closed: rank " + std::to_string(peer()) + " died or was killed");
    }
    moved = true;
    drained = static_cast<std::size_t>(n) < asked;
    budget -= std::min<std::uint64_t>(budget, static_cast<std::uint64_t>(n));
    if (direct) {
      rx.dst += n;
      rx.remaining -= static_cast<std::uint64_t>(n);
      if (rx.remaining == 0) onPayloadDone(s);
    } else {
      rx.begin = 0;
      rx.end = static_cast<std::size_t>(n);
    }
  }
  return moved;
}

void TcpPair::consumeStaged(Stream& s) {
  Rx& rx = s.rx;
  while (rx.begin < rx.end && !dead_) {
    std::size_t avail = rx.end - rx.begin;
    const std::uint8_t* src = rx.staging.get() + rx.begin;
    if (!rx.inPayload) {
      std::size_t take = std::min(avail, sizeof(FrameHeader) - rx.headerGot);
      std::memcpy(reinterpret_cast<std::uint8_t*>(&rx.header) + rx.headerGot, src, take);
      rx.headerGot += take;
      rx.begin += take;
      if (rx.headerGot == sizeof(FrameHeader)) {
        rx.headerGot = 0;
        onHeader(s);
      }
      continue;
    }
    std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(avail, rx.remaining));
    if (rx.dst != nullptr) {
      copyBytes(rx.dst, src, take);
      rx.dst += take;
    } else {
      rx.text.insert(rx.text.end(), src, src + take);
    }
    rx.remaining -= take;
    rx.begin += take;
    if (rx.remaining == 0) onPayloadDone(s);
  }
  if (rx.begin >= rx.end) rx.begin = rx.end = 0;
}

void TcpPair::onHeader(Stream& s) {
  Rx& rx = s.rx;
  const FrameHeader& h = rx.header;
  if (h.magic != kFrameMagic) {
    protocolError("a frame header without the frame magic (the stream is corrupt)");
  }
  credits_ += h.credit;
  rx.sink = Sink::kNone;
  rx.dst = nullptr;
  rx.remaining = 0;
  rx.request = nullptr;
  rx.unexpected = nullptr;
  const MessageKey key = h.key();
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kEager: {
      checkActive(h);
      auto small = smallRecvs_.find(key);
      if (small != smallRecvs_.end() && !small->second.empty()) {
        Request* request = small->second.front();
        small->second.pop_front();
        if (small->second.empty()) smallRecvs_.erase(small);
        verify(*request, h);
        rx.sink = Sink::kEager;
        rx.request = request;
        rx.dst = static_cast<std::uint8_t*>(request->data);
      } else {
        auto large = largeByKey_.find(key);
        if (large != largeByKey_.end() && !large->second.empty()) verify(*large->second.front(), h);
        auto u = std::make_unique<Unexpected>();
        u->header = h;
        u->payload.resize(h.length);
        rx.sink = Sink::kUnexpected;
        rx.unexpected = u.get();
        rx.dst = u->payload.data();
        unexpected_[key].push_back(std::move(u));
      }
      rx.remaining = h.length;
      break;
    }
    case FrameType::kRts: {
      checkActive(h);
      auto large = largeByKey_.find(key);
      if (large != largeByKey_.end() && !large->second.empty()) {
        Request* request = large->second.front();
        large->second.pop_front();
        if (large->second.empty()) largeByKey_.erase(large);
        verify(*request, h);
        request->sawAnnouncement = true;
        break;
      }
      auto owed = rtsOwed_.find(key);
      if (owed != rtsOwed_.end()) {
        if (--owed->second == 0) rtsOwed_.erase(owed);
        break;
      }
      auto small = smallRecvs_.find(key);
      if (small != smallRecvs_.end() && !small->second.empty()) {
        Request* request = small->second.front();
        small->second.pop_front();
        if (small->second.empty()) smallRecvs_.erase(small);
        verify(*request, h);
        request->sawAnnouncement = true;
        sendReady(*request);
        break;
      }
      auto u = std::make_unique<Unexpected>();
      u->header = h;
      u->arrived = true;
      unexpected_[key].push_back(std::move(u));
      break;
    }
    case FrameType::kReady: {
      auto waiting = sendsAwaitingReady_.find(key);
      if (waiting != sendsAwaitingReady_.end() && !waiting->second.empty()) {
        Request* request = waiting->second.front();
        waiting->second.pop_front();
        if (waiting->second.empty()) sendsAwaitingReady_.erase(waiting);
        verify(*request, h);
        queueData(*request, h.xfer);
      } else {
        checkActive(h);
        readies_[key].push_back(h);
      }
      break;
    }
    case FrameType::kData: {
      auto it = largeRecvs_.find(h.xfer);
      if (it == largeRecvs_.end()) {
        protocolError("DATA for unknown transfer " + std::to_string(h.xfer));
      }
      Request* request = it->second;
      if (h.offset > request->length || h.length > request->length - h.offset) {
        protocolError("DATA [" + std::to_string(h.offset) + ", +" + std::to_string(h.length) +
                      ") outside a " + std::to_string(request->length) + "-byte message");
      }
      rx.sink = Sink::kData;
      rx.request = request;
      rx.dst = static_cast<std::uint8_t*>(request->data) + h.offset;
      rx.remaining = h.length;
      rx.chunk = h.length;
      break;
    }
    case FrameType::kCredit:
      break;
    case FrameType::kError:
      if (h.length > 65536)
        protocolError("an ERROR frame of " + std::to_string(h.length) + " bytes");
      rx.sink = Sink::kErrorText;
      rx.text.clear();
      rx.remaining = h.length;
      break;
    case FrameType::kGoodbye:
      peerClosing_ = true;
      break;
    default:
      protocolError(std::string("unknown frame type ") + std::to_string(h.type));
  }
  if (rx.sink == Sink::kNone) return;
  rx.inPayload = true;
  if (rx.remaining == 0) onPayloadDone(s);
}

void TcpPair::onPayloadDone(Stream& s) {
  Rx& rx = s.rx;
  rx.inPayload = false;
  Sink sink = rx.sink;
  rx.sink = Sink::kNone;
  rx.dst = nullptr;
  switch (sink) {
    case Sink::kEager:
      creditsToReturn_ += charge(rx.header.length);
      complete(*rx.request);
      break;
    case Sink::kData: {
      Request& request = *rx.request;
      request.progress += rx.chunk;
      if (request.progress == request.length) {
        largeRecvs_.erase(request.xfer);
        if (!request.sawAnnouncement) {
          // Its RTS is still on the way (DATA can overtake it on another stream).
          auto large = largeByKey_.find(request.key);
          if (large != largeByKey_.end()) {
            std::erase(large->second, &request);
            if (large->second.empty()) largeByKey_.erase(large);
          }
          ++rtsOwed_[request.key];
        }
        complete(request);
      }
      break;
    }
    case Sink::kUnexpected: {
      Unexpected* u = rx.unexpected;
      u->arrived = true;
      if (Request* request = u->claimedBy) {
        if (request->length > 0) std::memcpy(request->data, u->payload.data(), request->length);
        creditsToReturn_ += charge(request->length);
        auto& queue = unexpected_[request->key];
        std::erase_if(queue, [u](const auto& p) { return p.get() == u; });
        if (queue.empty()) unexpected_.erase(request->key);
        complete(*request);
      }
      break;
    }
    case Sink::kErrorText: {
      // The peer failed: raise its error here, naming the rank it names.
      std::string text(rx.text.begin(), rx.text.end());
      ErrorKind kind = ErrorKind::kIo;
      if (!text.empty()) {
        kind = static_cast<ErrorKind>(static_cast<std::uint8_t>(text[0]));
        text.erase(0, 1);
      }
      int culprit = rx.header.root;
      if (culprit < 0 || culprit == link_.rank) culprit = peer();
      if (culprit != peer()) text = "rank " + std::to_string(peer()) + " failed: " + text;
      throwError(kind, Where{link_.rank, "tcp", culprit}, text);
    }
    case Sink::kNone:
      break;
  }
}

// ---- failure and closing ------------------------------------------------------------------

void TcpPair::failAll(const Error& error) noexcept {
  if (dead_) return;
  dead_ = true;
  std::vector<Request*> pending(live_.begin(), live_.end());
  live_.clear();
  smallRecvs_.clear();
  largeByKey_.clear();
  largeRecvs_.clear();
  sendsAwaitingReady_.clear();
  unexpected_.clear();
  for (Stream& s : streams_) {
    // Nothing refers to a request or its buffer from here on.
    s.control.clear();
    s.data.clear();
    s.partialLane = -1;
    s.rx.sink = Sink::kNone;
    s.rx.dst = nullptr;
    s.rx.request = nullptr;
    s.rx.unexpected = nullptr;
  }
  for (Request* request : pending) request->onComplete(&error);
}

void TcpPair::readWhatIsLeft() {
  // A peer that failed sends an ERROR frame and exits; its exit can reset the connection
  // while this rank is still writing. The frame is in the receive queue ahead of the reset:
  // read it, so that the peer's reason (naming the rank that really failed) is the one raised.
  for (Stream& s : streams_) {
    if (!s.open || s.fd < 0) continue;
    while (!dead_ && receive(s)) {
    }
  }
}

bool TcpPair::finishPartial(Stream& s, std::chrono::milliseconds budget) noexcept {
  if (s.partialLane == -1) return true;
  OutFrame& f = s.partialLane == 0 ? s.control.front() : s.data.front();
  auto deadline = std::chrono::steady_clock::now() + budget;
  while (f.sent < f.total()) {
    iovec iov[2];
    int n = unsent(f, iov);
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n);
    ssize_t written = ::sendmsg(s.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (written > 0) {
      f.sent += static_cast<std::uint64_t>(written);
      continue;
    }
    if (written < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{s.fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
  s.partialLane = -1;
  return true;
}

void TcpPair::sendError(ErrorKind kind, const std::string& text, int culprit) noexcept {
  Stream& s = streams_[0];
  if (s.fd < 0 || dead_) return;
  // A frame cut in half would corrupt the stream: finish it first (briefly).
  if (!finishPartial(s, std::chrono::milliseconds(100))) return;
  FrameHeader h;
  h.type = static_cast<std::uint8_t>(FrameType::kError);
  h.length = text.size() + 1;
  h.root = culprit;
  std::string body(1, static_cast<char>(kind));
  body += text;
  std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
  frame += body;
  // A full socket buffer must not lose the reason: wait for room, briefly.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(s.fd, frame.data() + sent, frame.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{s.fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

void TcpPair::sendGoodbye() noexcept {
  for (Stream& s : streams_) {
    if (s.fd < 0 || s.partialLane != -1) continue;
    FrameHeader h;
    h.type = static_cast<std::uint8_t>(FrameType::kGoodbye);
    ssize_t ignored = ::send(s.fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)ignored;
    ::shutdown(s.fd, SHUT_WR);
  }
}

}  // namespace collx::transport::tcp
