// The base vocabulary: data types, reduce ops, errors, settings, log levels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "collx/base/check.h"
#include "collx/base/config.h"
#include "collx/base/copy.h"
#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/hex.h"
#include "collx/base/log.h"
#include "collx/base/reduce_op.h"
#include "collx/base/setting.h"
#include "collx/base/version.h"
#include "util/test_util.h"

namespace collx {
namespace {

using namespace std::chrono_literals;

TEST(DataTypeTest, SizesNamesAndParsing) {
  const std::pair<DataType, std::size_t> expected[] = {
      {DataType::kInt8, 1},    {DataType::kUint8, 1},   {DataType::kInt32, 4},
      {DataType::kInt64, 8},   {DataType::kFloat16, 2}, {DataType::kBfloat16, 2},
      {DataType::kFloat32, 4}, {DataType::kFloat64, 8},
  };
  for (auto [type, size] : expected) {
    EXPECT_EQ(dataTypeSize(type), size) << dataTypeName(type);
    EXPECT_EQ(parseDataType(dataTypeName(type)), type);
  }
  EXPECT_EQ(parseDataType("bf16"), DataType::kBfloat16);
  EXPECT_EQ(parseDataType("f32"), DataType::kFloat32);
  EXPECT_EQ(parseDataType("double"), DataType::kFloat64);
  EXPECT_FALSE(parseDataType("float128").has_value());
  EXPECT_TRUE(isFloatingPoint(DataType::kFloat16));
  EXPECT_TRUE(isInteger(DataType::kUint8));
}

TEST(ReduceOpTest, BitwiseOpsRefuseFloatingPointNamingRankAndOp) {
  Where where{3, "allreduce(ring, seq 7)", -1};
  for (ReduceOpKind kind : {ReduceOpKind::kBand, ReduceOpKind::kBor, ReduceOpKind::kBxor}) {
    ReduceOp op(kind);
    EXPECT_NO_THROW(op.validate(DataType::kInt32, where));
    try {
      op.validate(DataType::kFloat32, where);
      FAIL() << op.name() << " accepted float32";
    } catch (const InvalidArgument& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
      EXPECT_NE(what.find("allreduce"), std::string::npos) << what;
      EXPECT_NE(what.find(op.name()), std::string::npos) << what;
      EXPECT_NE(what.find("float32"), std::string::npos) << what;
    }
  }
  for (ReduceOpKind kind : {ReduceOpKind::kSum, ReduceOpKind::kProd, ReduceOpKind::kMin,
                            ReduceOpKind::kMax, ReduceOpKind::kAvg}) {
    for (DataType type : kAllDataTypes) EXPECT_NO_THROW(ReduceOp(kind).validate(type, where));
  }
}

TEST(ReduceOpTest, CustomOpCarriesItsFunction) {
  int calls = 0;
  ReduceOp op = ReduceOp::custom(
      [&](void* inout, const void* in, std::size_t count, DataType) {
        auto* a = static_cast<int*>(inout);
        const auto* b = static_cast<const int*>(in);
        for (std::size_t i = 0; i < count; ++i) a[i] = a[i] * 10 + b[i];
        ++calls;
      },
      "shift", /*commutative=*/false);
  EXPECT_EQ(op.kind(), ReduceOpKind::kCustom);
  EXPECT_FALSE(op.commutative());
  int a[2] = {1, 2}, b[2] = {3, 4};
  op.function()(a, b, 2, DataType::kInt32);
  EXPECT_EQ(a[0], 13);
  EXPECT_EQ(a[1], 24);
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(ReduceOp::custom(nullptr).validate(DataType::kInt8, {}), InvalidArgument);
  EXPECT_EQ(parseReduceOpKind("bxor"), ReduceOpKind::kBxor);
  EXPECT_FALSE(parseReduceOpKind("custom").has_value());
}

// Every copy path (memcpy, the vector loops this CPU runs, and copyBytes, which picks one)
// copies every byte and nothing else, for sizes around the vector steps and every alignment
// of both ends.
// The large-count suites trust this check with gigabytes: it must see one wrong byte, a
// block shifted by one byte or by a word, and a pattern started at another offset.
TEST(TestPattern, FindsAChangedByteAShiftAndAnotherOffset) {
  const std::uint64_t n = 200000 + 13;
  std::vector<std::uint8_t> data(n);
  test::patternBytes(3, 0, data.data(), n);
  EXPECT_EQ(test::firstPatternMismatch(data.data(), n, 3), -1);
  EXPECT_NE(test::firstPatternMismatch(data.data(), n, 4), -1);  // another seed
  data[150001] ^= 0x40;
  EXPECT_EQ(test::firstPatternMismatch(data.data(), n, 3), 150001);
  data[150001] ^= 0x40;
  for (std::uint64_t shift : {1, 8}) {
    std::vector<std::uint8_t> shifted(data.begin() + static_cast<long>(shift), data.end());
    EXPECT_EQ(test::firstPatternMismatch(shifted.data(), shifted.size(), 3), 0) << shift;
    // ... which is the pattern from byte `shift` on.
    EXPECT_EQ(test::firstPatternMismatch(shifted.data(), shifted.size(), 3, shift), -1) << shift;
  }
  std::vector<std::uint8_t> part(1000);
  test::patternBytes(3, 99999, part.data(), part.size());
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 99999));
}

TEST(CopyTest, EveryPathLengthAndAlignmentCopiesExactlyTheBytes) {
  std::mt19937 rng(7);
  std::vector<std::uint8_t> src(70000 + 256), dst(src.size());
  for (auto& b : src) b = static_cast<std::uint8_t>(rng());
  const auto paths = detail::copyPaths();
  ASSERT_GE(paths.size(), 2u);  // memcpy and copyBytes at least
  const std::size_t lengths[] = {0,   1,    63,   64,   255,  256,   511,   512,
                                 513, 1023, 4095, 4096, 4097, 12345, 65536, 70000};
  for (const auto& [name, copy] : paths) {
    for (std::size_t n : lengths) {
      for (std::size_t so : {0, 1, 31, 64}) {
        for (std::size_t d : {0, 3, 32, 63}) {
          std::fill(dst.begin(), dst.end(), std::uint8_t{0xA5});
          copy(dst.data() + d, src.data() + so, n);
          ASSERT_EQ(std::memcmp(dst.data() + d, src.data() + so, n), 0)
              << name << " n=" << n << " src+" << so << " dst+" << d;
          for (std::size_t i = 0; i < dst.size(); ++i) {
            if (i >= d && i < d + n) continue;
            ASSERT_EQ(dst[i], 0xA5)
                << name << " wrote byte " << i << " outside [" << d << ", " << d + n << ")";
          }
        }
      }
    }
  }
}

TEST(ErrorTest, MessagesNameRankOperationAndPeer) {
  try {
    throwError(ErrorKind::kTimeout, Where{3, "allreduce(ring, seq 7)", 2},
               "timed out after 30000 ms");
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_STREQ(e.what(),
                 "rank 3: allreduce(ring, seq 7) (peer rank 2): timed out after 30000 ms");
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(e.peer(), 2);
    EXPECT_EQ(e.detail(), "timed out after 30000 ms");
  }
  for (ErrorKind kind : {ErrorKind::kIo, ErrorKind::kInvalidArgument, ErrorKind::kMismatch,
                         ErrorKind::kUnsupported, ErrorKind::kAborted, ErrorKind::kRevoked}) {
    try {
      throwError(kind, Where{0, "op", -1}, "x");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind);
    }
  }
  EXPECT_THROW(throwError(ErrorKind::kMismatch, {}, "x"), MismatchError);
  EXPECT_THROW(throwError(ErrorKind::kAborted, {}, "x"), Aborted);
  EXPECT_THROW(throwError(ErrorKind::kRevoked, {}, "x"), RevokedError);
  EXPECT_STREQ(errorKindName(ErrorKind::kRevoked), "RevokedError");
  // A kind that came from outside: a number beyond the last kind is an IoError.
  EXPECT_EQ(errorKindFrom(6), ErrorKind::kRevoked);
  EXPECT_EQ(errorKindFrom(7), ErrorKind::kExcluded);
  EXPECT_THROW(throwError(ErrorKind::kExcluded, {}, "x"), ExcludedError);
  EXPECT_EQ(errorKindFrom(8), ErrorKind::kIo);
  EXPECT_EQ(errorKindFrom(255), ErrorKind::kIo);
}

TEST(CheckTest, FailedCheckPrintsBothOperands) {
  try {
    int a = 3, b = 4;
    COLLX_CHECK_EQ(a, b);
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("a == b (3 vs 4)"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(COLLX_CHECK_LT(1, 2));
}

TEST(ConfigTest, DurationsAndIntegers) {
  EXPECT_EQ(parseDuration("30", "X"), 30s);
  EXPECT_EQ(parseDuration("1.5", "X"), 1500ms);
  EXPECT_EQ(parseDuration("500ms", "X"), 500ms);
  EXPECT_EQ(parseDuration("2m", "X"), 120s);
  EXPECT_EQ(parseDuration("1h", "X"), 3600s);
  // Below a millisecond (collx-sim's model): nanoseconds, and milliseconds rounded.
  EXPECT_EQ(parseDurationNs("10us", "X"), 10us);
  EXPECT_EQ(parseDurationNs("2.5ms", "X"), 2500us);
  EXPECT_EQ(parseDurationNs("100ns", "X"), 100ns);
  EXPECT_EQ(parseDurationNs("0", "X"), 0ns);
  EXPECT_EQ(parseDuration("1600us", "X"), 2ms);
  EXPECT_THROW(parseDurationNs("300y", "X"), InvalidArgument);
  EXPECT_THROW(parseDurationNs("9999999999", "X"), InvalidArgument);  // beyond 285 years
  for (const char* bad : {"", "abc", "10 s", "-5", "1.2.3", "5 days"}) {
    try {
      parseDuration(bad, "COLLX_TIMEOUT");
      FAIL() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("COLLX_TIMEOUT"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parseInt("42", 0, 100, "X"), 42);
  EXPECT_THROW(parseInt("101", 0, 100, "X"), InvalidArgument);
  EXPECT_THROW(parseInt("4x", 0, 100, "X"), InvalidArgument);
}

// What `body` throws (InvalidArgument), or "" when it does not.
template <typename Body>
std::string invalid(Body body) {
  try {
    body();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

// Settings declared here, registered while they live (the library's own are tested with
// every layer linked, in settings_test.cc).
TEST(SettingTest, ReadsEachKindWithItsRange) {
  const Setting<kind::Integer> streams({.name = "COLLX_TEST_STREAMS",
                                        .component = "test",
                                        .defaultValue = 1,
                                        .range = {1, 64},
                                        .help = "a test integer"});
  const Setting<kind::Bytes> ring({.name = "COLLX_TEST_RING",
                                   .component = "test",
                                   .defaultValue = 1u << 20,
                                   .range = kind::Bytes::Range::powersOfTwo(4096, 1u << 30),
                                   .help = "a test size"});
  const Setting<kind::Bytes> group({.name = "COLLX_TEST_GROUP",
                                    .component = "test",
                                    .defaultValue = 256 * 1024,
                                    .range = kind::Bytes::Range::multiplesOf(64, 4096, 1u << 30),
                                    .help = "a test size"});
  const Setting<kind::Duration> timeout({.name = "COLLX_TEST_TIMEOUT",
                                         .component = "test",
                                         .defaultValue = 300s,
                                         .range = {1ms},
                                         .help = "a test duration"});
  const Setting<kind::Bool> cma(
      {.name = "COLLX_TEST_CMA", .component = "test", .defaultValue = true, .help = "a test bool"});
  const Setting<kind::String> level({.name = "COLLX_TEST_LEVEL",
                                     .component = "test",
                                     .defaultValue = "warn",
                                     .help = "a test string"});
  const Setting<kind::Choice> arena({.name = "COLLX_TEST_ARENA",
                                     .component = "test",
                                     .defaultValue = "memfd",
                                     .range = {"memfd", "posix"},
                                     .help = "a test choice"});
  const AutoSetting<kind::Integer> spin({.name = "COLLX_TEST_SPIN",
                                         .component = "test",
                                         .automatic = "50 with a core per rank, else 0",
                                         .range = {0, 1000000},
                                         .help = "a test automatic integer"});

  const Config empty(Config::Environment{});
  EXPECT_EQ(streams.get(empty), 1);
  EXPECT_EQ(ring.get(empty), 1u << 20);
  EXPECT_EQ(timeout.get(empty), 300s);
  EXPECT_TRUE(cma.get(empty));
  EXPECT_EQ(level.get(empty), "warn");
  EXPECT_EQ(arena.get(empty), "memfd");
  EXPECT_EQ(spin.get(empty), std::nullopt);

  const Config set(Config::Environment{{"COLLX_TEST_STREAMS", "8"},
                                       {"COLLX_TEST_RING", "64K"},
                                       {"COLLX_TEST_GROUP", "4160"},
                                       {"COLLX_TEST_TIMEOUT", "1.5"},
                                       {"COLLX_TEST_CMA", "Off"},
                                       {"COLLX_TEST_LEVEL", "info,collx.tcp=debug"},
                                       {"COLLX_TEST_ARENA", "posix"},
                                       {"COLLX_TEST_SPIN", "0"}});
  EXPECT_EQ(streams.get(set), 8);
  EXPECT_EQ(ring.get(set), 64u << 10);
  EXPECT_EQ(group.get(set), 4160u);
  EXPECT_EQ(timeout.get(set), 1500ms);
  EXPECT_FALSE(cma.get(set));
  EXPECT_EQ(level.get(set), "info,collx.tcp=debug");
  EXPECT_EQ(arena.get(set), "posix");
  EXPECT_EQ(spin.get(set), 0);

  // Values as a user would write them, which the parsers read back.
  EXPECT_EQ(ring.defaultText(), "1MiB");
  EXPECT_EQ(group.defaultText(), "256KiB");
  EXPECT_EQ(timeout.defaultText(), "300s");
  EXPECT_EQ(cma.defaultText(), "1");
  EXPECT_EQ(spin.defaultText(), "50 with a core per rank, else 0");
  EXPECT_EQ(ring.valueText(set), "64KiB");
  EXPECT_EQ(timeout.valueText(set), "1500ms");
  EXPECT_EQ(spin.valueText(empty), "");
  EXPECT_EQ(std::string(ring.source(set)), "environment");
  EXPECT_EQ(std::string(ring.source(empty)), "default");
  EXPECT_EQ(std::string(spin.source(empty)), "automatic");
  EXPECT_EQ(streams.range(), "[1, 64]");
  EXPECT_EQ(ring.range(), "[4KiB, 1GiB], a power of two");
  EXPECT_EQ(group.range(), "[4KiB, 1GiB], a multiple of 64");
  EXPECT_EQ(timeout.range(), "at least 1ms");
  EXPECT_EQ(arena.range(), "memfd, posix");
  EXPECT_EQ(level.range(), "");
  EXPECT_EQ(std::string(settingTypeName(ring.type())), "bytes");
  EXPECT_TRUE(spin.automatic());
  EXPECT_FALSE(streams.automatic());

  // A bad value names the variable, the value and what was expected.
  const std::pair<const char*, const char*> bad[] = {
      {"COLLX_TEST_STREAMS", "COLLX_TEST_STREAMS='100': expected an integer in [1, 64]"},
      {"COLLX_TEST_RING",
       "COLLX_TEST_RING='5000': expected a size in [4KiB, 1GiB] that is a "
       "power of two"},
      {"COLLX_TEST_GROUP",
       "COLLX_TEST_GROUP='5000': expected a size in [4KiB, 1GiB] that is a "
       "multiple of 64"},
      {"COLLX_TEST_TIMEOUT", "COLLX_TEST_TIMEOUT='0': expected a duration of at least 1ms"},
      {"COLLX_TEST_CMA", "COLLX_TEST_CMA='maybe': expected a boolean"},
      {"COLLX_TEST_ARENA", "COLLX_TEST_ARENA='tmpfs': expected one of memfd, posix"},
      {"COLLX_TEST_SPIN", "COLLX_TEST_SPIN='-1': expected an integer in [0, 1000000]"},
  };
  const std::map<std::string, std::string> values = {
      {"COLLX_TEST_STREAMS", "100"}, {"COLLX_TEST_RING", "5000"}, {"COLLX_TEST_GROUP", "5000"},
      {"COLLX_TEST_TIMEOUT", "0"},   {"COLLX_TEST_CMA", "maybe"}, {"COLLX_TEST_ARENA", "tmpfs"},
      {"COLLX_TEST_SPIN", "-1"}};
  for (const auto& [name, message] : bad) {
    const Config config(Config::Environment{{name, values.at(name)}});
    const SettingInfo* setting = findSetting(name);
    ASSERT_NE(setting, nullptr) << name;
    const std::string error = invalid([&] { setting->valueText(config); });
    EXPECT_NE(error.find(message), std::string::npos) << error;
  }
  EXPECT_NE(invalid([&] {
              streams.get(Config(Config::Environment{{"COLLX_TEST_STREAMS", "4x"}}));
            }).find("COLLX_TEST_STREAMS='4x': expected an integer"),
            std::string::npos);
  // The same quantity given another way: a value set in code, another launcher's text.
  EXPECT_EQ(streams.check(64, "options.streams"), 64);
  EXPECT_NE(invalid([&] {
              streams.check(0, "options.streams");
            }).find("options.streams=0: expected an integer in [1, 64] (as COLLX_TEST_STREAMS)"),
            std::string::npos);
  EXPECT_EQ(spin.parse("7", "SPIN"), 7);
  EXPECT_NE(invalid([&] { spin.parse("x", "SPIN"); }).find("SPIN='x'"), std::string::npos);
}

// The environment is outside input: a value is at most 4096 bytes, an error repeats at most
// 200 bytes of it, and a hidden setting's value never.
TEST(SettingTest, ValuesHaveBoundsAndErrorsShowLittle) {
  const Setting<kind::String> path({.name = "COLLX_TEST_PATH",
                                    .component = "test",
                                    .defaultValue = "",
                                    .help = "a test string"});
  const Setting<kind::Integer> count({.name = "COLLX_TEST_COUNT",
                                      .component = "test",
                                      .defaultValue = 1,
                                      .range = {1, 64},
                                      .help = "a test integer"});
  const AutoSetting<kind::String> secret({.name = "COLLX_TEST_SECRET",
                                          .component = "test",
                                          .automatic = "none",
                                          .help = "a test secret",
                                          .hidden = true});
  const std::string longest(kMaxSettingBytes, 'p');
  EXPECT_EQ(path.get(Config(Config::Environment{{"COLLX_TEST_PATH", longest}})), longest);
  const std::string tooLong = invalid([&] {
    path.get(Config(Config::Environment{{"COLLX_TEST_PATH", longest + "p"}}));
  });
  EXPECT_NE(tooLong.find("COLLX_TEST_PATH: a value of 4097 bytes, more than the 4096"),
            std::string::npos)
      << tooLong;
  EXPECT_EQ(tooLong.find("ppp"), std::string::npos);
  // A long bad number: its first 200 bytes, then its length.
  const std::string digits = "1" + std::string(999, '0');
  const std::string bad = invalid([&] {
    count.get(Config(Config::Environment{{"COLLX_TEST_COUNT", digits}}));
  });
  EXPECT_NE(bad.find("COLLX_TEST_COUNT='" + digits.substr(0, 200) + "... (1000 bytes)': expected"),
            std::string::npos)
      << bad;
  EXPECT_NE(invalid([&] { parseBytes(std::string(300, 'x'), "X"); }).find("... (300 bytes)"),
            std::string::npos);
  // A secret: neither its value nor a piece of it, whatever the error.
  const std::string key(kMaxSettingBytes + 1, 's');
  const std::string hidden = invalid([&] {
    secret.valueText(Config(Config::Environment{{"COLLX_TEST_SECRET", key}}));
  });
  EXPECT_NE(hidden.find("COLLX_TEST_SECRET: a value of 4097 bytes"), std::string::npos) << hidden;
  EXPECT_EQ(hidden.find("ss"), std::string::npos);
  EXPECT_EQ(secret.valueText(Config(Config::Environment{{"COLLX_TEST_SECRET", "abc"}})),
            SettingInfo::kHiddenText);
}

TEST(SettingTest, RegistryTypoSuggestionsAndReadsByDeclaration) {
  EXPECT_EQ(findSetting("COLLX_TEST_LATE"), nullptr);
  {
    const Setting<kind::Duration> late({.name = "COLLX_TEST_LATE",
                                        .component = "test",
                                        .defaultValue = 5s,
                                        .range = {},
                                        .help = "registered while it lives"});
    EXPECT_EQ(findSetting("COLLX_TEST_LATE"), &late);
    auto all = settings();
    EXPECT_TRUE(std::is_sorted(all.begin(), all.end(),
                               [](const auto* a, const auto* b) { return a->name() < b->name(); }));
    EXPECT_NE(std::find(all.begin(), all.end(), &late), all.end());

    Config config(Config::Environment{{"COLLX_TEST_LATE", "2s"},
                                      {"COLLX_TEST_LAET", "1s"},
                                      {"COLLX_ZZZZZZZZ", "1"},
                                      {"RANK", "3"}});
    EXPECT_EQ(config.env("RANK"), "3");
    auto unknown = config.unknownVariables();
    ASSERT_EQ(unknown.size(), 2u);
    EXPECT_EQ(unknown[0], "COLLX_TEST_LAET (did you mean COLLX_TEST_LATE?)");
    EXPECT_EQ(unknown[1], "COLLX_ZZZZZZZZ");
    // The view by declaration: the value in effect and where it comes from.
    EXPECT_EQ(late.get(config), 2s);
    EXPECT_EQ(late.valueText(config), "2s");
    EXPECT_TRUE(late.isSet(config));
    EXPECT_STREQ(late.source(config), "environment");
    EXPECT_EQ(late.get(Config(Config::Environment{})), 5s);
    EXPECT_STREQ(late.source(Config(Config::Environment{})), "default");
    const SettingInfo* level = findSetting("COLLX_LOG_LEVEL");  // declared in log.cc
    ASSERT_NE(level, nullptr);
    EXPECT_EQ(level->valueText(config), "warn");
    EXPECT_FALSE(level->isSet(config));
  }
  EXPECT_EQ(findSetting("COLLX_TEST_LATE"), nullptr);
  // Set to the empty string counts as unset.
  EXPECT_FALSE(
      findSetting("COLLX_LOG_LEVEL")->isSet(Config(Config::Environment{{"COLLX_LOG_LEVEL", ""}})));
}

TEST(LogTest, LevelSpecsAreValidatedNamingTheVariable) {
  EXPECT_NO_THROW(log::configure("info,collx.rdzv=debug"));
  EXPECT_TRUE(log::enabled(log::Logger::kRdzv, log::Level::kDebug));
  EXPECT_FALSE(log::enabled(log::Logger::kTcp, log::Level::kDebug));
  EXPECT_TRUE(log::enabled(log::Logger::kTcp, log::Level::kInfo));
  try {
    log::configure("loud");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("COLLX_LOG_LEVEL"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("unknown level 'loud'"), std::string::npos);
  }
  EXPECT_THROW(log::configure("warn,collx.nope=debug"), InvalidArgument);
  log::configure("warn");
  EXPECT_FALSE(log::enabled(log::Logger::kRdzv, log::Level::kInfo));
}

TEST(VersionTest, BuildFeaturesAreListed) {
  EXPECT_STRNE(versionString(), "");
  bool tcpStore = false;
  for (const BuildFeature& f : buildFeatures()) {
    if (f.name.find("tcp store") != std::string::npos) tcpStore = f.built;
  }
  EXPECT_TRUE(tcpStore);
}

}  // namespace
TEST(Hex, BytesRoundTripAndBadTextIsRefused) {
  const std::uint8_t bytes[] = {0x00, 0x0a, 0xff, 0x7f};
  EXPECT_EQ(hexBytes(bytes, 4), "000aff7f");
  EXPECT_EQ(hexBytes(bytes, 4, " "), "00 0a ff 7f");
  EXPECT_EQ(hexBytes(bytes, 0), "");
  std::uint8_t back[4] = {};
  ASSERT_TRUE(parseHexBytes("000AFF7f", back, 4));
  EXPECT_EQ(std::memcmp(back, bytes, 4), 0);
  EXPECT_FALSE(parseHexBytes("000aff7", back, 4));     // too short
  EXPECT_FALSE(parseHexBytes("000aff7f00", back, 4));  // too long
  EXPECT_FALSE(parseHexBytes("000agf7f", back, 4));    // not a digit
}

}  // namespace collx
