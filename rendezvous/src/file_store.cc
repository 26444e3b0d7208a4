#include "collx/rendezvous/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "collx/base/log.h"

namespace collx::rendezvous {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

// A file descriptor that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

std::uint64_t fnv1a(std::string_view text, std::uint64_t seed) {
  std::uint64_t hash = 1469598103934665603ull ^ seed;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Key -> file name: [A-Za-z0-9_-] and non-leading '.' kept, everything else %XX. Names that
// would be too long for the filesystem become "~" and a 128-bit hash of the key.
std::string encodeKey(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (std::size_t i = 0; i < key.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    bool plain = std::isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0);
    if (plain) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (out.size() > 200) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "~%016llx%016llx",
                  static_cast<unsigned long long>(fnv1a(key, 0)),
                  static_cast<unsigned long long>(fnv1a(key, 0x9e3779b97f4a7c15ull)));
    out = buf;
  }
  return out;
}

}  // namespace

// Mutual exclusion for mutations: an open-file-description lock, which (unlike a POSIX record
// lock) excludes other threads of this process as well as other processes, and is released
// when its holder dies.
class FileStore::Lock {
 public:
  Lock(const FileStore& store, std::string_view op)
      : fd_(::open((store.directory_ + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                   0600)) {
    if (fd_.get() < 0) {
      int err = errno;
      throw IoError(store.where(op),
                    "cannot open the lock file " + store.directory_ + "/.lock: " + errnoText(err));
    }
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    auto deadline = Clock::now() + store.timeout();
    auto step = std::chrono::milliseconds(1);
    while (::fcntl(fd_.get(), F_OFD_SETLK, &fl) != 0) {
      int err = errno;
      if (err != EAGAIN && err != EACCES && err != EINTR) {
        throw IoError(store.where(op),
                      "cannot lock " + store.directory_ + "/.lock: " + errnoText(err));
      }
      if (Clock::now() >= deadline) {
        throw TimeoutError(store.where(op),
                           "timed out after " + std::to_string(store.timeout().count()) +
                               " ms waiting for the lock " + store.directory_ + "/.lock");
      }
      detail::backoffSleep(step, deadline, std::chrono::milliseconds(5));
    }
  }
  // Closing the descriptor releases the lock.

 private:
  Fd fd_;
};

FileStore::FileStore(std::string directory, const StoreOptions& options)
    : Store(options), directory_(std::move(directory)) {
  if (directory_.empty()) {
    throw InvalidArgument(Where{rank(), "FileStore", -1}, "the directory is empty");
  }
  while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
  // What is missing of the path is made for this user only (0700): the store's keys carry
  // host names, pids and addresses.
  for (std::size_t end = directory_.find('/', 1);; end = directory_.find('/', end + 1)) {
    const std::string part = directory_.substr(0, end);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      throw IoError(Where{rank(), "FileStore", -1},
                    "cannot create the store directory " + part + ": " + errnoText(err));
    }
    if (end == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(directory_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw IoError(Where{rank(), "FileStore", -1},
                  "cannot create the store directory " + directory_ + ": not a directory");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    static std::once_flag once;
    std::call_once(once, [&] {
      COLLX_WARN(kRdzv,
                 "the store directory {} may be written by other users (mode {:o}): they can "
                 "delete or replace its keys (a job with a secret still refuses what they "
                 "write); use a directory of your own",
                 directory_, st.st_mode & 07777);
    });
  }
}

std::unique_ptr<Store> FileStore::doReopen(const StoreOptions& options) const {
  return std::make_unique<FileStore>(directory_, options);
}

std::string FileStore::pathOf(const std::string& key) const {
  return directory_ + "/" + encodeKey(key);
}

bool FileStore::exists(const std::string& key) const {
  struct stat st {};
  return ::stat(pathOf(key).c_str(), &st) == 0;
}

std::optional<Bytes> FileStore::read(const std::string& key, std::string_view op) const {
  std::string path = pathOf(key);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (fd.get() < 0) {
    int err = errno;
    if (err == ENOENT) return std::nullopt;
    throw IoError(where(op), "cannot open " + path + ": " + errnoText(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    int err = errno;
    throw IoError(where(op), "cannot stat " + path + ": " + errnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    throw IoError(where(op), path + " is not a regular file: not a value this store wrote");
  }
  Bytes value(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::read(fd.get(), value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      throw IoError(where(op), "cannot read " + path + ": " + errnoText(err));
    }
    if (n == 0) break;  // the file is replaced, never truncated in place: cannot happen
    done += static_cast<std::size_t>(n);
  }
  value.resize(done);
  return value;
}

std::string FileStore::writeTemp(const Bytes& value, std::string_view op) const {
  static std::atomic<std::uint64_t> counter{0};
  std::string tmp = directory_ + "/.tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(counter.fetch_add(1));
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0) {
      int err = errno;
      throw IoError(where(op), "cannot create " + tmp + ": " + errnoText(err));
    }
    std::size_t done = 0;
    while (done < value.size()) {
      ssize_t n = ::write(fd.get(), value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw IoError(where(op), "cannot write " + tmp + ": " + errnoText(err));
      }
      done += static_cast<std::size_t>(n);
    }
  }
  return tmp;
}

void FileStore::commit(const std::string& tmp, const std::string& key, std::string_view op) {
  std::string path = pathOf(key);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(where(op), "cannot rename " + tmp + " to " + path + ": " + errnoText(err));
  }
}

// Values are written to temporary files outside the lock; only the renames are serialized
// with the read-modify-write operations.
void FileStore::doSet(const std::string& key, const Bytes& value) {
  std::string tmp = writeTemp(value, "set");
  Lock lock(*this, "set");
  commit(tmp, key, "set");
}

void FileStore::doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  std::vector<std::string> tmps;
  tmps.reserve(values.size());
  for (const Bytes& value : values) tmps.push_back(writeTemp(value, "multiSet"));
  Lock lock(*this, "multiSet");
  for (std::size_t i = 0; i < keys.size(); ++i) commit(tmps[i], keys[i], "multiSet");
}

void FileStore::write(const std::string& key, const Bytes& value, std::string_view op) {
  commit(writeTemp(value, op), key, op);
}

std::vector<std::string> FileStore::doWait(const std::vector<std::string>& keys,
                                           Clock::time_point deadline) {
  return detail::pollForKeys(keys, deadline, [&](const std::string& key) { return exists(key); });
}

std::vector<std::string> FileStore::doMultiGet(const std::vector<std::string>& keys,
                                               Clock::time_point deadline,
                                               std::vector<Bytes>& values) {
  std::vector<std::optional<Bytes>> found(keys.size());
  auto step = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (!found[i]) found[i] = read(keys[i], "get");
      if (!found[i]) missing.push_back(keys[i]);
    }
    if (missing.empty()) {
      values.clear();
      for (auto& value : found) values.push_back(std::move(*value));
      return missing;
    }
    if (Clock::now() >= deadline) return missing;
    detail::backoffSleep(step, deadline);
  }
}

std::int64_t FileStore::doAdd(const std::string& key, std::int64_t delta) {
  Lock lock(*this, "add");
  std::optional<Bytes> current = read(key, "add");
  std::int64_t result = detail::applyAdd(current ? &*current : nullptr, delta, key, where("add"));
  write(key, detail::formatCounter(result), "add");
  return result;
}

Bytes FileStore::doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Lock lock(*this, "compareSet");
  std::optional<Bytes> current = read(key, "compareSet");
  if (!current) {
    if (!expected.empty()) return Bytes();
  } else if (*current != expected) {
    return *current;
  }
  write(key, desired, "compareSet");
  return desired;
}

bool FileStore::doCheck(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    if (!exists(key)) return false;
  }
  return true;
}

bool FileStore::doErase(const std::string& key) {
  Lock lock(*this, "erase");
  std::string path = pathOf(key);
  if (::unlink(path.c_str()) == 0) return true;
  int err = errno;
  if (err == ENOENT) return false;
  throw IoError(where("erase"), "cannot remove " + path + ": " + errnoText(err));
}

}  // namespace collx::rendezvous
