// Device: one transport's share of a context (all its pairs, its sockets or segments). The
// mesh drives every device's progress from one thread at a time.
#pragma once

#include <poll.h>

#include <chrono>
#include <string>
#include <vector>

#include "collx/transport/pair.h"

namespace collx {
class Error;
}

namespace collx::transport {

class SharedGroup;

class Device {
 public:
  virtual ~Device() = default;

  virtual const char* name() const = 0;

  // This rank's address on this device, for peers ("" when peers need none).
  virtual std::string address() const = 0;
  // Whether this device can reach `peer`, given the address it published on this device.
  virtual bool canConnect(int peer, const std::string& peerAddress) const = 0;
  // Of `peers` (each accepted by canConnect), the ones this device will connect. A device
  // whose reachability needs both sides' say (shm: each maps the other's arena) agrees on
  // it with each peer here, so that both ends pick the same transport; blocking, bounded by
  // `deadline` (TimeoutError). The others fall through to the next device. Default: all.
  virtual std::vector<int> confirm(const std::vector<int>& peers,
                                   const std::vector<std::string>& addresses,
                                   std::chrono::steady_clock::time_point deadline) {
    (void)addresses;
    (void)deadline;
    return peers;
  }
  // Connects to `peers` (all of which chose this device; addresses indexed like peers).
  // Blocking, bounded by `deadline`. Returns one pair per peer, owned by the device.
  virtual std::vector<Pair*> connect(const std::vector<int>& peers,
                                     const std::vector<std::string>& addresses,
                                     std::chrono::steady_clock::time_point deadline) = 0;

  // The mesh is about to sleep in poll(). A device whose peers signal it through memory
  // rather than a descriptor (shm) arms its doorbell here, which addPollFds() then adds, and
  // returns false, arming nothing, when something is already waiting (the mesh then only
  // looks). Default: true.
  virtual bool prepareToSleep() { return true; }

  // Descriptors the mesh polls for this device, with the events wanted now (readable always,
  // writable while output waits). Appended to `fds`; returns how many were added.
  virtual std::size_t addPollFds(std::vector<pollfd>& fds) = 0;

  // Moves every byte that can move now without blocking, given the poll() results for the
  // descriptors this device added (same order), and completes what finished. Returns true
  // when anything happened. Throws collx::Error when a peer failed (IoError naming it) or
  // broke the protocol; the mesh then fails everything in flight.
  virtual bool progress(const pollfd* results, std::size_t count) = 0;

  // Fails every request in flight with `error` and stops touching their buffers.
  virtual void failAll(const Error& error) noexcept = 0;

  // Mesh::reform: the device goes on in `generation` with the peers `keep` says (by mesh
  // rank), after a failure. Unsupported where it cannot. Default: nothing of its own to do.
  virtual void reform(std::int64_t generation, const std::vector<bool>& keep) {
    (void)generation, (void)keep;
  }

  // Mesh::resume: every member of the generation reform() began has re-formed too, so the
  // device may now send to the peers it kept (ibverbs: the HELLOs of its queue pairs, which
  // a peer still in the old generation would take for duplicates). Default: nothing waits.
  virtual void resume() {}

  // Mesh::drop: the peers are left out of this generation after all (its reform kept them).
  // Default: nothing of its own to do (their pairs are dropped).
  virtual void leaveOut(const std::vector<int>& peers) { (void)peers; }

  // Context::grow: listens again for connections (a newcomer's), returning the new address;
  // Unsupported where the device cannot take a peer after connect(). Default: cannot.
  virtual std::string listenAgain();

  // Whether `peer` (a peer of this device's) is gone for certain: its process exited, its
  // connection closed. Why, naming it, else "" (also where the device cannot tell). Looks
  // without reading or waiting; any thread. After a failure too: the recovery's detector.
  virtual std::string gone(int peer) const {
    (void)peer;
    return {};
  }

  // The peers this device connected seen as shared memory, with this rank (after connect;
  // nullptr when the device has none).
  virtual SharedGroup* sharedGroup() { return nullptr; }
};

}  // namespace collx::transport
