// TcpPair: the TCP medium under the pair protocol (protocol/protocol_pair.h) for one peer,
// over one or more streams (sockets).
//
// Frames go on stream 0, each with its payload in one sendmsg; control frames overtake DATA
// at frame boundaries. A push goes as DATA frames of at most dataFrameBytes, striped over
// every stream. Reading, a frame's payload lands straight in its destination when large
// enough (the receive buffer for DATA and matched EAGER messages), else through a small
// staging buffer.
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
#include <string>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/mesh.h"
#include "collx/transport/pair.h"
#include "protocol/protocol_pair.h"

namespace collx::transport::tcp {

struct TcpPairOptions {
  // The limits both ends agreed on at connect (the smaller of each side's eager limit).
  ProtocolPair::Limits limits;
  std::uint64_t dataFrameBytes = 1u << 20;
  // Each sendmsg writes at most kWriteBytes (tcp_pair.cc) and reads between writes.
  bool shortWrites = true;
};

class TcpPair final : public ProtocolPair {
 public:
  // Takes ownership of the connected, non-blocking sockets (stream 0 first).
  TcpPair(int peer, LinkState& link, std::vector<int> fds, const TcpPairOptions& options,
          std::string address);
  ~TcpPair() override;

  std::string describe() const override { return "tcp " + address_; }

  std::size_t addPollFds(std::vector<pollfd>& fds) const;
  bool progress(const pollfd* results, std::size_t count);
  // Best effort, non-blocking: tells the peer this rank is closing (end of stream is then
  // no failure).
  void sendGoodbye() noexcept;
  // Tells the peer this rank failed and why; `culprit` is the rank the error names.
  void sendError(ErrorKind kind, const std::string& text, int culprit) noexcept;

 protected:
  const char* medium() const noexcept override { return "tcp"; }
  void sendFrame(const Frame& frame, const std::uint8_t* payload, Transfer* transfer) override;
  void flushOut() override;
  bool outputQueued() const noexcept override { return streams_[0].hasOutput(); }
  void push(Transfer& transfer, const Frame& ready) override;
  void dropQueued() noexcept override;

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
    bool open = true;
    std::deque<OutFrame> control;
    std::deque<OutFrame> data;
    int partialLane = -1;  // 0 control, 1 data: its front frame is partly written
    bool writeBlocked = false;
    Rx rx;
    bool hasOutput() const { return !control.empty() || !data.empty(); }
  };

  // The parts of `frame` not written yet, as at most two iovecs; returns how many.
  static int unsent(OutFrame& frame, iovec* iov);
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
