#include "tcp_pair.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "../no_cancel.h"
#include "collx/base/copy.h"
#include "collx/base/log.h"
#include "collx/base/units.h"

namespace collx::transport::tcp {

namespace {

constexpr std::size_t kStagingBytes = 64 * kKiB;
// Payloads at least this large are read straight into their destination, not via staging.
constexpr std::uint64_t kDirectReadBytes = 16 * kKiB;
constexpr int kMaxIov = 64;
// Bytes one sendmsg takes at most, when both ends of a connection run at once (each rank has
// a core: TcpPairOptions::shortWrites). While it copies, a sendmsg holds its socket, and
// what the peer sends meanwhile on the same connection (its data, its ACKs) waits in the
// socket's backlog until the call ends: on loopback, two ranks exchanging large messages
// then take turns instead of moving both ways at once. Shorter writes let both directions
// flow. Ranks that take turns on cores gain nothing from it and pay the extra calls
// (benchmarks/README.md: "TCP writes of at most 512 KiB": 256 KiB on the Xeon VM; on the
// AMD EPYC VM 512 KiB was 1.12-1.23x faster from 1 MiB, and 128 KiB or less, or no limit,
// slower).
constexpr std::uint64_t kWriteBytes = 512 * kKiB;
// Bytes one progress() reads from one stream before giving the other pairs a turn.
constexpr std::uint64_t kReadBudget = 32u << 20;

}  // namespace

int TcpPair::unsent(OutFrame& f, iovec* iov) {
  int n = 0;
  std::uint64_t skip = f.sent;
  if (skip < sizeof(Frame)) {
    iov[n++] = {reinterpret_cast<std::uint8_t*>(&f.header) + skip, sizeof(Frame) - skip};
    skip = 0;
  } else {
    skip -= sizeof(Frame);
  }
  if (f.payloadLength > skip) {
    if (f.payload == nullptr) {
      // The rest of a frame cut short by a failure (dropQueued): zeros, which the peer reads
      // and drops (the frame is of the old epoch).
      static const std::uint8_t kZeros[64 * 1024] = {};
      iov[n++] = {const_cast<std::uint8_t*>(kZeros),
                  static_cast<std::size_t>(
                      std::min<std::uint64_t>(f.payloadLength - skip, sizeof(kZeros)))};
    } else {
      iov[n++] = {const_cast<std::uint8_t*>(f.payload) + skip, f.payloadLength - skip};
    }
  }
  return n;
}

TcpPair::TcpPair(int peer, LinkState& link, std::vector<int> fds,
                 std::vector<std::unique_ptr<secure::TlsStream>> tls, const TcpPairOptions& options,
                 std::string address)
    : ProtocolPair(peer, link, options.limits), options_(options), address_(std::move(address)) {
  for (std::size_t i = 0; i < fds.size(); ++i) {
    Stream stream;
    stream.fd = fds[i];
    if (i < tls.size()) stream.tls = std::move(tls[i]);
    stream.rx.staging = std::make_unique<std::uint8_t[]>(kStagingBytes);
    streams_.push_back(std::move(stream));
  }
}

TcpPair::~TcpPair() {
  for (Stream& s : streams_) {
    s.tls.reset();  // (before its socket)
    if (s.fd >= 0) ::close(s.fd);
  }
}

// ---- one write or read, plain or through TLS ----------------------------------------------

ssize_t TcpPair::writeOut(Stream& s, iovec* iov, int count) noexcept {
  if (!s.tls) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(count);
    return detail::sendmsgNoCancel(s.fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  using Status = secure::TlsStream::Status;
  auto broken = [&](Status status) -> ssize_t {
    errno = status == Status::kClosed ? EPIPE : EPROTO;
    return -1;
  };
  if (s.tls->outputPending()) {
    const Status status = s.tls->flush();
    if (status == Status::kWantWrite) {
      errno = EAGAIN;
      return -1;
    }
    if (status != Status::kOk) return broken(status);
  }
  const std::size_t taken = s.tls->write(iov, count);
  // Out now, as a plain write would be (what the socket cannot take waits, sealed).
  const Status status = s.tls->flush();
  if (status != Status::kOk && status != Status::kWantWrite) return broken(status);
  if (taken == 0 && count > 0) {
    errno = EAGAIN;
    return -1;
  }
  return static_cast<ssize_t>(taken);
}

ssize_t TcpPair::readIn(Stream& s, void* data, std::size_t size) noexcept {
  if (!s.tls) return detail::recvNoCancel(s.fd, data, size, MSG_DONTWAIT);
  using Status = secure::TlsStream::Status;
  Status status = Status::kOk;
  const std::size_t n = s.tls->read(data, size, status);
  if (n > 0) return static_cast<ssize_t>(n);
  switch (status) {
    case Status::kClosed:
      return 0;
    case Status::kWantRead:
    case Status::kOk:
      errno = EAGAIN;
      return -1;
    default:
      errno = EPROTO;
      return -1;
  }
}

std::string TcpPair::ioError(const Stream& s, int err) {
  if (s.tls && err == EPROTO) return s.tls->error();
  return std::strerror(err);
}

bool TcpPair::writeAllBefore(Stream& s, iovec* iov, int count,
                             std::chrono::steady_clock::time_point deadline) noexcept {
  auto waitWritable = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{s.fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    return true;
  };
  while (count > 0) {
    const ssize_t written = writeOut(s, iov, count);
    if (written < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (!waitWritable()) return false;
      continue;
    }
    std::size_t left = static_cast<std::size_t>(written);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<std::uint8_t*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  while (s.tls && s.tls->outputPending()) {
    const auto status = s.tls->flush();
    if (status == secure::TlsStream::Status::kOk) break;
    if (status != secure::TlsStream::Status::kWantWrite || !waitWritable()) return false;
  }
  return true;
}

// ---- the protocol's hooks -----------------------------------------------------------------

void TcpPair::sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) {
  OutFrame out;
  out.header = frame;
  out.payload = payload;
  out.payloadLength = payload != nullptr ? frame.length : 0;
  out.transfer = transfer;
  if (transfer != nullptr) transfer->pending = 1;
  streams_[0].control.push_back(out);
}

void TcpPair::flushOut() {
  if (!flushing_ && streams_[0].hasOutput()) flush(streams_[0]);
}

void TcpPair::push(Transfer& transfer, const Frame& ready) {
  const std::uint64_t frameBytes = std::max<std::uint64_t>(options_.dataFrameBytes, 4096);
  const std::uint64_t length = transfer.length();
  const std::uint64_t frames = length == 0 ? 1 : (length + frameBytes - 1) / frameBytes;
  transfer.pending = static_cast<std::uint32_t>(frames);
  const std::uint8_t* base = transfer.bytes();
  for (std::uint64_t i = 0; i < frames; ++i) {
    const std::uint64_t offset = i * frameBytes;
    OutFrame frame;
    frame.header.type = FrameType::kData;
    frame.header.setMessage(transfer.request->key, transfer.request->fingerprint);
    frame.header.length = std::min(frameBytes, length - offset);
    frame.header.offset = offset;
    frame.header.xfer = ready.xfer;
    frame.payload = base + offset;
    frame.payloadLength = frame.header.length;
    frame.transfer = &transfer;
    Stream& s = streams_[nextDataStream_];
    nextDataStream_ = (nextDataStream_ + 1) % streams_.size();
    s.data.push_back(frame);
  }
  // Pieces on streams other than 0 leave with the next progress(); stream 0 is flushed by
  // post() or by progress() itself.
}

void TcpPair::dropQueued() noexcept {
  for (Stream& s : streams_) {
    // Nothing refers to a request or its buffer from here on. A frame written in part is
    // finished with zeros before anything else, if the pair is reset: the stream stays whole.
    std::optional<OutFrame> owed;
    if (s.partialLane != -1) {
      owed = s.partialLane == 0 ? s.control.front() : s.data.front();
      owed->payload = nullptr;
      owed->transfer = nullptr;
    }
    s.control.clear();
    s.data.clear();
    s.partialLane = -1;
    if (owed) {
      s.control.push_back(*owed);
      s.partialLane = 0;
    }
    // The rest of a payload being read is dropped.
    s.rx.sink = Sink{};
    s.rx.sink.stale = true;
    s.rx.dst = nullptr;
  }
}

void TcpPair::resetMedium() {
  // A frame finished with zeros leaves with the next progress().
  for (Stream& s : streams_) {
    if (s.hasOutput()) s.writeBlocked = true;
  }
}

// ---- progress -----------------------------------------------------------------------------

std::size_t TcpPair::addPollFds(std::vector<pollfd>& fds) const {
  for (const Stream& s : streams_) {
    short events = s.open ? POLLIN : 0;
    if (s.writeBlocked && s.hasOutput()) events |= POLLOUT;
    // (Not a dead pair's: a peer that a reform left out, whose end of the connection may
    // stay readable for ever.)
    fds.push_back(pollfd{!dead() && (s.open || s.hasOutput()) ? s.fd : -1, events, 0});
  }
  return streams_.size();
}

bool TcpPair::readPending() const noexcept {
  for (const Stream& s : streams_) {
    if (s.open && s.tls && s.tls->readPending()) return true;
  }
  return false;
}

bool TcpPair::progress(const pollfd* results, std::size_t count) {
  if (dead()) return false;
  bool moved = false;
  for (std::size_t i = 0; i < streams_.size() && i < count; ++i) {
    Stream& s = streams_[i];
    short revents = results[i].revents;
    // (TLS: records read already, which poll() does not show, are read first.)
    if (s.open && ((revents & (POLLIN | POLLHUP | POLLERR)) || (s.tls && s.tls->readPending()))) {
      moved |= receive(s);
    }
    if (s.rx.begin < s.rx.end) {  // staged bytes left by the read budget
      consumeStaged(s);
      moved = true;
    }
  }
  returnCredit();
  for (Stream& s : streams_) {
    if (s.hasOutput()) moved |= flush(s);
  }
  return moved;
}

bool TcpPair::flush(Stream& s) {
  bool moved = false;
  flushing_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{flushing_};
  while (s.hasOutput()) {
    if (s.control.empty() && s.data.empty()) {
      // Only sealed TLS records wait: send them.
      const auto status = s.tls->flush();
      if (status == secure::TlsStream::Status::kWantWrite) {
        s.writeBlocked = true;
        return moved;
      }
      if (status != secure::TlsStream::Status::kOk) {
        peerGone("sending to " + rankName() + " (" + describe() + ") failed: " + s.tls->error());
      }
      s.writeBlocked = false;
      return true;
    }
    // Gather frames: a partly written frame first, then control, then data.
    iovec iov[kMaxIov];
    OutFrame* frames[kMaxIov];
    int laneOf[kMaxIov];
    int n = 0, nframes = 0;
    auto add = [&](OutFrame& f, int lane) {
      if (n + 2 > kMaxIov) return false;
      if (f.sent == 0) {
        if (f.header.credit == 0) f.header.credit = takeCredit();
        f.header.epoch = link_.epoch;
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
    // At most kWriteBytes per sendmsg (see there), when short writes are on.
    const std::uint64_t most = options_.shortWrites ? kWriteBytes : ~std::uint64_t{0};
    std::uint64_t offered = 0;
    for (int i = 0; i < n; ++i) {
      if (offered + iov[i].iov_len > most) {
        iov[i].iov_len = most - offered;
        n = i + 1;
        offered = most;
        break;
      }
      offered += iov[i].iov_len;
    }
    ssize_t written = writeOut(s, iov, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        s.writeBlocked = true;
        return moved;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        readWhatIsLeft();  // raises the peer's own ERROR frame if it sent one
        peerGone("the connection to " + rankName() + " (" + describe() +
                 ") broke while sending: " + rankName() + " died or was killed");
      }
      int err = errno;
      peerGone("sending to " + rankName() + " (" + describe() + ") failed: " + ioError(s, err));
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
      Transfer* transfer = f.transfer;
      std::deque<OutFrame>& lane = laneOf[i] == 0 ? s.control : s.data;
      // Frames are written in order within a lane, so a finished frame is its lane's front.
      lane.pop_front();
      if (transfer != nullptr && --transfer->pending == 0) sent(*transfer);
    }
    if (partial && static_cast<std::uint64_t>(written) < offered) {
      s.writeBlocked = true;  // the socket took less than offered: wait for POLLOUT
      return moved;
    }
    // Between two writes of a long message, take in what the peer sent meanwhile: in an
    // exchange both ranks write at once, and a rank that only writes keeps the peer's
    // window shut (and its own segments waiting in the backlog).
    if (!receiving_ && s.open && s.hasOutput()) receive(s);
  }
  return moved;
}

bool TcpPair::receive(Stream& s) {
  receiving_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset{receiving_};
  Rx& rx = s.rx;
  std::uint64_t budget = kReadBudget;
  bool moved = false;
  bool drained = false;  // a read got less than it asked for: nothing more was there
  while (budget > 0 && !dead()) {
    if (rx.begin < rx.end) {
      consumeStaged(s);
      moved = true;
      continue;
    }
    // (Not another read that would only say EAGAIN: a system call saved per message.)
    if (drained) return moved;
    ssize_t n;
    const bool direct = rx.inPayload && rx.dst != nullptr && rx.remaining >= kDirectReadBytes;
    const std::size_t asked =
        direct ? static_cast<std::size_t>(std::min<std::uint64_t>(rx.remaining, budget))
               : kStagingBytes;
    n = readIn(s, direct ? static_cast<void*>(rx.dst) : rx.staging.get(), asked);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == ECONNRESET) {
        n = 0;  // handled as end of stream below
      } else {
        int err = errno;
        peerGone("receiving from " + rankName() + " (" + describe() +
                 ") failed: " + ioError(s, err));
      }
    }
    if (n == 0) {
      endOfStream(s);
      return true;
    }
    moved = true;
    // (TLS: a read opens one record at most; others may wait, read already.)
    drained = static_cast<std::size_t>(n) < asked && !(s.tls && s.tls->readPending());
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

void TcpPair::endOfStream(Stream& s) {
  const bool idle = !s.rx.inPayload && s.rx.headerGot == 0;
  if (!closing() || !idle) {
    peerGone("the connection to " + rankName() + " (" + describe() + ") was closed: " + rankName() +
             " died or was killed");
  }
  // The peer said goodbye: once every stream has ended, nothing it sent is still unread.
  s.open = false;
  for (const Stream& other : streams_) {
    if (other.open) return;
  }
  peerClosed();
}

void TcpPair::consumeStaged(Stream& s) {
  Rx& rx = s.rx;
  while (rx.begin < rx.end && !dead()) {
    std::size_t avail = rx.end - rx.begin;
    const std::uint8_t* src = rx.staging.get() + rx.begin;
    if (!rx.inPayload) {
      std::size_t take = std::min(avail, sizeof(Frame) - rx.headerGot);
      std::memcpy(reinterpret_cast<std::uint8_t*>(&rx.header) + rx.headerGot, src, take);
      rx.headerGot += take;
      rx.begin += take;
      if (rx.headerGot == sizeof(Frame)) {
        rx.headerGot = 0;
        onHeader(s);
      }
      continue;
    }
    std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(avail, rx.remaining));
    if (rx.dst != nullptr) {  // (else a payload that is dropped: Sink::stale)
      copyBytes(rx.dst, src, take);
      rx.dst += take;
    }
    rx.remaining -= take;
    rx.begin += take;
    if (rx.remaining == 0) onPayloadDone(s);
  }
  if (rx.begin >= rx.end) rx.begin = rx.end = 0;
}

void TcpPair::onHeader(Stream& s) {
  Rx& rx = s.rx;
  rx.sink = frameArrived(rx.header);
  if (!rx.header.carriesPayload()) return;
  rx.inPayload = true;
  rx.dst = rx.sink.dst;
  rx.remaining = rx.sink.length;
  if (rx.remaining == 0) onPayloadDone(s);
}

void TcpPair::onPayloadDone(Stream& s) {
  Rx& rx = s.rx;
  rx.inPayload = false;
  rx.dst = nullptr;
  Sink sink = rx.sink;
  rx.sink = Sink{};
  payloadArrived(sink);
}

// ---- failure and closing ------------------------------------------------------------------

void TcpPair::readWhatIsLeft() {
  // A peer that failed sends an ERROR frame and exits; its exit can reset the connection
  // while this rank is still writing. The frame is in the receive queue ahead of the reset:
  // read it, so that the peer's reason (naming the rank that really failed) is the one raised.
  for (Stream& s : streams_) {
    if (!s.open || s.fd < 0) continue;
    while (!dead() && receive(s)) {
    }
  }
}

bool TcpPair::finishPartial(Stream& s, std::chrono::milliseconds budget) noexcept {
  if (s.partialLane == -1) return true;
  OutFrame& f = s.partialLane == 0 ? s.control.front() : s.data.front();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (f.sent < f.total()) {  // (a frame finished with zeros goes in pieces)
    iovec iov[2];
    const int n = unsent(f, iov);
    std::uint64_t bytes = 0;
    for (int i = 0; i < n; ++i) bytes += iov[i].iov_len;
    if (!writeAllBefore(s, iov, n, deadline)) return false;
    f.sent += bytes;
  }
  s.partialLane = -1;
  return true;
}

std::string TcpPair::gone() const {
  for (const Stream& s : streams_) {
    if (s.fd < 0) return rankName() + " (" + describe() + "): its connection is closed";
    pollfd p{s.fd, POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      return rankName() + " (" + describe() +
             ") closed its connection: it died, was killed or "
             "left";
    }
  }
  return {};
}

void TcpPair::sendError(ErrorKind kind, const std::string& text, int culprit) noexcept {
  Stream& s = streams_[0];
  if (s.fd < 0 || dead()) return;
  // A frame cut in half would corrupt the stream: finish it first (briefly).
  if (!finishPartial(s, std::chrono::milliseconds(100))) return;
  Frame h;
  h.type = FrameType::kError;
  h.epoch = link_.epoch;
  h.length = text.size() + 1;
  h.root = culprit;
  std::string body(1, static_cast<char>(kind));
  body += text;
  std::string frame(reinterpret_cast<const char*>(&h), sizeof(h));
  frame += body;
  // A full socket buffer must not lose the reason: wait for room, briefly.
  iovec iov{frame.data(), frame.size()};
  writeAllBefore(s, &iov, 1, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
}

void TcpPair::sendGoodbye() noexcept {
  for (Stream& s : streams_) {
    if (s.fd < 0 || s.partialLane != -1) continue;
    Frame h;
    h.epoch = link_.epoch;
    h.type = FrameType::kGoodbye;
    iovec iov{&h, sizeof(h)};
    ssize_t ignored = writeOut(s, &iov, 1);  // (TLS: sealed and sent as far as it goes)
    (void)ignored;
    ::shutdown(s.fd, SHUT_WR);
  }
}

}  // namespace collx::transport::tcp
