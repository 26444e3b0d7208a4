// TcpPair: the TCP medium under the pair protocol (protocol/protocol_pair.h) for one peer,
// over one or more streams (sockets).
//
// Frames go on stream 0, each with its payload in one sendmsg; control frames overtake DATA
// at frame boundaries. A push goes as DATA frames of at most dataFrameBytes, striped over
// every stream. Reading, a frame's payload lands straight in its destination when large
// enough (the receive buffer for DATA and matched EAGER messages), else through a small
// staging buffer.
//
// TLS (COLLX_TLS=1): each socket has its TlsStream, through which every byte of the stream
// goes (sealed by OpenSSL in this process, or by the kernel where it has TLS); records that
// OpenSSL holds already read are read before the mesh sleeps (readPending()).
//
// Closing: a rank that closes sends GOODBYE on every stream and shuts its sockets for
// writing; end of stream after it is no failure unless something is still in flight. End
// of stream without it means the peer died. A rank that fails sends ERROR on stream 0 (its
// kind, the rank it names and its text), which the peer raises as its own.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collx/base/error.h"
#include "collx/secure/tls.h"
#include "collx/transport/link.h"
#include "collx/transport/pair.h"
#include "protocol/protocol_pair.h"

namespace collx::transport::tcp {

struct TcpPairOptions {
  // The limits both ends agreed on at connect (the smaller of each side's eager limit).
  ProtocolPair::Limits limits;
  std::uint64_t dataFrameBytes = kMostDataPiece;
  // Each sendmsg writes at most kWriteBytes (tcp_pair.cc) and reads between writes.
  bool shortWrites = true;
};

class TcpPair final : public ProtocolPair {
 public:
  // Takes ownership of the connected, non-blocking sockets (stream 0 first) and, with TLS,
  // of their streams (one per socket, handshakes done; empty: plain TCP).
  TcpPair(int peer, LinkState& link, std::vector<int> fds,
          std::vector<std::unique_ptr<secure::TlsStream>> tls, const TcpPairOptions& options,
          std::string address);
  ~TcpPair() override;

  std::string describe() const override { return "tcp " + address_; }

  std::size_t addPollFds(std::vector<pollfd>& fds) const;
  bool progress(const pollfd* results, std::size_t count);
  // Whether TLS records already read from a socket wait to be opened (poll() cannot tell).
  bool readPending() const noexcept;
  // Best effort, non-blocking: tells the peer this rank is closing (end of stream is then
  // no failure).
  void sendGoodbye() noexcept;
  // Whether the peer closed (or reset) any of the connections, looking without reading: why,
  // else "" (Device::gone).
  std::string gone() const;
  // Tells the peer this rank failed and why; `culprit` is the rank the error names.
  void sendError(ErrorKind kind, const std::string& text, int culprit) noexcept;

 protected:
  const char* medium() const noexcept override { return "tcp"; }
  void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) override;
  void flushOut() override;
  bool outputQueued() const noexcept override { return streams_[0].hasOutput(); }
  void push(Transfer& transfer, const Frame& ready) override;
  void dropQueued() noexcept override;
  void resetMedium() override;

 private:
  struct OutFrame {
    Frame header;
    const std::uint8_t* payload = nullptr;
    std::uint64_t payloadLength = 0;
    std::uint64_t sent = 0;
    Transfer* transfer = nullptr;  // counted down when the frame is fully written
    std::uint64_t total() const { return sizeof(Frame) + payloadLength; }
  };

  struct Rx {
    bool inPayload = false;
    Frame header;
    std::size_t headerGot = 0;
    Sink sink;
    std::uint8_t* dst = nullptr;  // where the next payload byte goes
    std::uint64_t remaining = 0;
    std::unique_ptr<std::uint8_t[]> staging;
    std::size_t begin = 0;
    std::size_t end = 0;
  };

  struct Stream {
    int fd = -1;
    std::unique_ptr<secure::TlsStream> tls;  // with TLS: every byte goes through it
    bool open = true;
    std::deque<OutFrame> control;
    std::deque<OutFrame> data;
    int partialLane = -1;  // 0 control, 1 data: its front frame is partly written
    bool writeBlocked = false;
    Rx rx;
    bool hasOutput() const {
      return !control.empty() || !data.empty() || (tls && tls->outputPending());
    }
  };

  // The parts of `frame` not written yet, as at most two iovecs; returns how many.
  static int unsent(OutFrame& frame, iovec* iov);
  // One non-blocking write or read on a stream, through its TLS when it has one: bytes, or
  // -1 with errno (EAGAIN: not now; EPROTO: TLS failed, ioError() says why); a read's 0 is
  // the end of the stream.
  ssize_t writeOut(Stream& stream, iovec* iov, int count) noexcept;
  ssize_t readIn(Stream& stream, void* data, std::size_t size) noexcept;
  static std::string ioError(const Stream& stream, int err);
  // Writes all of `iov` and sends what TLS sealed of it, waiting for room until `deadline`
  // (the last frames: ERROR, a partial frame before it). False when it could not.
  bool writeAllBefore(Stream& stream, iovec* iov, int count,
                      std::chrono::steady_clock::time_point deadline) noexcept;
  bool flush(Stream& stream);
  // Finishes a partly written frame within `budget`, so that a last frame can follow.
  bool finishPartial(Stream& stream, std::chrono::milliseconds budget) noexcept;
  bool receive(Stream& stream);
  // Reads what the peer sent before its connection broke (see the .cc).
  void readWhatIsLeft();
  void consumeStaged(Stream& stream);
  void onHeader(Stream& stream);
  void onPayloadDone(Stream& stream);
  void endOfStream(Stream& stream);

  TcpPairOptions options_;
  std::string address_;
  std::vector<Stream> streams_;
  std::size_t nextDataStream_ = 0;
  bool flushing_ = false;
  bool receiving_ = false;
};

}  // namespace collx::transport::tcp
