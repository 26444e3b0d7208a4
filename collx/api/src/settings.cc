#include "collx/settings.h"

#include <mutex>

#include "collx/base/log.h"
#include "collx/base/units.h"

namespace collx {

const Setting<kind::Bytes> kTorchEagerBytes(
    {.name = "COLLX_TORCH_EAGER_BYTES",
     .component = "torch",
     .defaultValue = 64 * kKiB,
     .range = {0, std::uint64_t{1} << 40},
     .help = "PyTorch backend: a collective whose buffers hold at most this many bytes runs to "
             "completion on the calling thread (its work handle is complete when returned) "
             "instead of in the background; torch waits on it at once anyway, and the hand-off "
             "between threads costs more than a small call. 0: every call in the background."});

const AutoSetting<kind::Bool> kTorchSplit(
    {.name = "COLLX_TORCH_SPLIT",
     .component = "torch",
     .automatic = "split, unless the split found no shared-memory slot for a group within a host",
     .help = "PyTorch backend: whether a sub-group (new_group, a DeviceMesh dimension) whose "
             "default group is collx's is a split of the default group's context, over its "
             "connections and shared memory with no rendezvous of its own (Context::split), or "
             "joins through the store and connects afresh. A split costs less to make and opens "
             "no descriptor; within a host it has a shared-memory group of its own unless a "
             "member already has 8 (then automatic gives it a context of its own, whose "
             "shared-memory algorithms are 2-5x faster than the point-to-point ones)."});

const Setting<kind::Bool> kSplitSharedMemory(
    {.name = "COLLX_SPLIT_SHM",
     .component = "core",
     .defaultValue = true,
     .help = "Whether a split (Context::split) whose ranks all share memory gets a shared-memory "
             "group of its own, in a slot of its members' shared memory (8 per rank at once), "
             "so that the shared-memory algorithms (shm) run in it. 0: its collectives take the "
             "point-to-point algorithms over the shared connections. Every member must agree."});

void warnUnknownVariables() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& unknown : Config::process().unknownVariables()) {
      COLLX_WARN(kCore, "environment variable {} is not a collx variable; ignored", unknown);
    }
  });
}

}  // namespace collx
