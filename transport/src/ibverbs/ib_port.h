// Which verbs port a rank uses (COLLX_IB_HCA, COLLX_IB_GID_INDEX), and what collx-info shows
// of every device and port here (internal).
//
// A port is usable when it is ACTIVE and has an address peers can reach: a LID on InfiniBand,
// a RoCE v2 GID of an IPv4 or IPv6 address on Ethernet (RoCE v1 GIDs and link-local ones are
// skipped unless COLLX_IB_GID_INDEX names one). The GID type comes from sysfs
// (/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>) where the library's
// devices are kernel devices; where sysfs has no entry for the device (a userspace device
// such as tests/verbs_emu), a GID of an IPv4-mapped or global IPv6 address counts as RoCE v2.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ibverbs/verbs_api.h"

namespace collx::transport::ibverbs {

struct GidInfo {
  int index = 0;
  ibv_gid gid{};
  std::string type;  // "RoCE v2", "IB/RoCE v1", or "" when unknown
  std::string text;  // "fe80::...", "::ffff:10.0.0.1"
};

struct PortInfo {
  std::string device;   // ibv_get_device_name
  int deviceIndex = 0;  // in the library's device list
  std::uint8_t port = 1;
  ibv_port_state state = IBV_PORT_NOP;
  std::uint8_t linkLayer = IBV_LINK_LAYER_UNSPECIFIED;  // IBV_LINK_LAYER_INFINIBAND / _ETHERNET
  ibv_mtu activeMtu = IBV_MTU_1024;
  std::uint16_t lid = 0;
  std::uint32_t maxMessage = 0;  // max_msg_sz
  std::vector<GidInfo> gids;     // the non-zero entries of the GID table
  std::string error;             // why the port could not be queried ("" when it could)
};

// COLLX_IB_HCA, as NCCL_IB_HCA: a comma-separated list of device names, each optionally with
// ":port"; a name matches devices whose name starts with it, unless the list starts with '='
// (exact names); a list starting with '^' excludes what it names instead. Empty: every port.
struct HcaFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::pair<std::string, int>> entries;  // (name, port); port 0: any port
  std::string spec;                                  // the text parsed (trimmed), for messages

  // Throws InvalidArgument naming COLLX_IB_HCA and the bad part (an empty name, a port that
  // is not a number in 1..255).
  static HcaFilter parse(std::string_view spec);
  bool allows(const std::string& device, int port) const;
};

// Every port of every device of `library`, in the library's order (each device is opened and
// closed again). A device that cannot be opened yields one entry with its error (and port 0:
// the device as a whole). A library whose device list fails yields nothing: probeVerbs()
// says why. Never throws for what the library reports.
std::vector<PortInfo> listPorts(const std::shared_ptr<const VerbsLibrary>& library);

struct PortChoice {
  int deviceIndex = 0;
  std::string device;
  std::uint8_t port = 1;
  std::uint8_t linkLayer = IBV_LINK_LAYER_INFINIBAND;
  ibv_mtu activeMtu = IBV_MTU_1024;
  std::uint16_t lid = 0;
  std::uint32_t maxMessage = 0;
  int gidIndex = -1;  // -1: InfiniBand addressed by LID (no GRH)
  ibv_gid gid{};
  std::string gidType;  // GidInfo::type of gidIndex ("" when none or unknown)

  // "mlx5_0:1 (RoCE v2 GID 3 ::ffff:10.0.0.1, MTU 1024)": for logs and describe().
  std::string describe() const;
};

// The first port that `filter` allows and that is usable, with its GID: `gidIndex` when
// given (it must exist on the port), else the first RoCE v2 GID of an IPv4 address, else of
// an IPv6 one (Ethernet), or none (InfiniBand). Throws Unsupported with a sentence that says
// why no port qualifies (none listed, all excluded by COLLX_IB_HCA, each one's reason).
PortChoice choosePort(const std::vector<PortInfo>& ports, const HcaFilter& filter,
                      std::optional<int> gidIndex);

// The type of GID `index` of `device`:`port` ("RoCE v2", "IB/RoCE v1", or "" when unknown):
// the word in <classDir>/<device>/ports/<port>/gid_attrs/types/<index> when that file can
// be read; for a device that <classDir> does not list (a userspace device), "RoCE v2" when
// `gid` is an IPv4-mapped or global IPv6 address, else "". classDir: /sys/class/infiniband
// (tests pass a tree of their own).
std::string gidType(const std::string& classDir, const std::string& device, int port, int index,
                    const ibv_gid& gid);

// collx-info's section on RDMA verbs: the library loaded (or why none), every device and port
// (state, link layer, MTU, LID, GIDs with their types), the port collx would use with the
// given settings, or why ibverbs is not usable here. Never throws.
std::string describeVerbs(const std::string& libraryPath, std::string_view hcaSpec,
                          std::optional<int> gidIndex);

}  // namespace collx::transport::ibverbs
