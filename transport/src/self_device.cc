#include "self_device.h"

#include <cstring>

#include "collx/base/copy.h"

namespace collx::transport {

void SelfPair::deliver(Request& recv, Sent& sent) {
  if (sent.fingerprint != recv.fingerprint || sent.bytes.size() != recv.length) {
    throw MismatchError(Where{link_.rank, "self", link_.rank},
                        "rank " + std::to_string(link_.rank) + " expected " +
                            link_.describe(recv.key, recv.fingerprint) + " (" +
                            std::to_string(recv.length) + " bytes) from itself, got " +
                            link_.describe(recv.key, sent.fingerprint) + " (" +
                            std::to_string(sent.bytes.size()) + " bytes)");
  }
  if (recv.length > 0) copyBytes(recv.data, sent.bytes.data(), recv.length);
}

void SelfPair::post(Request& request) {
  if (request.kind == Request::Kind::kSend) {
    Sent sent{
        request.fingerprint,
        std::vector<std::uint8_t>(static_cast<const std::uint8_t*>(request.data),
                                  static_cast<const std::uint8_t*>(request.data) + request.length)};
    auto waiting = recvs_.find(request.key);
    if (waiting != recvs_.end() && !waiting->second.empty()) {
      Request* recv = waiting->second.front();
      waiting->second.pop_front();
      if (waiting->second.empty()) recvs_.erase(waiting);
      deliver(*recv, sent);
      recv->onComplete(nullptr);
    } else {
      sent_[request.key].push_back(std::move(sent));
    }
    request.onComplete(nullptr);
    return;
  }
  auto found = sent_.find(request.key);
  if (found != sent_.end() && !found->second.empty()) {
    Sent sent = std::move(found->second.front());
    found->second.pop_front();
    if (found->second.empty()) sent_.erase(found);
    deliver(request, sent);
    request.onComplete(nullptr);
    return;
  }
  recvs_[request.key].push_back(&request);
}

void SelfPair::failAll(const Error& error) noexcept {
  std::vector<Request*> pending;
  for (auto& [key, queue] : recvs_) pending.insert(pending.end(), queue.begin(), queue.end());
  recvs_.clear();
  sent_.clear();
  for (Request* request : pending) request->onComplete(&error);
}

}  // namespace collx::transport
