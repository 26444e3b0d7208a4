// The job secret (collx/secure): HMAC-SHA256 against RFC 4231, tags bound to their purpose and
// parts, the secret from COLLX_JOB_SECRET or from a file only its owner can read, and the
// secret never in an error, in collx-info's output or in collx.config()'s values.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include "collx/base/error.h"
#include "collx/base/hex.h"
#include "collx/base/setting.h"
#include "collx/secure/job_secret.h"
#include "util/test_util.h"

namespace collx::secure {
namespace {

std::string hex(const Tag& tag) { return hexBytes(tag.data(), tag.size()); }

std::span<const std::uint8_t> bytesOf(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

const char* const kSecret = "0123456789abcdef-not-to-be-seen";

TEST(Hmac, MatchesRfc4231) {
  // RFC 4231, test cases 1 and 2.
  const std::string key1(20, '\x0b');
  EXPECT_EQ(hex(hmacSha256(bytesOf(key1), bytesOf("Hi There"))),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmacSha256(bytesOf("Jefe"), bytesOf("what do ya want for nothing?"))),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(JobSecret, ATagHoldsForItsPurposeItsPartsAndItsSecretOnly) {
  const auto secret = JobSecret::fromText(kSecret, "test");
  const Tag tag = secret->mac(Purpose::kStore, {"client", "nonce-a", "nonce-b"});
  EXPECT_TRUE(secret->verify(Purpose::kStore, {"client", "nonce-a", "nonce-b"}, tag));
  EXPECT_FALSE(secret->verify(Purpose::kPair, {"client", "nonce-a", "nonce-b"}, tag));
  EXPECT_FALSE(secret->verify(Purpose::kStore, {"client", "nonce-a", "nonce-c"}, tag));
  // Parts are length-prefixed: moving a byte from one part to the next is another message.
  EXPECT_FALSE(secret->verify(Purpose::kStore, {"clien", "tnonce-a", "nonce-b"}, tag));
  const auto other = JobSecret::fromText("another secret of the job", "test");
  EXPECT_FALSE(other->verify(Purpose::kStore, {"client", "nonce-a", "nonce-b"}, tag));
  // The same secret makes the same tags (the other ranks check them).
  EXPECT_EQ(
      JobSecret::fromText(kSecret, "again")->mac(Purpose::kStore, {"client", "nonce-a", "nonce-b"}),
      tag);
}

TEST(JobSecret, NoncesAndNewSecretsAreFreshEachTime) {
  std::set<Nonce> nonces;
  for (int i = 0; i < 100; ++i) nonces.insert(randomNonce());
  EXPECT_EQ(nonces.size(), 100u);
  const std::string a = newSecretText();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos) << a;
  EXPECT_NE(a, newSecretText());
  EXPECT_NO_THROW(JobSecret::fromText(a, "collx-run"));
}

Config env(Config::Environment values) { return Config(std::move(values)); }

TEST(JobSecret, FromTheEnvironment) {
  EXPECT_EQ(JobSecret::fromConfig(env({})), nullptr);
  EXPECT_EQ(JobSecret::fromConfig(env({{"COLLX_JOB_SECRET", ""}})), nullptr);  // unset
  const auto secret = JobSecret::fromConfig(env({{"COLLX_JOB_SECRET", kSecret}}));
  ASSERT_NE(secret, nullptr);
  EXPECT_EQ(secret->origin(), "COLLX_JOB_SECRET");
  EXPECT_TRUE(secret->verify(Purpose::kValue, {"k"},
                             JobSecret::fromText(kSecret, "t")->mac(Purpose::kValue, {"k"})));
}

TEST(JobSecret, ShortLongAndDoubleSecretsAreRefusedWithoutShowingThem) {
  for (const std::string& text : {std::string("short-secret"), std::string(2000, 'x')}) {
    try {
      JobSecret::fromConfig(env({{"COLLX_JOB_SECRET", text}}));
      ADD_FAILURE() << text.size() << " bytes accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("16 to 1024"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
  test::TempDir dir;
  const std::string path = dir.path() + "/secret";
  std::ofstream(path) << kSecret << "\n";
  ::chmod(path.c_str(), 0600);
  try {
    JobSecret::fromConfig(env({{"COLLX_JOB_SECRET", kSecret}, {"COLLX_JOB_SECRET_FILE", path}}));
    ADD_FAILURE() << "both accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("set one of them"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(kSecret), std::string::npos) << e.what();
  }
}

TEST(JobSecret, AFileOnlyItsOwnerCanReadAndNothingElse) {
  test::TempDir dir;
  const std::string path = dir.path() + "/secret";
  std::ofstream(path) << kSecret << "  \nsecond line ignored\n";
  ::chmod(path.c_str(), 0600);
  {
    const auto secret = JobSecret::fromConfig(env({{"COLLX_JOB_SECRET_FILE", path}}));
    ASSERT_NE(secret, nullptr);
    EXPECT_EQ(secret->origin(), "COLLX_JOB_SECRET_FILE=" + path);
    // The first line, trailing blanks stripped: the same secret as the text.
    EXPECT_EQ(secret->mac(Purpose::kPair, {"x"}),
              JobSecret::fromText(kSecret, "t")->mac(Purpose::kPair, {"x"}));
  }
  for (mode_t mode : {0640, 0604, 0620, 0644}) {
    ::chmod(path.c_str(), mode);
    try {
      JobSecret::fromConfig(env({{"COLLX_JOB_SECRET_FILE", path}}));
      ADD_FAILURE() << "mode " << std::oct << mode << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("chmod 600 " + path), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find(kSecret), std::string::npos) << e.what();
    }
  }
  for (const std::string& bad : {dir.path(), dir.path() + "/absent"}) {
    EXPECT_THROW(JobSecret::fromConfig(env({{"COLLX_JOB_SECRET_FILE", bad}})), InvalidArgument)
        << bad;
  }
}

TEST(JobSecret, ItsSettingShowsOnlyThatItIsSet) {
  const SettingInfo* setting = findSetting("COLLX_JOB_SECRET");
  ASSERT_NE(setting, nullptr);
  EXPECT_TRUE(setting->hidden());
  EXPECT_EQ(setting->valueText(env({{"COLLX_JOB_SECRET", kSecret}})), SettingInfo::kHiddenText);
  EXPECT_EQ(setting->valueText(env({})), "");
  EXPECT_FALSE(findSetting("COLLX_JOB_SECRET_FILE")->hidden());  // a path is no secret
}

TEST(JobSecret, CollxInfoDoesNotShowIt) {
  test::ScopedEnv set("COLLX_JOB_SECRET", kSecret);
  test::Process info({test::binDir() + "/collx-info"});
  ASSERT_TRUE(info.wait(std::chrono::seconds(60)));
  ASSERT_EQ(info.exitCode(), 0) << info.err();
  EXPECT_NE(info.out().find("COLLX_JOB_SECRET"), std::string::npos) << info.out();
  EXPECT_NE(info.out().find(SettingInfo::kHiddenText), std::string::npos) << info.out();
  EXPECT_EQ(info.out().find(kSecret), std::string::npos);
  EXPECT_EQ(info.err().find(kSecret), std::string::npos);
}

}  // namespace
}  // namespace collx::secure
