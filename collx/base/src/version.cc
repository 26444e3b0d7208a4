#include "collx/base/version.h"

#include "collx_build_config.h"

namespace collx {

const char* versionString() noexcept { return COLLX_VERSION_STRING; }

const std::vector<BuildFeature>& buildFeatures() {
  static const std::vector<BuildFeature> kFeatures = {
      {"self transport", true, "always built (a rank to itself)"},
      {"tcp transport", true, "always built (Asio to connect, raw sockets for data)"},
      {"shm transport", true,
       "always built (memfd or /dev/shm arenas, process_vm_readv single copy, ring-copy "
       "fallback)"},
      {"hash store (in process)", true, "always built"},
      {"file store", true, "always built"},
      {"tcp store (server and client)", true, "always built (standalone Asio)"},
      {"redis store", COLLX_HAVE_REDIS != 0, COLLX_REDIS_TEXT},
      {"MPI bootstrap", COLLX_HAVE_MPI != 0, COLLX_MPI_TEXT},
      {"PMIx bootstrap and store", COLLX_HAVE_PMIX != 0, COLLX_PMIX_TEXT},
      {"ibverbs transport", COLLX_HAVE_IBVERBS != 0, COLLX_IBVERBS_TEXT},
      {"python module", COLLX_HAVE_PYTHON != 0, COLLX_PYTHON_TEXT},
      {"pytorch backend", COLLX_HAVE_TORCH != 0, COLLX_TORCH_TEXT},
  };
  return kFeatures;
}

}  // namespace collx
