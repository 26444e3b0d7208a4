// What collx-info shows of RDMA verbs on this machine. A function of its own so that the
// tools see none of the verbs headers (src/ibverbs/ib_port.h has the details).
#pragma once

#include <string>

namespace collx::transport {

struct MeshOptions;

// collx-info's "RDMA verbs" section, lines ending in '\n': the settings in `options`
// (ibverbsLibrary, ibHca, ibGidIndex), the verbs library loaded or why none could be, every
// device and port (state, link layer, MTU, LID, GIDs with their types), and the port collx
// would use, or why ibverbs is not usable here. In a build without libibverbs-dev, says
// that. Never throws; loads the library and opens each device briefly (closed on return).
std::string describeIbverbs(const MeshOptions& options);

}  // namespace collx::transport
