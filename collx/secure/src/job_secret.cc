#include "collx/secure/job_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "collx/base/error.h"
#include "collx/base/hex.h"
#include "collx/base/setting.h"

namespace collx::secure {

namespace {

const AutoSetting<kind::String> kJobSecret(
    {.name = "COLLX_JOB_SECRET",
     .component = "security",
     .automatic = "none; collx-run makes one for a job on one node",
     .help = "The job's secret (16 to 1024 bytes of text, the same on every rank): the store, "
             "the store's values and every connection between ranks prove it, so that only "
             "the job's own ranks get in. Never shown: collx-info and collx.config() say only "
             "that it is set. Prefer COLLX_JOB_SECRET_FILE for jobs started by hand.",
     .hidden = true});
const AutoSetting<kind::String> kJobSecretFile(
    {.name = "COLLX_JOB_SECRET_FILE",
     .component = "security",
     .automatic = "none",
     .help = "A file whose first line is the job's secret (see COLLX_JOB_SECRET): a regular "
             "file of this user's that group and others cannot read (chmod 600), e.g. on a "
             "filesystem every node of the job shares."});

constexpr std::size_t kMinSecret = 16;
constexpr std::size_t kMaxSecret = 1024;
constexpr std::size_t kMaxFile = 4096;

constexpr const char* kLabels[] = {"collx store v1", "collx value v1", "collx pair v1",
                                   "collx-run v1"};
static_assert(std::size(kLabels) == static_cast<std::size_t>(Purpose::kCount));

[[noreturn]] void bad(const std::string& what) {
  throw InvalidArgument(Where{-1, "job secret", -1}, what);
}

void checkLength(std::string_view secret, const std::string& from) {
  if (secret.size() < kMinSecret || secret.size() > kMaxSecret) {
    bad(from + ": the secret has " + std::to_string(secret.size()) + " bytes; it takes " +
        std::to_string(kMinSecret) + " to " + std::to_string(kMaxSecret) +
        " (make one: " + kMakeSecretFile + ")");
  }
}

// The first line of `path`, a regular file of this user's that only its owner may read.
std::string readSecretFile(const std::string& path) {
  const std::string what = "COLLX_JOB_SECRET_FILE=" + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(what + ": cannot open it: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) bad(what + ": cannot stat it: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad(what + ": not a regular file");
  if (st.st_uid != ::geteuid()) {
    bad(what + ": owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
        std::to_string(::geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    bad(what + ": readable or writable by group or others (mode " + mode + "): chmod 600 " + path);
  }
  std::string text(kMaxFile + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) bad(what + ": cannot read it: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  if (got > kMaxFile) bad(what + ": larger than " + std::to_string(kMaxFile) + " bytes");
  text.resize(got);
  text.resize(std::min(text.find('\n'), text.size()));  // the first line
  while (!text.empty() && (text.back() == '\r' || text.back() == ' ' || text.back() == '\t')) {
    text.pop_back();
  }
  checkLength(text, what);
  return text;
}

}  // namespace

Tag hmacSha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data) {
  Tag tag{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(),
           tag.data(), &length) == nullptr ||
      length != tag.size()) {
    throw IoError(Where{-1, "job secret", -1}, "OpenSSL's HMAC-SHA256 failed");
  }
  return tag;
}

void randomBytes(std::span<std::uint8_t> out) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw IoError(Where{-1, "job secret", -1},
                    std::string("getrandom failed: ") + std::strerror(errno));
    }
    got += static_cast<std::size_t>(n);
  }
}

Nonce randomNonce() {
  Nonce nonce;
  randomBytes(nonce);
  return nonce;
}

std::string newSecretText() {
  std::array<std::uint8_t, 32> bytes;
  randomBytes(bytes);
  std::string text = hexBytes(bytes.data(), bytes.size());
  OPENSSL_cleanse(bytes.data(), bytes.size());
  return text;
}

bool sameBytes(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::shared_ptr<const JobSecret> JobSecret::fromConfig(const Config& config) {
  const auto text = kJobSecret.get(config);
  const auto file = kJobSecretFile.get(config);
  if (text && file) {
    bad("both COLLX_JOB_SECRET and COLLX_JOB_SECRET_FILE are set: set one of them");
  }
  if (file) {
    std::string secret = readSecretFile(*file);
    auto out = fromText(secret, "COLLX_JOB_SECRET_FILE=" + *file);
    OPENSSL_cleanse(secret.data(), secret.size());
    return out;
  }
  if (text) return fromText(*text, "COLLX_JOB_SECRET");
  return nullptr;
}

std::shared_ptr<const JobSecret> JobSecret::fromText(std::string_view secret, std::string origin) {
  checkLength(secret, origin);
  return std::shared_ptr<const JobSecret>(new JobSecret(secret, std::move(origin)));
}

JobSecret::JobSecret(std::string_view secret, std::string origin) : origin_(std::move(origin)) {
  const std::span<const std::uint8_t> key(reinterpret_cast<const std::uint8_t*>(secret.data()),
                                          secret.size());
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    const std::string_view label = kLabels[i];
    keys_[i] = hmacSha256(key, {reinterpret_cast<const std::uint8_t*>(label.data()), label.size()});
  }
}

JobSecret::~JobSecret() { OPENSSL_cleanse(keys_.data(), sizeof keys_); }

Tag JobSecret::mac(Purpose purpose, std::initializer_list<Part> parts) const {
  std::vector<std::uint8_t> message;
  for (const Part& part : parts) {
    const auto n = static_cast<std::uint32_t>(part.bytes().size());
    for (int shift = 0; shift < 32; shift += 8) {
      message.push_back(static_cast<std::uint8_t>(n >> shift));
    }
    message.insert(message.end(), part.bytes().begin(), part.bytes().end());
  }
  return hmacSha256(keys_[static_cast<std::size_t>(purpose)], message);
}

bool JobSecret::verify(Purpose purpose, std::initializer_list<Part> parts, const Tag& tag) const {
  const Tag expected = mac(purpose, parts);
  return sameBytes(expected, tag);
}

}  // namespace collx::secure
