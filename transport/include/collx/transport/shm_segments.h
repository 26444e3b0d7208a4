// Leftovers of the shared-memory transport's POSIX arenas (COLLX_SHM_ARENA=posix).
//
// A named arena is unlinked as soon as every peer has mapped it, and on every exit path a
// destructor sees; only a rank killed between creating its arena and its peers mapping it
// leaves /dev/shm/collx-<pidns>-<pid>-r<rank>-<token> behind. Such names are harmless to
// later jobs (each holds a random token, created with O_EXCL), and they are removed by
// collx-run for its own ranks once they exited, and by any later collx-run or context on
// the host once their owner's pid no longer exists (in this PID namespace). The default
// memfd arenas never leave anything behind.
#pragma once

#include <string>
#include <vector>

namespace collx::transport {

// Removes the arenas left by the given (exited) processes of this PID namespace; with an
// empty list, those whose owner no longer exists. Returns the paths removed. Never throws.
std::vector<std::string> removeShmLeftovers(const std::vector<int>& exitedPids = {}) noexcept;

// The directory POSIX shared memory lives in (/dev/shm) and the prefix of collx's names
// there, for tests and tools.
inline constexpr const char* kShmDirectory = "/dev/shm";
inline constexpr const char* kShmPrefix = "collx-";

}  // namespace collx::transport
