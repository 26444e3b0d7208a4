// TcpPair: the TCP transport's connection to one peer over one or more streams (sockets).
//
// Protocol (frame.h): a message of at most eagerLimit bytes goes EAGER when the receiver has
// credit for it (the receiver holds unexpected eager messages in a buffer bounded by the
// credit window); any other message is announced with RTS and moves as DATA once the
// receiver has said READY, straight into the receive buffer. A receiver that posts a large
// receive says READY at once (receiver-ready), so in a pipeline the data usually follows
// the announcement without waiting. Control frames (stream 0) overtake DATA at frame
// boundaries; DATA of one message is striped over every stream in frames of at most
// dataFrameBytes.
//
// Every arrival is checked against what this rank expects: a fingerprint or length that
// differs, or a collective sequence number that this rank runs as another collective, is a
// MismatchError here and, through an ERROR frame, on the peer too.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collx/base/error.h"
#include "collx/transport/mesh.h"
#include "collx/transport/pair.h"
#include "frame.h"

namespace collx::transport::tcp {

struct TcpPairOptions {
  std::uint64_t eagerLimit = 256 * 1024;
  std::uint64_t creditWindow = 4u << 20;
  std::uint64_t dataFrameBytes = 1u << 20;
};

class TcpPair final : public Pair {
 public:
  // Takes ownership of the connected, non-blocking sockets (stream 0 first).
  TcpPair(int peer, LinkState& link, std::vector<int> fds, const TcpPairOptions& options,
          std::string address);
  ~TcpPair() override;

  void post(Request& request) override;
  std::string describe() const override { return "tcp " + address_; }

  std::size_t addPollFds(std::vector<pollfd>& fds) const;
  bool progress(const pollfd* results, std::size_t count);
  void failAll(const Error& error) noexcept;
  // Best effort, non-blocking: tells the peer this rank is closing (end of stream is then
  // no failure) or why it failed a collective with it.
  void sendGoodbye() noexcept;
  // Tells the peer this rank failed and why; `culprit` is the rank the error names.
  void sendError(ErrorKind kind, const std::string& text, int culprit) noexcept;

 private:
  struct OutFrame {
    FrameHeader header;
    const std::uint8_t* payload = nullptr;
    std::uint64_t payloadLength = 0;
    std::uint64_t sent = 0;
    Request* request = nullptr;  // counted down when the frame is fully written
    std::shared_ptr<std::vector<std::uint8_t>> owned;
    std::uint64_t total() const { return sizeof(FrameHeader) + payloadLength; }
  };

  struct Unexpected {
    FrameHeader header;
    std::vector<std::uint8_t> payload;  // an EAGER message's bytes
    bool arrived = false;               // the payload is complete
    Request* claimedBy = nullptr;       // a receive posted while the payload was arriving
  };

  enum class Sink { kNone, kEager, kData, kUnexpected, kErrorText };

  struct Rx {
    bool inPayload = false;
    FrameHeader header;
    std::size_t headerGot = 0;
    Sink sink = Sink::kNone;
    std::uint8_t* dst = nullptr;
    std::uint64_t remaining = 0;
    std::uint64_t chunk = 0;
    Request* request = nullptr;
    Unexpected* unexpected = nullptr;
    std::vector<std::uint8_t> text;
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

  using KeyMap = std::unordered_map<MessageKey, std::deque<Request*>, MessageKeyHash>;

  std::uint64_t charge(std::uint64_t length) const { return length < 64 ? 64 : length; }
  void complete(Request& request);
  void queueControl(FrameHeader header, Request* request = nullptr,
                    std::shared_ptr<std::vector<std::uint8_t>> owned = nullptr);
  // True when an eager message for `key` has fully arrived and waits for its receive.
  bool arrivedEager(const MessageKey& key) const;
  void sendReady(Request& request);
  void queueData(Request& request, std::uint32_t xfer);

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
  void checkActive(const FrameHeader& header);
  void verify(const Request& request, const FrameHeader& header);
  [[noreturn]] void mismatch(const std::string& text);
  [[noreturn]] void peerGone(const std::string& why);
  [[noreturn]] void protocolError(const std::string& why);
  Where where() const { return Where{link_.rank, "tcp", peer()}; }

  LinkState& link_;
  TcpPairOptions options_;
  std::string address_;
  std::vector<Stream> streams_;
  std::size_t nextDataStream_ = 0;
  std::uint32_t nextXfer_ = 1;

  std::uint64_t credits_;              // bytes this rank may still send eagerly
  std::uint64_t creditsToReturn_ = 0;  // bytes of the peer's eager messages consumed

  std::unordered_set<Request*> live_;
  KeyMap smallRecvs_;  // posted, waiting for an EAGER or an RTS
  KeyMap largeByKey_;  // READY sent, their RTS not seen yet
  std::unordered_map<std::uint32_t, Request*> largeRecvs_;  // READY sent, by transfer id
  std::unordered_map<MessageKey, std::uint32_t, MessageKeyHash> rtsOwed_;
  std::unordered_map<MessageKey, std::deque<std::unique_ptr<Unexpected>>, MessageKeyHash>
      unexpected_;
  KeyMap sendsAwaitingReady_;
  std::unordered_map<MessageKey, std::deque<FrameHeader>, MessageKeyHash> readies_;

  bool peerClosing_ = false;  // GOODBYE received
  bool dead_ = false;         // failAll() ran
};

}  // namespace collx::transport::tcp
