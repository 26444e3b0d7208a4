#include "faults.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collx/base/config.h"
#include "collx/base/log.h"
#include "collx/base/setting.h"

namespace collx {

const AutoSetting<kind::String> kFault(
    {.name = "COLLX_FAULT",
     .component = "recovery",
     .automatic = "none: no fault is injected",
     .help = "Fault injection, for tests and trials: POINT:ACTION[:RANK] entries, comma "
             "separated. POINT: revoke, agree.entered, agree.decided, regroup.planned, "
             "regroup.reformed, regroup.met, regroup.connected (inside shrink, grow and "
             "reform), "
             "join.ticket, join.connected (a newcomer's). ACTION: kill (SIGKILL), stop "
             "(SIGSTOP), sleep=MS. RANK: the context's rank there (a newcomer: new); "
             "default every rank. Each entry fires once per process."});

namespace detail {

namespace {

struct Fault {
  std::string point;
  std::string action;
  int rank = -2;  // -2: any; -1: a newcomer
  bool fired = false;
};

std::vector<Fault> parseFaults(const std::string& text) {
  std::vector<Fault> out;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(at, end - at);
    at = end + 1;
    const std::size_t a = entry.find(':');
    if (a == std::string::npos) {
      COLLX_WARN(kCore, "COLLX_FAULT: '{}' is not POINT:ACTION[:RANK]; ignored", entry);
      continue;
    }
    Fault f;
    f.point = entry.substr(0, a);
    const std::size_t b = entry.find(':', a + 1);
    f.action = entry.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
    if (b != std::string::npos) {
      const std::string rank = entry.substr(b + 1);
      f.rank = rank == "new" ? -1 : std::atoi(rank.c_str());
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace

void faultAt(const char* point, int rank) {
  static std::vector<Fault> faults = parseFaults(kFault.get(Config::process()).value_or(""));
  if (faults.empty()) return;
  static std::mutex mutex;
  std::unique_lock<std::mutex> lock(mutex);
  for (Fault& f : faults) {
    if (f.fired || f.point != point || (f.rank != -2 && f.rank != rank)) continue;
    f.fired = true;
    lock.unlock();  // (a sleep holds up no other thread's point)
    COLLX_WARN(kCore, "rank {}: COLLX_FAULT: {} at {}", rank, f.action, f.point);
    if (f.action == "kill") {
      ::raise(SIGKILL);
    } else if (f.action == "stop") {
      ::raise(SIGSTOP);
    } else if (f.action.rfind("sleep=", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(f.action.c_str() + 6)));
    } else {
      COLLX_WARN(kCore, "COLLX_FAULT: unknown action '{}' (kill, stop, sleep=MS)", f.action);
    }
    return;
  }
}

}  // namespace detail
}  // namespace collx
