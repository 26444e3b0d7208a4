// Every layer's settings together (this binary links them all, as collx-info does): each
// variable the sources name is declared, each declaration is complete and its default valid,
// the option structs take their defaults from the declarations, and the typo check knows
// them all.
#include "collx/algorithms/settings.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "collx/algorithms/engine.h"
#include "collx/algorithms/registry.h"
#include "collx/base/setting.h"
#include "collx/bootstrap.h"
#include "collx/rendezvous/store.h"
#include "collx/settings.h"
#include "collx/transport/mesh.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const Config kEmpty{Config::Environment{}};

// The text of the string literals ('...' or "...") on one line of code, up to a comment
// (`comment`: "//" or "#").
std::vector<std::string> literalsOf(const std::string& line, const std::string& comment) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line.compare(i, comment.size(), comment) == 0) break;
    const char quote = line[i];
    if (quote != '"' && quote != '\'') continue;
    std::string text;
    for (++i; i < line.size() && line[i] != quote; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      text += line[i];
    }
    out.push_back(text);
  }
  return out;
}

// The environment variables named in string literals of the library's and tools' sources
// ("COLLX_TCP_STREAMS=" + ..., the declarations themselves, the Python package's texts),
// with a file that names each. Macros (COLLX_DEBUG(...)), build options and comments are not
// in string literals.
std::map<std::string, std::string> namesInSources() {
  const fs::path root = COLLX_SOURCE_DIR;
  const std::regex name(R"((?:^|[^A-Za-z0-9_])(COLLX_[A-Z0-9_]*[A-Z0-9]))");
  std::map<std::string, std::string> found;
  for (const char* dir : {"collx", "algorithms", "transport", "rendezvous", "python/src",
                          "python/collx", "benchmarks"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".py")) continue;
      std::ifstream in(entry.path());
      std::string line;
      while (std::getline(in, line)) {
        for (const std::string& text : literalsOf(line, ext == ".py" ? "#" : "//")) {
          for (std::sregex_iterator n(text.begin(), text.end(), name), end; n != end; ++n) {
            found.emplace((*n)[1], fs::relative(entry.path(), root).string());
          }
        }
      }
    }
  }
  return found;
}

TEST(Settings, EveryVariableTheSourcesNameIsDeclared) {
  // Named in string literals but not settings (a name added here says why):
  const std::set<std::string> notSettings = {
      "COLLX_WITH_REDIS",  // a CMake option, named in the error of a build without Redis
      "COLLX_WITH_PMIX",   // a CMake option, named in the error of a build without PMIx
  };
  const std::map<std::string, std::string> named = namesInSources();
  ASSERT_GT(named.size(), 30u) << "the scan of " << COLLX_SOURCE_DIR << " found too little";
  for (const auto& [name, file] : named) {
    if (notSettings.count(name) != 0) continue;
    EXPECT_NE(findSetting(name), nullptr) << name << " (named in " << file << ") is not declared";
  }
  // And every declaration is in the sources (its own declaration, at least).
  for (const SettingInfo* setting : settings()) {
    EXPECT_EQ(named.count(setting->name()), 1u) << setting->name();
  }
}

TEST(Settings, CollxInfoAndTheTypoCheckListEveryDeclaration) {
  const test::RunResult r = test::run({test::binDir() + "/collx-info"}, {{"COLLX_TIMOUT", "1"}});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const SettingInfo* setting : settings()) {
    EXPECT_NE(r.out.find("\n    " + setting->name() + ": " + settingTypeName(setting->type())),
              std::string::npos)
        << setting->name();
  }
  EXPECT_NE(r.out.find("COLLX_TIMOUT (did you mean COLLX_TIMEOUT?)"), std::string::npos);
  // The section on RDMA verbs, in every build (one without libibverbs-dev says so there;
  // ib_port_test checks its contents).
  EXPECT_NE(r.out.find("\nRDMA verbs (ibverbs transport):\n  "), std::string::npos) << r.out;
  // Every declared variable set: none of them is "unknown".
  std::map<std::string, std::string> every;
  for (const SettingInfo* setting : settings()) {
    if (!setting->automatic()) every[setting->name()] = setting->defaultText();
  }
  const test::RunResult quiet = test::run({test::binDir() + "/collx-info"}, every);
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("unknown COLLX_*"), std::string::npos) << quiet.out;
}

TEST(Settings, EachIsDeclaredOnceCompleteAndWithAValidDefault) {
  const auto all = settings();
  ASSERT_GT(all.size(), 30u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    const SettingInfo& s = *all[i];
    SCOPED_TRACE(s.name());
    if (i > 0) {
      EXPECT_NE(all[i - 1]->name(), s.name()) << "declared twice";
    }
    EXPECT_EQ(s.name().rfind("COLLX_", 0), 0u);
    EXPECT_FALSE(s.component().empty());
    EXPECT_GT(s.help().size(), 20u);
    EXPECT_FALSE(s.defaultText().empty());
    EXPECT_FALSE(s.isSet(kEmpty));
    if (s.automatic()) {
      EXPECT_EQ(s.valueText(kEmpty), "");
      EXPECT_EQ(std::string(s.source(kEmpty)), "automatic");
      continue;
    }
    // The default is within the range, and reads back as itself when written out.
    EXPECT_EQ(s.valueText(kEmpty), s.defaultText());
    EXPECT_EQ(std::string(s.source(kEmpty)), "default");
    const Config written(Config::Environment{{s.name(), s.defaultText()}});
    if (s.type() != SettingType::kString || !s.defaultText().empty()) {
      EXPECT_EQ(s.valueText(written), s.defaultText());
      EXPECT_EQ(std::string(s.source(written)), "environment");
    }
  }
}

TEST(Settings, TypoSuggestionsKnowEveryLayer) {
  const Config config(Config::Environment{{"COLLX_TIMOUT", "1"},
                                          {"COLLX_SHM_DIRCT", "always"},
                                          {"COLLX_ALLREDUCE_ALG", "ring"},
                                          {"COLLX_TORCH_EAGER_BYTES", "0"},
                                          {"COLLX_TCP_STREAMS", "2"},
                                          {"COLLX_RANK", "0"},
                                          {"COLLX_SPIN_US", "0"},
                                          {"COLLX_LOG_LEVEL", "warn"}});
  const std::vector<std::string> expected = {
      "COLLX_ALLREDUCE_ALG (did you mean COLLX_ALLREDUCE_ALGO?)",
      "COLLX_SHM_DIRCT (did you mean COLLX_SHM_DIRECT?)",
      "COLLX_TIMOUT (did you mean COLLX_TIMEOUT?)"};
  EXPECT_EQ(config.unknownVariables(), expected);
}

TEST(Settings, OptionStructsTakeTheirDefaultsFromTheDeclarations) {
  // The declared defaults, read as their kind reads them.
  auto bytes = [](const char* name) { return parseBytes(findSetting(name)->defaultText(), name); };
  auto integer = [](const char* name) {
    return parseInt(findSetting(name)->defaultText(), 0, std::int64_t{1} << 40, name);
  };
  const transport::MeshOptions mesh;
  EXPECT_EQ(mesh.transport, findSetting("COLLX_TRANSPORT")->defaultText());
  EXPECT_EQ(mesh.tcp.streams, integer("COLLX_TCP_STREAMS"));
  EXPECT_EQ(mesh.tcp.eagerLimit, bytes("COLLX_TCP_EAGER_LIMIT"));
  EXPECT_EQ(static_cast<std::uint64_t>(mesh.tcp.bufferBytes), bytes("COLLX_TCP_BUFFER"));
  EXPECT_EQ(mesh.shm.eagerLimit, bytes("COLLX_SHM_EAGER_LIMIT"));
  EXPECT_EQ(mesh.shm.groupBytes, bytes("COLLX_SHM_GROUP_BYTES"));
  EXPECT_EQ(mesh.shm.ringBytes, 0u) << "automatic: from the world size";
  EXPECT_EQ(mesh.shm.cma, findSetting("COLLX_SHM_CMA")->defaultText() == "1");
  EXPECT_EQ(mesh.shm.posix, findSetting("COLLX_SHM_ARENA")->defaultText() == "posix");
  EXPECT_EQ(mesh.shm.direct,
            transport::directReadsNamed(findSetting("COLLX_SHM_DIRECT")->defaultText(), "test"));
  EXPECT_EQ(mesh.shm.hostId, "");
  EXPECT_NO_THROW(mesh.validate());

  const algorithms::ScheduleParams params;
  EXPECT_EQ(params.chunkBytes, bytes("COLLX_CHUNK_BYTES"));
  EXPECT_EQ(params.chunkBytes, algorithms::kChunkBytes.defaultValue());
  EXPECT_EQ(kTorchEagerBytes.defaultValue(), bytes("COLLX_TORCH_EAGER_BYTES"));
  EXPECT_EQ(rendezvous::kTimeout.defaultValue(), 300s);

  // The engine's waits: COLLX_YIELD_US's default; COLLX_SPIN_US computed unless set.
  const algorithms::EngineOptions alone = algorithms::engineOptions(kEmpty, false);
  const algorithms::EngineOptions crowded = algorithms::engineOptions(kEmpty, true);
  EXPECT_EQ(alone.yield.count(), integer("COLLX_YIELD_US"));
  EXPECT_GT(alone.spin.count(), 0);
  EXPECT_EQ(crowded.spin.count(), 0);
  const Config spin(Config::Environment{{"COLLX_SPIN_US", "7"}, {"COLLX_YIELD_US", "9"}});
  EXPECT_EQ(algorithms::engineOptions(spin, true).spin.count(), 7);
  EXPECT_EQ(algorithms::engineOptions(spin, false).yield.count(), 9);
}

TEST(Settings, MeshOptionsReadTheEnvironmentAndHoldCodeToTheRanges) {
  const Config config(Config::Environment{{"COLLX_TRANSPORT", "tcp"},
                                          {"COLLX_TCP_STREAMS", "4"},
                                          {"COLLX_IFNAME", "lo"},
                                          {"COLLX_TCP_BUFFER", "4M"},
                                          {"COLLX_TCP_EAGER_LIMIT", "64K"},
                                          {"COLLX_SHM_RING_BYTES", "64K"},
                                          {"COLLX_SHM_EAGER_LIMIT", "16K"},
                                          {"COLLX_SHM_GROUP_BYTES", "8K"},
                                          {"COLLX_SHM_CMA", "0"},
                                          {"COLLX_SHM_DIRECT", "always"},
                                          {"COLLX_SHM_ARENA", "posix"},
                                          {"COLLX_HOST_ID", "host-a"}});
  const transport::MeshOptions o = transport::MeshOptions::fromConfig(config);
  EXPECT_EQ(o.transport, "tcp");
  EXPECT_EQ(o.tcp.streams, 4);
  EXPECT_EQ(o.tcp.ifname, "lo");
  EXPECT_EQ(o.tcp.bufferBytes, 4 << 20);
  EXPECT_EQ(o.tcp.eagerLimit, 64u << 10);
  EXPECT_EQ(o.shm.ringBytes, 64u << 10);
  EXPECT_EQ(o.shm.eagerLimit, 16u << 10);
  EXPECT_EQ(o.shm.groupBytes, 8u << 10);
  EXPECT_FALSE(o.shm.cma);
  EXPECT_EQ(o.shm.direct, transport::DirectReads::kAlways);
  EXPECT_TRUE(o.shm.posix);
  EXPECT_EQ(o.shm.hostId, "host-a");

  auto error = [](const std::function<void()>& body) -> std::string {
    try {
      body();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  const std::pair<Config::Environment, const char*> bad[] = {
      {{{"COLLX_TCP_STREAMS", "100"}}, "COLLX_TCP_STREAMS='100': expected an integer in [1, 64]"},
      {{{"COLLX_SHM_RING_BYTES", "5000"}}, "COLLX_SHM_RING_BYTES='5000'"},
      {{{"COLLX_SHM_GROUP_BYTES", "4100"}}, "that is a multiple of 64"},
      {{{"COLLX_TRANSPORT", "ib"}}, "COLLX_TRANSPORT='ib': expected one of auto, tcp, shm"},
      {{{"COLLX_SHM_DIRECT", "sometimes"}}, "expected one of never, auto, always"},
      {{{"COLLX_SHM_CMA", "perhaps"}}, "COLLX_SHM_CMA='perhaps': expected a boolean"},
  };
  for (const auto& [env, message] : bad) {
    const std::string what = error([&] { transport::MeshOptions::fromConfig(Config(env)); });
    EXPECT_NE(what.find(message), std::string::npos) << what;
  }
  // Values set in code keep the same ranges (the Mesh validates its options).
  transport::MeshOptions code;
  code.tcp.streams = 0;
  EXPECT_NE(error([&] { code.validate(); }).find("COLLX_TCP_STREAMS=0: expected an integer"),
            std::string::npos);
  code = transport::MeshOptions();
  code.transport = "carrier-pigeon";
  EXPECT_NE(error([&] { transport::Mesh mesh(code); }).find("COLLX_TRANSPORT=carrier-pigeon"),
            std::string::npos);
  code = transport::MeshOptions();
  code.shm.ringBytes = 3000;
  EXPECT_NE(error([&] { code.validate(); }).find("power of two"), std::string::npos);
  EXPECT_NE(error([&] {
              transport::directReadsNamed("maybe", "ContextOptions::shmDirect");
            }).find("ContextOptions::shmDirect=maybe: expected one of never, auto, always"),
            std::string::npos);
}

TEST(Settings, EachCollectiveHasItsAlgorithmSetting) {
  for (algorithms::Collective coll : algorithms::collectives()) {
    const auto& setting = algorithms::algorithmSetting(coll);
    std::string name = std::string("COLLX_") + algorithms::collectiveName(coll) + "_ALGO";
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(setting.name(), name);
    EXPECT_EQ(setting.range(), algorithms::algorithmNames(coll)) << name;
    const Config config(Config::Environment{{name, "no_such_algorithm"}});
    EXPECT_THROW(setting.get(config), InvalidArgument);
  }
  EXPECT_EQ(algorithms::kRules.get(kEmpty), std::nullopt);
  EXPECT_EQ(kStore.get(Config(Config::Environment{{"COLLX_STORE", "tcp://h:1"}})), "tcp://h:1");
}

}  // namespace
}  // namespace collx
