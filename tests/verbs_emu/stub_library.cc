// A library that looks like a libibverbs but lacks most entry points: collx's loader must
// refuse it with a sentence naming the first missing one (verbs_api_test).
#include <cerrno>
#include <cstddef>

extern "C" {

struct ibv_device;

ibv_device** ibv_get_device_list(int* count) {
  if (count != nullptr) *count = 0;
  errno = ENOSYS;
  return nullptr;
}

void ibv_free_device_list(ibv_device** list) { (void)list; }

}  // extern "C"
