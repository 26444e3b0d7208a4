// The run-time verbs loader (transport/src/ibverbs/verbs_api.h): whatever the machine offers
// (no library, a library without the entry points, a kernel without RDMA, no device), it
// says why verbs cannot be used, and never crashes. The device's own rules are tested in
// ../verbs_emu/verbs_emu_test.cc.
#include "ibverbs/verbs_api.h"

#include <gtest/gtest.h>
#include <link.h>
#include <stdlib.h>

#include <cstring>
#include <string>

namespace collx::transport::ibverbs {
namespace {

bool mapped(const char* fragment) {
  struct Search {
    const char* fragment;
    bool found;
  } search{fragment, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, s->fragment) != nullptr) {
          s->found = true;
        }
        return 0;
      },
      &search);
  return search.found;
}

TEST(VerbsLoader, NothingLinksLibibverbs) {
  // collx::transport is loaded (this test links it); libibverbs is not, until asked for.
  EXPECT_FALSE(mapped("libibverbs"));
  std::string why;
  auto library = VerbsLibrary::load("", &why);
  if (library != nullptr) {
    EXPECT_TRUE(mapped("libibverbs"));
  }
  library.reset();
}

TEST(VerbsLoader, MissingLibraryIsAReasonNotACrash) {
  const std::string path = "/nonexistent/collx/libibverbs-missing.so";
  std::string why;
  EXPECT_EQ(VerbsLibrary::load(path, &why), nullptr);
  EXPECT_NE(why.find("cannot load " + path), std::string::npos) << why;
  EXPECT_NE(why.find("COLLX_IBVERBS_LIBRARY"), std::string::npos) << why;

  const VerbsProbe probe = probeVerbs(path);
  EXPECT_FALSE(probe.usable());
  EXPECT_EQ(probe.library, nullptr);
  EXPECT_TRUE(probe.devices.empty());
  EXPECT_NE(probe.unavailable.find(path), std::string::npos) << probe.unavailable;
}

TEST(VerbsLoader, LibraryWithoutTheEntryPointsIsRefused) {
  std::string why;
  EXPECT_EQ(VerbsLibrary::load(COLLX_VERBS_STUB_PATH, &why), nullptr);
  // The stub has ibv_get_device_list and ibv_free_device_list: the first missing one is named.
  EXPECT_NE(why.find("lacks ibv_get_device_name@IBVERBS_1.1"), std::string::npos) << why;
  EXPECT_NE(why.find(COLLX_VERBS_STUB_PATH), std::string::npos) << why;
  EXPECT_FALSE(probeVerbs(COLLX_VERBS_STUB_PATH).usable());

  // Without symbol versions, even the entry points it has are refused (and said so).
  EXPECT_EQ(VerbsLibrary::load(COLLX_VERBS_STUB_UNVERSIONED_PATH, &why), nullptr);
  EXPECT_NE(why.find("has ibv_get_device_list but not at version IBVERBS_1.1"), std::string::npos)
      << why;
}

TEST(VerbsLoader, RealLibibverbsHereSaysWhyItIsUnusable) {
  const VerbsProbe probe = probeVerbs("");
  if (probe.library == nullptr) {
    // rdma-core not installed: the reason names the library and the package.
    EXPECT_NE(probe.unavailable.find("libibverbs.so.1"), std::string::npos) << probe.unavailable;
    return;
  }
  EXPECT_EQ(probe.library->name(), "libibverbs.so.1");
  if (probe.usable()) {
    // A machine with RDMA devices: they are listed.
    EXPECT_FALSE(probe.devices.empty());
    return;
  }
  EXPECT_TRUE(probe.devices.empty());
  EXPECT_NE(probe.unavailable.find("libibverbs.so.1"), std::string::npos) << probe.unavailable;
  // This machine: no RDMA in the kernel, ibv_get_device_list fails with ENOSYS.
  const DeviceList list(probe.library);
  if (!list.ok() && list.error() == ENOSYS) {
    EXPECT_NE(probe.unavailable.find("Function not implemented"), std::string::npos)
        << probe.unavailable;
    EXPECT_NE(probe.unavailable.find("no RDMA verbs"), std::string::npos) << probe.unavailable;
  } else if (list.ok()) {
    EXPECT_NE(probe.unavailable.find("found no RDMA device"), std::string::npos)
        << probe.unavailable;
  }
}

TEST(VerbsLoader, LoadsTheUserspaceDevice) {
  const VerbsProbe probe = probeVerbs(COLLX_VERBS_EMU_PATH);
  ASSERT_TRUE(probe.usable()) << probe.unavailable;
  EXPECT_EQ(probe.library->name(), COLLX_VERBS_EMU_PATH);
  ASSERT_EQ(probe.devices.size(), 1u);
  EXPECT_EQ(probe.devices[0], "emu0");
}

TEST(VerbsLoader, NoDeviceIsAReason) {
  ASSERT_EQ(setenv("COLLX_VERBS_EMU_DEVICES", "0", 1), 0);
  const VerbsProbe probe = probeVerbs(COLLX_VERBS_EMU_PATH);
  unsetenv("COLLX_VERBS_EMU_DEVICES");
  EXPECT_FALSE(probe.usable());
  EXPECT_TRUE(probe.devices.empty());
  EXPECT_EQ(probe.unavailable, COLLX_VERBS_EMU_PATH " found no RDMA device");
}

TEST(VerbsLoader, QueryPortFillsTheWholeStructure) {
  // The exported ibv_query_port fills only the older, shorter structure: queryPort() zeroes
  // the rest first, so nothing read from it is garbage.
  std::string why;
  auto library = VerbsLibrary::load(COLLX_VERBS_EMU_PATH, &why);
  ASSERT_NE(library, nullptr) << why;
  const VerbsApi& api = library->api();
  DeviceList list(library);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list.size(), 1);
  Context context(library, api.openDevice(list[0]), api.closeDevice, "context");
  ASSERT_TRUE(context);
  ibv_port_attr attr;
  std::memset(&attr, 0xab, sizeof attr);
  ASSERT_EQ(api.queryPort(context.get(), 1, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(attr.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(attr.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(attr.port_cap_flags2, 0);
  EXPECT_NE(api.queryPort(context.get(), 2, &attr), 0);
  EXPECT_EQ(context.destroy(), 0);
}

}  // namespace
}  // namespace collx::transport::ibverbs
