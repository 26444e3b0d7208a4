// Which verbs port a rank uses (transport/src/ibverbs/ib_port.h): COLLX_IB_HCA's syntax, the
// ports of the userspace verbs device (verbs_emu/), the choice over hand-made port lists for
// what that device cannot show (InfiniBand, ports DOWN, RoCE v1, several devices), and the
// text collx-info prints, over the device, a missing library and the real libibverbs here.
#include "ibverbs/ib_port.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "collx/base/error.h"
#include "util/test_util.h"

namespace collx::transport::ibverbs {
namespace {

using test::ScopedEnv;

// ---- COLLX_IB_HCA ---------------------------------------------------------------------------

TEST(HcaFilter, EmptyAllowsEveryPort) {
  for (const char* spec : {"", "  "}) {
    const HcaFilter filter = HcaFilter::parse(spec);
    EXPECT_TRUE(filter.entries.empty()) << spec;
    EXPECT_FALSE(filter.exclude);
    EXPECT_TRUE(filter.allows("mlx5_0", 1));
    EXPECT_TRUE(filter.allows("emu0", 2));
  }
}

TEST(HcaFilter, NamesMatchAsPrefixesWithOptionalPorts) {
  const HcaFilter filter = HcaFilter::parse(" mlx5_0:1, mlx5_1 ");
  EXPECT_FALSE(filter.exclude);
  EXPECT_FALSE(filter.exact);
  ASSERT_EQ(filter.entries.size(), 2u);
  EXPECT_EQ(filter.entries[0], std::make_pair(std::string("mlx5_0"), 1));
  EXPECT_EQ(filter.entries[1], std::make_pair(std::string("mlx5_1"), 0));
  EXPECT_EQ(filter.spec, "mlx5_0:1, mlx5_1");
  EXPECT_TRUE(filter.allows("mlx5_0", 1));
  EXPECT_FALSE(filter.allows("mlx5_0", 2));  // only port 1 of mlx5_0
  EXPECT_TRUE(filter.allows("mlx5_1", 2));   // every port of mlx5_1
  EXPECT_TRUE(filter.allows("mlx5_10", 1));  // a prefix, as NCCL_IB_HCA
  EXPECT_FALSE(filter.allows("mlx4_0", 1));
}

TEST(HcaFilter, EqualsSignMeansExactNames) {
  const HcaFilter filter = HcaFilter::parse("=mlx5_1");
  EXPECT_TRUE(filter.exact);
  EXPECT_TRUE(filter.allows("mlx5_1", 1));
  EXPECT_FALSE(filter.allows("mlx5_10", 1));
  EXPECT_FALSE(filter.allows("mlx5_", 1));
}

TEST(HcaFilter, CaretExcludes) {
  const HcaFilter port = HcaFilter::parse("^mlx5_0:1");
  EXPECT_TRUE(port.exclude);
  EXPECT_FALSE(port.allows("mlx5_0", 1));
  EXPECT_TRUE(port.allows("mlx5_0", 2));
  EXPECT_TRUE(port.allows("mlx5_1", 1));

  const HcaFilter exact = HcaFilter::parse("^=mlx5_1,mlx5_2");
  EXPECT_TRUE(exact.exclude);
  EXPECT_TRUE(exact.exact);
  EXPECT_FALSE(exact.allows("mlx5_1", 1));
  EXPECT_FALSE(exact.allows("mlx5_2", 3));
  EXPECT_TRUE(exact.allows("mlx5_10", 1));
  EXPECT_TRUE(exact.allows("mlx5_0", 1));
}

TEST(HcaFilter, BadSpecsAreInvalidArgumentsNamingTheSetting) {
  const std::pair<const char*, const char*> bad[] = {
      {",", "an empty device name"},
      {"mlx5_0,", "an empty device name"},
      {"mlx5_0,,mlx5_1", "an empty device name"},
      {"^", "an empty device name"},
      {"=", "an empty device name"},
      {"^=", "an empty device name"},
      {":1", "no device name in ':1'"},
      {"mlx5_0:", "the port '' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:0", "the port '0' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:256", "the port '256' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:x", "the port 'x' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:-1", "the port '-1' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:+1", "the port '+1' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:1:2", "the port '1:2' of mlx5_0 is not a number in 1..255"},
      {"mlx5_0:99999999999", "is not a number in 1..255"},
  };
  for (const auto& [spec, why] : bad) {
    try {
      HcaFilter::parse(spec);
      ADD_FAILURE() << "'" << spec << "' was accepted";
    } catch (const InvalidArgument& e) {
      const std::string detail = e.detail();
      EXPECT_EQ(detail.rfind("COLLX_IB_HCA='" + std::string(spec) + "': ", 0), 0u) << detail;
      EXPECT_NE(detail.find(why), std::string::npos) << detail;
      EXPECT_NE(detail.find("expected"), std::string::npos) << detail;
    }
  }
}

// ---- GID types ------------------------------------------------------------------------------

ibv_gid gidOf(const char* text) {
  ibv_gid gid{};
  EXPECT_EQ(inet_pton(AF_INET6, text, gid.raw), 1) << text;
  return gid;
}

TEST(GidType, KernelDevicesSayItInSysfs) {
  const test::TempDir dir;
  const std::string& root = dir.path();
  const std::filesystem::path types =
      std::filesystem::path(root) / "mlx5_0" / "ports" / "1" / "gid_attrs" / "types";
  std::filesystem::create_directories(types);
  std::ofstream(types / "0") << "IB/RoCE v1\n";
  std::ofstream(types / "1") << "RoCE v2\n";
  const ibv_gid mapped = gidOf("::ffff:10.0.0.1");
  EXPECT_EQ(gidType(root, "mlx5_0", 1, 0, mapped), "IB/RoCE v1");
  EXPECT_EQ(gidType(root, "mlx5_0", 1, 1, mapped), "RoCE v2");
  // A kernel device whose entry says nothing: unknown, whatever the address looks like.
  EXPECT_EQ(gidType(root, "mlx5_0", 1, 2, mapped), "");
  EXPECT_EQ(gidType(root, "mlx5_0", 2, 0, mapped), "");
}

TEST(GidType, UserspaceDevicesByTheirAddress) {
  const std::string none = "/nonexistent/collx/sys/class/infiniband";
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("::ffff:10.0.0.1")), "RoCE v2");
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("2001:db8::1")), "RoCE v2");
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("fd00::7")), "RoCE v2");
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("fe80::1")), "");  // link-local
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("::1")), "");
  EXPECT_EQ(gidType(none, "emu0", 1, 0, gidOf("ff02::1")), "");
}

// ---- the ports of the userspace device ------------------------------------------------------

std::shared_ptr<const VerbsLibrary> emulator() {
  std::string why;
  auto library = VerbsLibrary::load(COLLX_VERBS_EMU_PATH, &why);
  EXPECT_NE(library, nullptr) << why;
  return library;
}

std::size_t threadCount() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    ++n;
  }
  return n;
}

TEST(IbPortsOfTheEmulator, OneActiveRoceV2Port) {
  const ScopedEnv ip("COLLX_VERBS_EMU_IP", "127.0.0.2");
  auto library = emulator();
  ASSERT_NE(library, nullptr);
  const std::size_t threads = threadCount();
  const std::vector<PortInfo> ports = listPorts(library);
  // Each device was closed again: the device's wire thread is gone.
  EXPECT_EQ(threadCount(), threads);
  ASSERT_EQ(ports.size(), 1u);
  const PortInfo& port = ports[0];
  EXPECT_EQ(port.error, "");
  EXPECT_EQ(port.device, "emu0");
  EXPECT_EQ(port.deviceIndex, 0);
  EXPECT_EQ(port.port, 1);
  EXPECT_EQ(port.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(port.linkLayer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(port.activeMtu, IBV_MTU_1024);
  EXPECT_EQ(port.lid, 0);
  EXPECT_EQ(port.maxMessage, 1u << 31);
  ASSERT_EQ(port.gids.size(), 1u);
  EXPECT_EQ(port.gids[0].index, 0);
  EXPECT_EQ(port.gids[0].text, "::ffff:127.0.0.2");
  EXPECT_EQ(port.gids[0].type, "RoCE v2");

  for (const std::optional<int> gidIndex : {std::optional<int>(), std::optional<int>(0)}) {
    const PortChoice choice = choosePort(ports, HcaFilter::parse("emu0:1"), gidIndex);
    EXPECT_EQ(choice.device, "emu0");
    EXPECT_EQ(choice.deviceIndex, 0);
    EXPECT_EQ(choice.port, 1);
    EXPECT_EQ(choice.linkLayer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(choice.activeMtu, IBV_MTU_1024);
    EXPECT_EQ(choice.gidIndex, 0);
    EXPECT_EQ(std::memcmp(choice.gid.raw, port.gids[0].gid.raw, sizeof choice.gid.raw), 0);
    EXPECT_EQ(choice.gidType, "RoCE v2");
    EXPECT_EQ(choice.maxMessage, 1u << 31);
    EXPECT_EQ(choice.describe(), "emu0:1 (RoCE v2 GID 0 ::ffff:127.0.0.2, MTU 1024)");
  }
}

TEST(IbPortsOfTheEmulator, NoDeviceNoPortAndChoosingSaysSo) {
  const ScopedEnv none("COLLX_VERBS_EMU_DEVICES", "0");
  auto library = emulator();
  ASSERT_NE(library, nullptr);
  const std::vector<PortInfo> ports = listPorts(library);
  EXPECT_TRUE(ports.empty());
  try {
    choosePort(ports, HcaFilter{}, std::nullopt);
    ADD_FAILURE() << "a port was chosen among none";
  } catch (const Unsupported& e) {
    EXPECT_NE(e.detail().find("lists no device port"), std::string::npos) << e.detail();
  }
}

TEST(IbPortsOfTheEmulator, ADeviceThatCannotBeOpenedIsAnEntryWithItsError) {
  // The device listens on its GID's address: one this host does not have fails the open.
  const ScopedEnv ip("COLLX_VERBS_EMU_IP", "203.0.113.77");
  auto library = emulator();
  ASSERT_NE(library, nullptr);
  const std::vector<PortInfo> ports = listPorts(library);
  ASSERT_EQ(ports.size(), 1u);
  EXPECT_EQ(ports[0].device, "emu0");
  EXPECT_EQ(ports[0].port, 0);
  EXPECT_EQ(ports[0].error.rfind("cannot be opened: ", 0), 0u) << ports[0].error;
  try {
    choosePort(ports, HcaFilter{}, std::nullopt);
    ADD_FAILURE() << "a port of an unopened device was chosen";
  } catch (const Unsupported& e) {
    EXPECT_EQ(e.detail().rfind("no RDMA port qualifies: emu0 cannot be opened: ", 0), 0u)
        << e.detail();
  }
}

// ---- choosing among hand-made ports ---------------------------------------------------------

GidInfo gidInfo(int index, const char* text, const char* type) {
  return GidInfo{index, gidOf(text), type, text};
}

PortInfo portInfo(const char* device, int port, ibv_port_state state, std::uint8_t linkLayer,
                  std::uint16_t lid, std::vector<GidInfo> gids) {
  PortInfo info;
  info.device = device;
  info.port = static_cast<std::uint8_t>(port);
  info.state = state;
  info.linkLayer = linkLayer;
  info.activeMtu = IBV_MTU_4096;
  info.lid = lid;
  info.maxMessage = 1u << 30;
  info.gids = std::move(gids);
  return info;
}

// The Unsupported detail of a choice that must fail.
std::string whyNot(const std::vector<PortInfo>& ports, const std::string& hca,
                   std::optional<int> gidIndex = std::nullopt) {
  try {
    const PortChoice choice = choosePort(ports, HcaFilter::parse(hca), gidIndex);
    ADD_FAILURE() << "chose " << choice.describe();
  } catch (const Unsupported& e) {
    EXPECT_EQ(e.detail().rfind("no RDMA port qualifies: ", 0), 0u) << e.detail();
    EXPECT_EQ(e.detail().find('\n'), std::string::npos) << e.detail();  // one sentence
    return e.detail();
  }
  return "";
}

TEST(ChoosePort, InfiniBandByLidWithoutGidUnlessOneIsNamed) {
  const std::vector<PortInfo> ports = {portInfo("mlx5_0", 1, IBV_PORT_ACTIVE,
                                                IBV_LINK_LAYER_INFINIBAND, 7,
                                                {gidInfo(0, "fe80::1", "IB/RoCE v1")})};
  const PortChoice lid = choosePort(ports, HcaFilter{}, std::nullopt);
  EXPECT_EQ(lid.linkLayer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(lid.lid, 7);
  EXPECT_EQ(lid.gidIndex, -1);
  EXPECT_EQ(lid.activeMtu, IBV_MTU_4096);
  EXPECT_EQ(lid.describe(), "mlx5_0:1 (InfiniBand LID 7, MTU 4096)");

  const PortChoice gid = choosePort(ports, HcaFilter{}, 0);
  EXPECT_EQ(gid.gidIndex, 0);
  EXPECT_EQ(gid.gidType, "IB/RoCE v1");
  EXPECT_EQ(gid.describe(), "mlx5_0:1 (InfiniBand LID 7, GID 0 fe80::1, MTU 4096)");

  // An old driver's unspecified link layer is InfiniBand.
  const PortChoice old =
      choosePort({portInfo("mthca0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_UNSPECIFIED, 3, {})},
                 HcaFilter{}, std::nullopt);
  EXPECT_EQ(old.linkLayer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(old.lid, 3);
}

TEST(ChoosePort, InfiniBandWithoutLidIsNotUsable) {
  const std::string why =
      whyNot({portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 0, {})}, "");
  EXPECT_NE(why.find("mlx5_0:1 is InfiniBand without a LID"), std::string::npos) << why;
}

TEST(ChoosePort, SkipsPortsThatAreDownOrFailed) {
  PortInfo failed;
  failed.device = "mlx5_0";
  failed.port = 0;
  failed.error = "cannot be opened: Permission denied (errno 13)";
  PortInfo down = portInfo("mlx5_1", 1, IBV_PORT_DOWN, IBV_LINK_LAYER_INFINIBAND, 0, {});
  down.deviceIndex = 1;
  PortInfo active = portInfo("mlx5_1", 2, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 9, {});
  active.deviceIndex = 1;
  const PortChoice choice = choosePort({failed, down, active}, HcaFilter{}, std::nullopt);
  EXPECT_EQ(choice.device, "mlx5_1");
  EXPECT_EQ(choice.deviceIndex, 1);
  EXPECT_EQ(choice.port, 2);

  const std::string why = whyNot({failed, down}, "");
  EXPECT_NE(why.find("mlx5_0 cannot be opened: Permission denied"), std::string::npos) << why;
  EXPECT_NE(why.find("mlx5_1:1 is DOWN, not ACTIVE"), std::string::npos) << why;
  EXPECT_NE(whyNot({portInfo("mlx5_0", 1, IBV_PORT_INIT, IBV_LINK_LAYER_ETHERNET, 0, {})}, "")
                .find("mlx5_0:1 is INIT, not ACTIVE"),
            std::string::npos);
}

TEST(ChoosePort, RoceTakesTheFirstRoceV2GidOfIpv4ThenOfIpv6) {
  const GidInfo linkLocal = gidInfo(0, "fe80::1", "RoCE v2");
  const GidInfo ipv6 = gidInfo(1, "2001:db8::1", "RoCE v2");
  const GidInfo ipv4v1 = gidInfo(2, "::ffff:10.0.0.1", "IB/RoCE v1");
  const GidInfo ipv4 = gidInfo(3, "::ffff:10.0.0.1", "RoCE v2");
  auto roce = [](std::vector<GidInfo> gids) {
    return std::vector<PortInfo>{
        portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET, 0, std::move(gids))};
  };
  const PortChoice v4 = choosePort(roce({linkLocal, ipv6, ipv4v1, ipv4}), HcaFilter{}, {});
  EXPECT_EQ(v4.gidIndex, 3);
  EXPECT_EQ(v4.describe(), "mlx5_0:1 (RoCE v2 GID 3 ::ffff:10.0.0.1, MTU 4096)");
  EXPECT_EQ(choosePort(roce({linkLocal, ipv6, ipv4v1}), HcaFilter{}, {}).gidIndex, 1);
  // Named, a RoCE v1 or link-local GID is used.
  const PortChoice v1 = choosePort(roce({linkLocal, ipv6, ipv4v1, ipv4}), HcaFilter{}, 2);
  EXPECT_EQ(v1.gidIndex, 2);
  EXPECT_EQ(v1.gidType, "IB/RoCE v1");
  EXPECT_EQ(v1.describe(), "mlx5_0:1 (IB/RoCE v1 GID 2 ::ffff:10.0.0.1, MTU 4096)");
  EXPECT_EQ(choosePort(roce({linkLocal}), HcaFilter{}, 0).gidIndex, 0);
}

TEST(ChoosePort, RoceV1OrLinkLocalOnlyIsNotUsableUnlessNamed) {
  const std::string why =
      whyNot({portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET, 0,
                       {gidInfo(0, "fe80::1", "IB/RoCE v1"), gidInfo(1, "fe80::1", "RoCE v2"),
                        gidInfo(2, "::ffff:10.0.0.1", "IB/RoCE v1")})},
             "");
  EXPECT_NE(why.find("mlx5_0:1 has no RoCE v2 GID of an IPv4 or global IPv6 address"),
            std::string::npos)
      << why;
  // The GIDs there are, so that the reader can pick one.
  EXPECT_NE(why.find("2 ::ffff:10.0.0.1 (IB/RoCE v1)"), std::string::npos) << why;
  EXPECT_NE(why.find("COLLX_IB_GID_INDEX"), std::string::npos) << why;

  const std::string empty =
      whyNot({portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET, 0, {})}, "");
  EXPECT_NE(empty.find("its GID table is empty"), std::string::npos) << empty;
}

TEST(ChoosePort, GidIndexMustExistOnThePort) {
  const std::vector<PortInfo> ports = {
      portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET, 0,
               {gidInfo(0, "::ffff:10.0.0.1", "RoCE v2")}),
      portInfo("mlx5_1", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 4, {})};
  const std::string why = whyNot(ports, "", 5);
  EXPECT_NE(why.find("mlx5_0:1 has no GID 5 (COLLX_IB_GID_INDEX; its GIDs: 0 ::ffff:10.0.0.1 "
                     "(RoCE v2))"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("mlx5_1:1 has no GID 5 (COLLX_IB_GID_INDEX; its GID table is empty)"),
            std::string::npos)
      << why;
}

TEST(ChoosePort, FilterSelectsAndExcludes) {
  const std::vector<PortInfo> ports = {
      portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 1, {}),
      portInfo("mlx5_0", 2, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 2, {}),
      portInfo("mlx5_1", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 3, {})};
  EXPECT_EQ(choosePort(ports, HcaFilter{}, {}).lid, 1);
  EXPECT_EQ(choosePort(ports, HcaFilter::parse("mlx5_0:2"), {}).lid, 2);
  EXPECT_EQ(choosePort(ports, HcaFilter::parse("mlx5_1"), {}).lid, 3);
  EXPECT_EQ(choosePort(ports, HcaFilter::parse("^mlx5_0:1"), {}).lid, 2);
  EXPECT_EQ(choosePort(ports, HcaFilter::parse("^mlx5_0"), {}).lid, 3);

  const std::string all = whyNot(ports, "^mlx5");
  EXPECT_EQ(all,
            "no RDMA port qualifies: COLLX_IB_HCA='^mlx5' allows none of the ports here "
            "(mlx5_0:1, mlx5_0:2, mlx5_1:1)");
  const std::string none = whyNot(ports, "mlx4_0");
  EXPECT_NE(none.find("COLLX_IB_HCA='mlx4_0' allows none"), std::string::npos) << none;
}

TEST(ChoosePort, EveryPortsReasonInOneSentence) {
  std::vector<PortInfo> ports = {
      portInfo("mlx5_0", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_INFINIBAND, 1, {}),
      portInfo("mlx5_1", 1, IBV_PORT_DOWN, IBV_LINK_LAYER_INFINIBAND, 2, {}),
      portInfo("mlx5_2", 1, IBV_PORT_ACTIVE, IBV_LINK_LAYER_ETHERNET, 0, {})};
  EXPECT_EQ(whyNot(ports, "^mlx5_0"),
            "no RDMA port qualifies: mlx5_0:1 is excluded by COLLX_IB_HCA='^mlx5_0'; mlx5_1:1 is "
            "DOWN, not ACTIVE; mlx5_2:1 has no RoCE v2 GID of an IPv4 or global IPv6 address (its "
            "GID table is empty; COLLX_IB_GID_INDEX picks one)");
  EXPECT_NE(whyNot(ports, "mlx5_1,mlx5_2").find("mlx5_0:1 is not selected by COLLX_IB_HCA="),
            std::string::npos);
  EXPECT_NE(whyNot({}, "").find("lists no device port"), std::string::npos);
}

// ---- collx-info's text ----------------------------------------------------------------------

void expectHas(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "no '" << part << "' in:\n" << text;
}

TEST(DescribeVerbs, TheEmulatorsPortAndTheChoice) {
  const ScopedEnv ip("COLLX_VERBS_EMU_IP", "127.0.0.2");
  const std::string text = describeVerbs(COLLX_VERBS_EMU_PATH, "", std::nullopt);
  expectHas(text, "COLLX_IB_HCA unset (every port), COLLX_IB_GID_INDEX unset (chosen)\n");
  expectHas(text, std::string("library: ") + COLLX_VERBS_EMU_PATH + "\n");
  expectHas(text, "device emu0:1: ACTIVE, Ethernet, MTU 1024, messages up to 2 GiB\n");
  expectHas(text, "\n  GID 0 ::ffff:127.0.0.2 (RoCE v2)\n");
  expectHas(text, "collx would use emu0:1 (RoCE v2 GID 0 ::ffff:127.0.0.2, MTU 1024)\n");
  EXPECT_EQ(text.find("not usable"), std::string::npos) << text;
}

TEST(DescribeVerbs, SettingsThatRuleEveryPortOutSaySo) {
  const std::string excluded = describeVerbs(COLLX_VERBS_EMU_PATH, "^emu", std::nullopt);
  expectHas(excluded, "COLLX_IB_HCA '^emu'");
  expectHas(excluded, "device emu0:1: ACTIVE");  // still listed
  expectHas(excluded,
            "ibverbs is not usable here: no RDMA port qualifies: COLLX_IB_HCA='^emu' allows none "
            "of the ports here (emu0:1)\n");

  const std::string gid = describeVerbs(COLLX_VERBS_EMU_PATH, "", 4);
  expectHas(gid, "COLLX_IB_GID_INDEX 4\n");
  expectHas(gid, "ibverbs is not usable here: no RDMA port qualifies: emu0:1 has no GID 4");

  const std::string bad = describeVerbs(COLLX_VERBS_EMU_PATH, "emu0:0", std::nullopt);
  expectHas(bad, "device emu0:1: ACTIVE");
  expectHas(bad,
            "ibverbs is not usable here: COLLX_IB_HCA='emu0:0': the port '0' of emu0 is not "
            "a number in 1..255");
}

TEST(DescribeVerbs, NoDevice) {
  const ScopedEnv none("COLLX_VERBS_EMU_DEVICES", "0");
  const std::string text = describeVerbs(COLLX_VERBS_EMU_PATH, "", std::nullopt);
  expectHas(text, std::string("ibverbs is not usable here: ") + COLLX_VERBS_EMU_PATH +
                      " found no RDMA device\n");
  EXPECT_EQ(text.find("device "), std::string::npos) << text;
}

TEST(DescribeVerbs, MissingLibrary) {
  const std::string path = "/nonexistent/collx/libibverbs-missing.so";
  const std::string text = describeVerbs(path, "", std::nullopt);
  expectHas(text, "COLLX_IBVERBS_LIBRARY '" + path + "'");
  expectHas(text, "library: none\n");
  expectHas(text, "ibverbs is not usable here: cannot load " + path);
}

TEST(DescribeVerbs, RealLibibverbsHere) {
  const std::string text = describeVerbs("", "", std::nullopt);
  expectHas(text, "COLLX_IBVERBS_LIBRARY unset (libibverbs.so.1)");
  const VerbsProbe probe = probeVerbs("");
  if (probe.library == nullptr) {
    // rdma-core is not installed: the reason names the library.
    expectHas(text, "library: none\nibverbs is not usable here: cannot load libibverbs.so.1");
    return;
  }
  expectHas(text, "library: libibverbs.so.1\n");
  if (probe.usable()) {
    // A machine with RDMA devices: each one is listed.
    for (const std::string& device : probe.devices) expectHas(text, "device " + device);
    return;
  }
  expectHas(text, "ibverbs is not usable here: " + probe.unavailable + "\n");
  // This machine: no RDMA in the kernel (ENOSYS).
  const DeviceList list(probe.library);
  if (!list.ok() && list.error() == ENOSYS) {
    expectHas(text, "Function not implemented");
    expectHas(text, "this kernel offers no RDMA verbs");
  }
}

TEST(DescribeVerbs, CollxInfoHasTheSection) {
  const test::RunResult r = test::run(
      {test::binDir() + "/collx-info"},
      {{"COLLX_IBVERBS_LIBRARY", COLLX_VERBS_EMU_PATH}, {"COLLX_VERBS_EMU_IP", "127.0.0.2"}});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::size_t section = r.out.find("\nRDMA verbs (ibverbs transport):\n");
  ASSERT_NE(section, std::string::npos) << r.out;
  const std::string rest = r.out.substr(section);
  expectHas(rest, "\n  device emu0:1: ACTIVE, Ethernet, MTU 1024");
  expectHas(rest, "\n    GID 0 ::ffff:127.0.0.2 (RoCE v2)\n");
  expectHas(rest, "\n  collx would use emu0:1 (RoCE v2 GID 0 ::ffff:127.0.0.2, MTU 1024)\n");

  // A setting out of its range: the section says so, and the rest of collx-info still runs.
  const test::RunResult bad =
      test::run({test::binDir() + "/collx-info"}, {{"COLLX_IB_GID_INDEX", "300"}});
  ASSERT_EQ(bad.code, 0) << bad.err;
  expectHas(bad.out,
            "RDMA verbs (ibverbs transport):\n  cannot read the transport's settings: "
            "COLLX_IB_GID_INDEX");
}

}  // namespace
}  // namespace collx::transport::ibverbs
