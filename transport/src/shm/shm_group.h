// ShmGroup: the SharedGroup (collx/transport/shared_group.h) of a context's ranks on this
// host, over the group area of each member's arena (arena.h).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "arena.h"
#include "collx/base/error.h"
#include "collx/transport/link.h"
#include "collx/transport/shared_group.h"

namespace collx::transport::shm {

struct GroupMember {
  int rank = -1;
  pid_t pid = 0;
  bool samePid = true;
  int pidfd = -1;  // the device's (it closes it); -1: kill(pid, 0) tells (a zombie passes)
  std::shared_ptr<Mapping> mapping;
  Layout layout;
  // This rank may read the member's memory (COLLX_SHM_CMA and the connect-time probe).
  bool cma = false;
  // The member's doorbell (shm_device.h), rung when it sleeps in poll for this rank's uses.
  sockaddr_un bell{};
  socklen_t bellLength = 0;
};

class ShmGroup final : public SharedGroup {
 public:
  // `members` in rank order, this rank's among them (index `self`). `bellSocket`: the
  // device's socket that rings members' doorbells. A sub-group (subGroup()) is made with its
  // slot and the group that made it, which outlives it. `generation`: the job's (its calls
  // announce it); a group re-formed for generation g (ShmDevice::reform) numbers its uses from
  // `base` = g << kGenerationShift on (a sub-group from its maker's), in the same memory.
  ShmGroup(LinkState& link, std::vector<GroupMember> members, int self, std::size_t bufferBytes,
           int bellSocket, int slot = -1, ShmGroup* parent = nullptr, std::int64_t generation = 0,
           std::uint64_t base = 0);
  // A sub-group lets go of its slot.
  ~ShmGroup() override;

  SlotOffer offerSlots(const std::vector<int>& ranks) override;
  std::unique_ptr<SharedGroup> subGroup(const std::vector<int>& ranks, int slot,
                                        std::uint32_t offered) override;
  void withdrawSlots(std::uint32_t offered, bool forGood) noexcept override;

  void publish() override;
  void announce(std::uint64_t seq, const Fingerprint& fingerprint) noexcept override;
  std::uint8_t* payload(int member, std::uint64_t use) const override;
  void readFrom(int member, std::uint64_t address, void* dst, std::uint64_t bytes,
                const Waiting& waiting) override;

  bool expect(int member, std::uint64_t use) override;
  void endExpect() noexcept override;
  // Whether the use expect() waits for is published, here or in a sub-group (the device asks
  // after it set its `sleeping` flag, before it sleeps): then the mesh must not sleep.
  bool expectationMet() noexcept;

  // The mesh failed: every wait ends with this error, a sub-group's too.
  void failed(const Error& error) noexcept;

 protected:
  std::uint32_t epochOf(int member) const override;
  UseHeader* headerOf(int member, std::uint64_t use) const override;
  void sleep(int member, std::uint32_t seen, std::chrono::steady_clock::time_point until) override;
  void check(int member, const CallNamer& name, bool starting) override;
  // check() without asking whether the member's process still runs.
  void checkState(int member, const CallNamer& name, bool starting);
  // check()'s liveness part: raises when a wait heard nothing of `member` (its epoch did not
  // move, it answered no ping) for the peer timeout (setSilenceCheck).
  void checkSilence(int member, const CallNamer& name);
  [[noreturn]] void fail(Failure kind, int member, const std::string& what,
                         const CallNamer& name) override;
  std::string describe(std::uint64_t seq, const Fingerprint& fp) const override;
  bool announced(int member, std::uint64_t& seq, Fingerprint& fingerprint,
                 std::int64_t& generation) const override;

 public:
  const std::vector<GroupMember>& members() const noexcept { return members_; }

 private:
  [[noreturn]] void raise(ErrorKind kind, int culprit, const std::string& detail,
                          const CallNamer& name, bool failMesh);
  static std::string diedText(const GroupMember& m);
  bool reached(int member, std::uint64_t use) const noexcept;
  // Rings the doorbell of every member that sleeps in poll (its `sleeping` flag set).
  void ringSleepers() noexcept;
  // failed()'s work (a sub-group is told by its maker).
  void setFailure(ErrorKind kind, int culprit, const std::string& text,
                  const std::string& what) noexcept;
  // Zeroes this member's slot `slot` (its control and its buffers' headers): no use, no call.
  void zeroSlot(int slot) noexcept;

  LinkState& link_;
  std::vector<GroupMember> members_;
  std::vector<GroupControl*> controls_;
  std::vector<std::uint8_t*> buffers_;  // member m's buffer 0
  std::size_t stride_ = 0;
  int bellSocket_ = -1;
  // Per member, for checkSilence (by the thread that runs this group's call): its epoch at
  // the last look, when that was, and when the wait last heard of it.
  struct Silence {
    std::uint32_t epoch = 0;
    std::chrono::steady_clock::time_point looked{};
    std::chrono::steady_clock::time_point heard{};
  };
  std::vector<Silence> silence_;
  int expectedMember_ = -1;  // expect()'s, until endExpect()
  std::uint64_t expectedUse_ = 0;
  std::atomic<bool> failed_{false};
  std::mutex errorMutex_;
  ErrorKind errorKind_ = ErrorKind::kIo;
  int errorCulprit_ = -1;
  std::string errorText_;
  std::string errorWhat_;
  // A sub-group's maker (nullptr: this is the mesh's group).
  ShmGroup* const parent_;
  // The mesh's group: its live sub-groups, and its slots (bit s: slot s) in use here,
  // offered to an agreement, or withdrawn for good; the members (indices here) of each
  // slot's last sub-group.
  std::mutex slotMutex_;
  std::vector<ShmGroup*> subGroups_;
  std::uint32_t slotsUsed_ = 0;
  std::uint32_t slotsOffered_ = 0;
  std::uint32_t slotsWithdrawn_ = 0;
  std::vector<int> slotMembers_[kSlots];
};

}  // namespace collx::transport::shm
