#include "faults.h"

#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
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
             "join.ticket, join.connected (a newcomer's); and a collective's step: "
             "COLL.stepS (the first call of COLL, e.g. allreduce, or of any, to post a "
             "transfer of step S; a shared-memory algorithm's call has one step, 0), "
             "COLL.seqQ.stepS (among its calls of sequence number Q and later), COLL.seqQ (at "
             "the first transfer of such a call, whatever its step). ACTION: kill "
             "(SIGKILL), stop (SIGSTOP), sleep=MS, cut=IFNAME (takes that network interface "
             "down: its host's link cut, no FIN, no RST; for network-namespace hosts in "
             "tests, it needs CAP_NET_ADMIN and is never undone by collx). RANK: the context's "
             "rank there (a "
             "newcomer: new; at a step, the rank the process had when the job formed, or the "
             "place a newcomer took); default every rank. Each entry fires once per "
             "process."});

namespace detail {

namespace {

struct Fault {
  std::string point;
  std::string action;
  int rank = -2;  // -2: any; -1: a newcomer
  bool fired = false;
  // A collective's step (point COLL[.seqQ][.stepS]): its collective ("any": every one), the
  // least sequence number and the step (anyStep: none named, the call's first transfer).
  bool isStep = false;
  std::string collective;
  std::uint64_t seq = 0;
  bool anyStep = false;
  std::uint32_t step = 0;
};

// "digits" -> its value; anything else -> nothing.
std::optional<std::uint64_t> number(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoull(text);
}

// "allreduce.step3", "any.seq20.step0", "allreduce.seq50" (its first transfer, whatever its
// step): fills f's step fields; false when `point` is none of these.
bool parseStep(const std::string& point, Fault& f) {
  std::string collective = point;
  std::optional<std::uint64_t> step, seq;
  if (const std::size_t at = collective.rfind(".step"); at != std::string::npos && at > 0) {
    step = number(collective.substr(at + 5));
    if (!step) return false;
    collective.resize(at);
  }
  if (const std::size_t at = collective.rfind(".seq"); at != std::string::npos && at > 0) {
    seq = number(collective.substr(at + 4));
    if (!seq) return false;
    collective.resize(at);
  }
  if (!step && !seq) return false;
  f.isStep = true;
  f.collective = collective;
  f.seq = seq.value_or(0);
  f.anyStep = !step;
  f.step = static_cast<std::uint32_t>(step.value_or(0));
  return true;
}

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
    parseStep(f.point, f);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Fault>& faults() {
  static std::vector<Fault> all = parseFaults(kFault.get(Config::process()).value_or(""));
  return all;
}

std::mutex& faultsMutex() {
  static std::mutex mutex;
  return mutex;
}

// Takes interface `name` down (cut=IFNAME); false, with why, when it cannot.
bool takeDown(const std::string& name, std::string& why) {
  if (name.empty() || name.size() >= IFNAMSIZ) {
    why = "no interface name of 1 to " + std::to_string(IFNAMSIZ - 1) + " characters";
    return false;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  ifreq request{};
  std::memcpy(request.ifr_name, name.data(), name.size());
  bool ok = ::ioctl(fd, SIOCGIFFLAGS, &request) == 0;
  if (ok) {
    request.ifr_flags = static_cast<short>(request.ifr_flags & ~IFF_UP);
    ok = ::ioctl(fd, SIOCSIFFLAGS, &request) == 0;
  }
  if (!ok) why = std::strerror(errno);
  ::close(fd);
  return ok;
}

// Fires the first entry not fired yet that `matches`, if any; `where()` names the point.
template <typename Matches, typename Where>
void fire(int rank, Where where, Matches matches) {
  std::unique_lock<std::mutex> lock(faultsMutex());
  for (Fault& f : faults()) {
    if (f.fired || (f.rank != -2 && f.rank != rank) || !matches(f)) continue;
    f.fired = true;
    lock.unlock();  // (a sleep holds up no other thread's point)
    COLLX_WARN(kCore, "rank {}: COLLX_FAULT: {} at {}", rank, f.action, where(f));
    if (f.action == "kill") {
      ::raise(SIGKILL);
    } else if (f.action == "stop") {
      ::raise(SIGSTOP);
    } else if (f.action.rfind("sleep=", 0) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(f.action.c_str() + 6)));
    } else if (f.action.rfind("cut=", 0) == 0) {
      std::string why;
      if (!takeDown(f.action.substr(4), why)) {
        COLLX_WARN(kCore, "rank {}: COLLX_FAULT: cannot take interface '{}' down: {}", rank,
                   f.action.substr(4), why);
      }
    } else {
      COLLX_WARN(kCore, "COLLX_FAULT: unknown action '{}' (kill, stop, sleep=MS, cut=IFNAME)",
                 f.action);
    }
    return;
  }
}

}  // namespace

void faultAt(const char* point, int rank) {
  if (faults().empty()) return;
  fire(
      rank, [&](const Fault& f) { return f.point; },
      [&](const Fault& f) { return !f.isStep && f.point == point; });
}

std::function<void(int, const algorithms::CallInfo&, std::uint32_t)> stepFaults() {
  bool any = false;
  for (const Fault& f : faults()) any = any || f.isStep;
  if (!any) return {};
  return [](int rank, const algorithms::CallInfo& call, std::uint32_t step) {
    // (The library's own exchanges, generation -1, are not the user's collectives.)
    if (call.generation < 0 || call.algorithm == nullptr) return;
    const auto where = [&](const Fault& f) {
      return f.point + " (" + algorithms::callName(call) + ")";
    };
    fire(rank, where, [&](const Fault& f) {
      return f.isStep && (f.anyStep || f.step == step) && call.key.seq >= f.seq &&
             (f.collective == "any" || f.collective == call.collective);
    });
  };
}

}  // namespace detail
}  // namespace collx
