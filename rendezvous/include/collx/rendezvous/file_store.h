// FileStore: a Store in a directory, shared by processes on one host or, on a shared
// filesystem, across hosts. One file per key; writes go to a temporary file renamed into
// place (atomic), read-modify-write operations (add, compareSet) and every mutation hold an
// open-file-description lock on <dir>/.lock. Waiting polls with a short backoff (1..20 ms).
#pragma once

#include "collx/rendezvous/store.h"

namespace collx::rendezvous {

class FileStore final : public Store {
 public:
  // Creates `directory` (and its parents) when missing. The directory is not removed by the
  // store: it is shared; whoever created it for a job removes it (collx-run does).
  explicit FileStore(std::string directory, const StoreOptions& options = {});

  std::string describe() const override { return "file://" + directory_; }
  const std::string& directory() const noexcept { return directory_; }

 protected:
  void doSet(const std::string& key, const Bytes& value) override;
  void doMultiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  std::vector<std::string> doWait(const std::vector<std::string>& keys,
                                  Clock::time_point deadline) override;
  std::vector<std::string> doMultiGet(const std::vector<std::string>& keys,
                                      Clock::time_point deadline,
                                      std::vector<Bytes>& values) override;
  std::int64_t doAdd(const std::string& key, std::int64_t delta) override;
  Bytes doCompareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool doCheck(const std::vector<std::string>& keys) override;
  bool doErase(const std::string& key) override;
  std::unique_ptr<Store> doReopen(const StoreOptions& options) const override;

 private:
  class Lock;
  std::string pathOf(const std::string& key) const;
  bool exists(const std::string& key) const;
  // The value, or std::nullopt when the key does not exist.
  std::optional<Bytes> read(const std::string& key, std::string_view op) const;
  // Writes `value` to a new temporary file and returns its path.
  std::string writeTemp(const Bytes& value, std::string_view op) const;
  // Renames a temporary file into place (atomic); callers hold the lock.
  void commit(const std::string& tmp, const std::string& key, std::string_view op);
  // writeTemp + commit, for callers that hold the lock.
  void write(const std::string& key, const Bytes& value, std::string_view op);

  std::string directory_;
};

}  // namespace collx::rendezvous
