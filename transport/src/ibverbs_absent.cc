// describeIbverbs() of a build without libibverbs-dev (the real one is in ibverbs/ib_port.cc).
#include "collx/transport/ibverbs_info.h"

namespace collx::transport {

std::string describeIbverbs(const MeshOptions&) {
  return "not built: libibverbs-dev (rdma-core's <infiniband/verbs.h>) was not found when this "
         "collx was built, so ibverbs is never offered; install it and build again\n";
}

}  // namespace collx::transport
