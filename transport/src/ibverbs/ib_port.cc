#include "ibverbs/ib_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "collx/base/error.h"
#include "collx/base/units.h"
#include "collx/transport/ibverbs_info.h"
#include "collx/transport/options.h"

namespace collx::transport::ibverbs {
namespace {

constexpr const char* kClassDir = "/sys/class/infiniband";
constexpr const char* kRoceV2 = "RoCE v2";

std::string trimmed(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const std::size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(kSpace) - first + 1));
}

// Setting errors read as the configuration table's own: "COLLX_X='value': what is wrong".
[[noreturn]] void badHca(const std::string& spec, const std::string& what) {
  throw InvalidArgument(Where{-1, "config", -1},
                        "COLLX_IB_HCA='" + spec + "': " + what +
                            "; expected device names with an optional ':port', comma-separated, "
                            "e.g. 'mlx5_0:1', 'mlx5_0,mlx5_1', '=mlx5_0' or '^mlx5_2'");
}

in6_addr addressOf(const ibv_gid& gid) {
  in6_addr address;
  static_assert(sizeof address == sizeof gid.raw);
  std::memcpy(&address, gid.raw, sizeof address);
  return address;
}

bool ipv4Mapped(const ibv_gid& gid) {
  const in6_addr address = addressOf(gid);
  return IN6_IS_ADDR_V4MAPPED(&address);
}

// An IPv6 address a RoCE v2 packet can be routed to: not link-local (the default GID every
// RoCE port has, derived from its MAC), loopback, multicast or unspecified.
bool globalIpv6(const ibv_gid& gid) {
  const in6_addr a = addressOf(gid);
  return !IN6_IS_ADDR_UNSPECIFIED(&a) && !IN6_IS_ADDR_LOOPBACK(&a) && !IN6_IS_ADDR_LINKLOCAL(&a) &&
         !IN6_IS_ADDR_MULTICAST(&a) && !IN6_IS_ADDR_V4MAPPED(&a) && !IN6_IS_ADDR_V4COMPAT(&a);
}

bool isZero(const ibv_gid& gid) {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](std::uint8_t b) { return b == 0; });
}

std::string gidText(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.raw, text, sizeof text) == nullptr) return "?";
  return text;
}

std::string errorText(int error) {
  return std::system_category().message(error) + " (errno " + std::to_string(error) + ")";
}

// libibverbs' query functions return an errno value; some libraries return -1 and set errno.
int failure(int rc) { return rc > 0 ? rc : (errno != 0 ? errno : EIO); }

const char* stateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "unknown state";
}

// Drivers from before RoCE report no link layer: theirs is InfiniBand.
bool infiniband(std::uint8_t linkLayer) {
  return linkLayer == IBV_LINK_LAYER_INFINIBAND || linkLayer == IBV_LINK_LAYER_UNSPECIFIED;
}

std::string linkLayerName(std::uint8_t linkLayer) {
  switch (linkLayer) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    case IBV_LINK_LAYER_UNSPECIFIED:
      return "InfiniBand (link layer unspecified)";
    default:
      return "link layer " + std::to_string(linkLayer);
  }
}

std::string mtuText(ibv_mtu mtu) {
  if (mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096) return std::to_string(128 << mtu);
  return "unknown (" + std::to_string(static_cast<int>(mtu)) + ")";
}

std::string portLabel(const PortInfo& port) {
  return port.port == 0 ? port.device : port.device + ":" + std::to_string(port.port);
}

std::string gidList(const std::vector<GidInfo>& gids) {
  std::string out;
  for (const GidInfo& gid : gids) {
    if (!out.empty()) out += ", ";
    out += std::to_string(gid.index) + " " + gid.text + " (" +
           (gid.type.empty() ? "type unknown" : gid.type) + ")";
  }
  return out;
}

void takeGid(PortChoice& choice, const GidInfo& gid) {
  choice.gidIndex = gid.index;
  choice.gid = gid.gid;
  choice.gidType = gid.type;
}

// The choice `port` offers, or nullopt with the reason (a phrase after the port's name) in
// `*why`.
std::optional<PortChoice> tryPort(const PortInfo& port, std::optional<int> gidIndex,
                                  std::string* why) {
  if (!port.error.empty()) {
    *why = port.error;
    return std::nullopt;
  }
  if (port.state != IBV_PORT_ACTIVE) {
    *why = std::string("is ") + stateName(port.state) + ", not ACTIVE";
    return std::nullopt;
  }
  const bool ib = infiniband(port.linkLayer);
  if (!ib && port.linkLayer != IBV_LINK_LAYER_ETHERNET) {
    *why = "has " + linkLayerName(port.linkLayer) + ", neither InfiniBand nor Ethernet";
    return std::nullopt;
  }
  if (ib && port.lid == 0) {
    *why = "is InfiniBand without a LID (no subnet manager has assigned one)";
    return std::nullopt;
  }
  PortChoice choice;
  choice.deviceIndex = port.deviceIndex;
  choice.device = port.device;
  choice.port = port.port;
  choice.linkLayer = ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  choice.activeMtu = port.activeMtu;
  choice.lid = port.lid;
  choice.maxMessage = port.maxMessage;
  const std::string gids =
      port.gids.empty() ? "its GID table is empty" : "its GIDs: " + gidList(port.gids);
  if (gidIndex.has_value()) {
    const auto named = std::find_if(port.gids.begin(), port.gids.end(),
                                    [&](const GidInfo& gid) { return gid.index == *gidIndex; });
    if (named == port.gids.end()) {
      *why = "has no GID " + std::to_string(*gidIndex) + " (COLLX_IB_GID_INDEX; " + gids + ")";
      return std::nullopt;
    }
    takeGid(choice, *named);
    return choice;
  }
  if (ib) return choice;  // addressed by its LID
  // RoCE: a routable address, IPv4 first (what RoCE v2 deployments use; an IPv6 GID of the
  // same port usually exists too).
  for (bool (*wanted)(const ibv_gid&) : {ipv4Mapped, globalIpv6}) {
    for (const GidInfo& gid : port.gids) {
      if (gid.type == kRoceV2 && wanted(gid.gid)) {
        takeGid(choice, gid);
        return choice;
      }
    }
  }
  *why = "has no RoCE v2 GID of an IPv4 or global IPv6 address (" + gids +
         "; COLLX_IB_GID_INDEX picks one)";
  return std::nullopt;
}

}  // namespace

HcaFilter HcaFilter::parse(std::string_view text) {
  HcaFilter filter;
  filter.spec = trimmed(text);
  std::string_view rest = filter.spec;
  if (rest.empty()) return filter;
  if (rest.front() == '^') {
    filter.exclude = true;
    rest.remove_prefix(1);
  }
  if (!rest.empty() && rest.front() == '=') {
    filter.exact = true;
    rest.remove_prefix(1);
  }
  for (;;) {
    const std::size_t comma = rest.find(',');
    const std::string entry = trimmed(rest.substr(0, comma));
    const std::size_t colon = entry.find(':');
    const std::string name = trimmed(std::string_view(entry).substr(0, colon));
    if (name.empty()) {
      badHca(filter.spec,
             entry.empty() ? "an empty device name" : "no device name in '" + entry + "'");
    }
    int port = 0;
    if (colon != std::string::npos) {
      const std::string number = trimmed(std::string_view(entry).substr(colon + 1));
      const char* end = number.data() + number.size();
      const auto [last, error] = std::from_chars(number.data(), end, port);
      if (number.empty() || number.front() == '-' || error != std::errc() || last != end ||
          port < 1 || port > 255) {
        badHca(filter.spec, "the port '" + number + "' of " + name + " is not a number in 1..255");
      }
    }
    filter.entries.emplace_back(name, port);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return filter;
}

bool HcaFilter::allows(const std::string& device, int port) const {
  if (entries.empty()) return true;
  const bool listed = std::any_of(entries.begin(), entries.end(), [&](const auto& entry) {
    const bool nameMatches = exact ? device == entry.first : device.rfind(entry.first, 0) == 0;
    return nameMatches && (entry.second == 0 || entry.second == port);
  });
  return listed != exclude;
}

std::string gidType(const std::string& classDir, const std::string& device, int port, int index,
                    const ibv_gid& gid) {
  namespace fs = std::filesystem;
  const fs::path deviceDir = fs::path(classDir) / device;
  std::error_code error;
  if (fs::exists(deviceDir, error)) {
    // A kernel device: its word, or unknown (a kernel without gid_attrs, or an entry that
    // emptied since it was read: reading it fails with EINVAL).
    std::ifstream in(deviceDir / "ports" / std::to_string(port) / "gid_attrs" / "types" /
                     std::to_string(index));
    std::string word;
    if (in && std::getline(in, word)) return trimmed(word);
    return "";
  }
  return ipv4Mapped(gid) || globalIpv6(gid) ? kRoceV2 : "";
}

std::vector<PortInfo> listPorts(const std::shared_ptr<const VerbsLibrary>& library) {
  std::vector<PortInfo> ports;
  const VerbsApi& api = library->api();
  const DeviceList list(library);
  for (int i = 0; i < list.size(); ++i) {
    PortInfo device;
    device.device = list.name(i);
    device.deviceIndex = i;
    device.port = 0;
    errno = 0;
    Context context(library, api.openDevice(list[i]), api.closeDevice, "context");
    if (!context) {
      device.error = "cannot be opened: " + errorText(failure(-1));
      ports.push_back(std::move(device));
      continue;
    }
    ibv_device_attr attr{};
    errno = 0;
    if (const int rc = api.queryDevice(context.get(), &attr); rc != 0) {
      device.error = "ibv_query_device failed: " + errorText(failure(rc));
      ports.push_back(std::move(device));
      continue;
    }
    for (int n = 1; n <= attr.phys_port_cnt; ++n) {
      PortInfo port = device;
      port.port = static_cast<std::uint8_t>(n);
      ibv_port_attr portAttr{};
      errno = 0;
      if (const int rc = api.queryPort(context.get(), port.port, &portAttr); rc != 0) {
        port.error = "ibv_query_port failed: " + errorText(failure(rc));
        ports.push_back(std::move(port));
        continue;
      }
      port.state = portAttr.state;
      port.linkLayer = portAttr.link_layer;
      port.activeMtu = portAttr.active_mtu;
      port.lid = portAttr.lid;
      port.maxMessage = portAttr.max_msg_sz;
      for (int index = 0; index < portAttr.gid_tbl_len; ++index) {
        GidInfo gid;
        gid.index = index;
        // An empty entry: zeros, or (rdma-core's newer query through the kernel) an error.
        if (api.queryGid(context.get(), port.port, index, &gid.gid) != 0 || isZero(gid.gid)) {
          continue;
        }
        gid.type = gidType(kClassDir, port.device, port.port, index, gid.gid);
        gid.text = gidText(gid.gid);
        port.gids.push_back(std::move(gid));
      }
      ports.push_back(std::move(port));
    }
  }
  return ports;
}

std::string PortChoice::describe() const {
  std::string out = device + ":" + std::to_string(port) + " (";
  if (linkLayer == IBV_LINK_LAYER_ETHERNET) {
    out += (gidType.empty() ? std::string("RoCE") : gidType) + " GID " + std::to_string(gidIndex) +
           " " + gidText(gid);
  } else {
    out += "InfiniBand LID " + std::to_string(lid);
    if (gidIndex >= 0) out += ", GID " + std::to_string(gidIndex) + " " + gidText(gid);
  }
  return out + ", MTU " + mtuText(activeMtu) + ")";
}

PortChoice choosePort(const std::vector<PortInfo>& ports, const HcaFilter& filter,
                      std::optional<int> gidIndex) {
  const Where where{-1, "ibverbs port", -1};
  if (ports.empty()) {
    throw Unsupported(where, "no RDMA port qualifies: the verbs library lists no device port");
  }
  std::string reasons;
  std::string filtered;
  bool anyAllowed = false;
  const std::string hca = "COLLX_IB_HCA='" + filter.spec + "'";
  for (const PortInfo& port : ports) {
    std::string why;
    if (!filter.allows(port.device, port.port)) {
      why = filter.exclude ? "is excluded by " + hca : "is not selected by " + hca;
      filtered += (filtered.empty() ? "" : ", ") + portLabel(port);
    } else {
      anyAllowed = true;
      if (std::optional<PortChoice> choice = tryPort(port, gidIndex, &why)) return *choice;
    }
    reasons += (reasons.empty() ? "" : "; ") + portLabel(port) + " " + why;
  }
  if (!anyAllowed) {
    throw Unsupported(where, "no RDMA port qualifies: " + hca + " allows none of the ports here (" +
                                 filtered + ")");
  }
  throw Unsupported(where, "no RDMA port qualifies: " + reasons);
}

std::string describeVerbs(const std::string& libraryPath, std::string_view hcaSpec,
                          std::optional<int> gidIndex) {
  std::string out;
  try {
    out +=
        "settings: COLLX_IBVERBS_LIBRARY " +
        (libraryPath.empty() ? std::string("unset (") + VerbsLibrary::kDefaultName + ")"
                             : "'" + libraryPath + "'") +
        ", COLLX_IB_HCA " +
        (hcaSpec.empty() ? std::string("unset (every port)") : "'" + std::string(hcaSpec) + "'") +
        ", COLLX_IB_GID_INDEX " +
        (gidIndex.has_value() ? std::to_string(*gidIndex) : std::string("unset (chosen)")) + "\n";
    const VerbsProbe probe = probeVerbs(libraryPath);
    if (probe.library == nullptr) {
      return out + "library: none\nibverbs is not usable here: " + probe.unavailable + "\n";
    }
    out += "library: " + probe.library->name() + "\n";
    if (!probe.usable()) return out + "ibverbs is not usable here: " + probe.unavailable + "\n";
    const std::vector<PortInfo> ports = listPorts(probe.library);
    for (const PortInfo& port : ports) {
      out += "device " + portLabel(port) + ": ";
      if (!port.error.empty()) {
        out += port.error + "\n";
        continue;
      }
      out += std::string(stateName(port.state)) + ", " + linkLayerName(port.linkLayer) + ", MTU " +
             mtuText(port.activeMtu);
      if (infiniband(port.linkLayer)) out += ", LID " + std::to_string(port.lid);
      if (port.maxMessage != 0) out += ", messages up to " + formatBytes(port.maxMessage);
      out += port.gids.empty() ? ", no GID\n" : "\n";
      for (const GidInfo& gid : port.gids) {
        out += "  GID " + std::to_string(gid.index) + " " + gid.text + " (" +
               (gid.type.empty() ? "type unknown" : gid.type) + ")\n";
      }
    }
    try {
      const PortChoice choice = choosePort(ports, HcaFilter::parse(hcaSpec), gidIndex);
      out += "collx would use " + choice.describe() + "\n";
    } catch (const Error& e) {
      out += "ibverbs is not usable here: " + e.detail() + "\n";
    }
  } catch (const std::exception& e) {
    out += "(describing RDMA verbs failed: " + std::string(e.what()) + ")\n";
  } catch (...) {
    out += "(describing RDMA verbs failed: an unknown exception)\n";
  }
  return out;
}

}  // namespace collx::transport::ibverbs

namespace collx::transport {

std::string describeIbverbs(const MeshOptions& options) {
  return ibverbs::describeVerbs(options.ib.library, options.ib.hca, options.ib.gidIndex);
}

}  // namespace collx::transport
