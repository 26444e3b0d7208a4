#include "collx/algorithms/selection.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "collx/algorithms/settings.h"
#include "collx/base/check.h"
#include "collx/base/config.h"
#include "collx/base/error.h"
#include "collx/base/json_error.h"
#include "collx/base/units.h"

namespace collx::algorithms {

namespace {

constexpr std::uint64_t kAnyBytes = std::numeric_limits<std::uint64_t>::max();
constexpr int kAnyRanks = 1 << 30;

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw InvalidArgument(Where{-1, "selection rules", -1}, source + ": " + what);
}

// A value from the file as it appears in an error: at most `limit` bytes of it (cut at a
// UTF-8 character's start), so that a hostile or broken file cannot flood the message.
std::string cut(std::string_view text, std::size_t limit = kRulesEchoBytes) {
  if (text.size() <= limit) return std::string(text);
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "... (" + std::to_string(text.size()) + " bytes)";
}

// Closes the rules file's descriptor on every path out of fromFile().
class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() { ::close(fd_); }  // read only: nothing to lose
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;

 private:
  int fd_;
};

std::string validCollectives() {
  std::string out;
  for (Collective coll : collectives())
    out += (out.empty() ? "" : ", ") + std::string(collectiveName(coll));
  return out;
}

}  // namespace

Selection::Selection() {
  for (const SelectionRule& rule : defaultSelection()) {
    const AlgorithmInfo* info = findAlgorithm(rule.coll, rule.algorithm);
    COLLX_CHECK(info != nullptr);  // a table row naming a missing algorithm is a build bug
    rows_[static_cast<std::size_t>(rule.coll)].push_back(
        Row{rule.coll, rule.minRanks, rule.maxRanks, rule.minBytes, rule.maxBytes, info,
            "default table", rule.sharedOnly, true});
  }
}

const Selection& Selection::builtIn() {
  static const Selection kTable;
  return kTable;
}

Selection Selection::fromFile(const std::string& path, std::string_view origin) {
  const std::string source = std::string(origin) + " " + path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(source, std::string("cannot read the file: ") + std::strerror(errno));
  const FileCloser closer(fd);
  // The size before any byte is read; the reads stop one byte past the limit too, for a file
  // that grows meanwhile or reports no size (/proc, a pipe).
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    bad(source, std::string("cannot stat the file: ") + std::strerror(errno));
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > kMaxRulesFileBytes) {
    bad(source, "the file has " + std::to_string(st.st_size) + " bytes, more than the " +
                    formatBytes(kMaxRulesFileBytes) + " a rules file may have");
  }
  std::string text;
  char buffer[65536];
  while (text.size() <= kMaxRulesFileBytes) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) bad(source, std::string("cannot read the file: ") + std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  return fromJson(text, source);
}

Selection Selection::fromJson(std::string_view text, const std::string& source) {
  using Json = nlohmann::ordered_json;  // entries in file order
  if (text.size() > kMaxRulesFileBytes) {
    bad(source, "more than the " + formatBytes(kMaxRulesFileBytes) + " a rules file may have");
  }
  Json doc;
  try {
    // Rules nest three deep (collectives, their lists, the rules); anything much deeper is not
    // a rules file, and is refused before it is built.
    doc = Json::parse(text, [&source](int depth, Json::parse_event_t event, Json&) {
      if ((event == Json::parse_event_t::object_start ||
           event == Json::parse_event_t::array_start) &&
          depth >= kMaxRulesDepth) {
        bad(source, "nested more than " + std::to_string(kMaxRulesDepth) + " levels deep");
      }
      return true;
    });
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double ("1e999").
    bad(source, "not valid JSON: " + cut(jsonErrorText(e.what()), 2 * kRulesEchoBytes));
  }
  if (!doc.is_object()) bad(source, "the document must be an object of collectives");
  std::vector<Row> rules;
  for (const auto& [name, list] : doc.items()) {
    const Collective* coll = nullptr;
    for (const Collective& c : collectives()) {
      if (name == collectiveName(c)) coll = &c;
    }
    if (coll == nullptr) {
      bad(source, "unknown collective '" + cut(name) + "' (valid: " + validCollectives() + ")");
    }
    if (!list.is_array()) {
      bad(source, name + " must be an array of rules, not " + std::string(list.type_name()));
    }
    int index = 0;
    for (const Json& entry : list) {
      ++index;
      if (rules.size() >= kMaxRules) {
        bad(source, "more than " + std::to_string(kMaxRules) + " rules");
      }
      const std::string at = name + " entry " + std::to_string(index);
      if (!entry.is_object()) {
        bad(source, at + " must be an object, not " + std::string(entry.type_name()));
      }
      Row row{*coll, 1, kAnyRanks, 0, kAnyBytes, nullptr, source + ", " + at, false, false};
      for (const auto& item : entry.items()) {
        // (Named, not a structured binding: Clang 14 cannot capture those in the lambdas.)
        const std::string& field = item.key();
        const Json& value = item.value();
        // What the value is, for errors: "a string", or the number as written.
        auto shown = [&value] {
          return value.is_string() ? "'" + cut(value.get_ref<const std::string&>()) + "'"
                                   : cut(value.dump());
        };
        auto number = [&](std::int64_t min) -> std::int64_t {
          constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
          std::int64_t n = 0;
          bool whole = true;
          if (value.is_number_unsigned()) {
            n = static_cast<std::int64_t>(
                std::min<std::uint64_t>(value.get<std::uint64_t>(), kMax));
          } else if (value.is_number_integer()) {
            n = value.get<std::int64_t>();
          } else if (value.is_number_float()) {  // 4.0 is a whole number too
            const double d = value.get<double>();
            whole = d == std::floor(d) && std::abs(d) < 9.0e18;
            if (whole) n = static_cast<std::int64_t>(d);
          } else {
            whole = false;
          }
          if (!whole || n < min) {
            bad(source, at + ": " + field + " must be a whole number >= " + std::to_string(min) +
                            ", not " + shown());
          }
          return n;
        };
        auto bytes = [&]() -> std::uint64_t {
          if (value.is_number_unsigned()) return value.get<std::uint64_t>();
          if (value.is_number()) return static_cast<std::uint64_t>(number(0));
          if (value.is_string()) {
            const std::string& written = value.get_ref<const std::string&>();
            if (written == "inf") return kAnyBytes;
            try {
              return parseBytes(written, field);
            } catch (const std::exception&) {
              // The error below says what a byte count may be, in the rules file's terms.
            }
          }
          bad(source, at + ": " + field +
                          " must be a byte count such as 65536, \"64K\", \"1M\" or \"inf\", not " +
                          shown());
        };
        if (field == "algorithm") {
          if (!value.is_string()) bad(source, at + ": algorithm must be a string, not " + shown());
          const std::string& algorithm = value.get_ref<const std::string&>();
          row.algorithm = findAlgorithm(*coll, algorithm);
          if (row.algorithm == nullptr) {
            bad(source, at + ": unknown " + name + " algorithm '" + cut(algorithm) +
                            "' (valid: " + algorithmNames(*coll) + ")");
          }
        } else if (field == "min_ranks") {
          row.minRanks = static_cast<int>(std::min<std::int64_t>(number(1), kAnyRanks));
        } else if (field == "max_ranks") {
          row.maxRanks = static_cast<int>(std::min<std::int64_t>(number(1), kAnyRanks));
        } else if (field == "min_bytes") {
          row.minBytes = bytes();
        } else if (field == "max_bytes") {
          row.maxBytes = bytes();
        } else if (field == "max_hosts") {
          row.maxHosts = static_cast<int>(std::min<std::int64_t>(number(1), kAnyRanks));
        } else if (field == "shared_memory") {
          if (!value.is_boolean()) {
            bad(source, at + ": shared_memory must be true or false, not " + shown());
          }
          row.sharedOnly = value.get<bool>();
          row.notShared = !row.sharedOnly;
        } else {
          bad(source, at + ": unknown field '" + cut(field) +
                          "' (fields: min_ranks, max_ranks, min_bytes, max_bytes, "
                          "max_hosts, shared_memory, algorithm)");
        }
      }
      if (row.algorithm == nullptr) bad(source, at + " names no algorithm");
      if (row.notShared && row.algorithm->shared) {
        bad(source, at + ": " + row.algorithm->name +
                        " runs over shared memory only, and the row says shared_memory: false");
      }
      if (row.minRanks > row.maxRanks || row.minBytes > row.maxBytes) {
        bad(source, at + ": an empty range (min above max)");
      }
      rules.push_back(std::move(row));
    }
  }
  Selection selection;
  for (auto& rows : selection.rows_) rows.clear();
  for (Row& row : rules)
    selection.rows_[static_cast<std::size_t>(row.coll)].push_back(std::move(row));
  const Selection& table = builtIn();
  for (std::size_t c = 0; c < kCollectiveSlots; ++c) {
    auto& rows = selection.rows_[c];
    rows.insert(rows.end(), table.rows_[c].begin(), table.rows_[c].end());
  }
  return selection;
}

const Selection::Row* Selection::choose(Collective coll, int ranks, std::uint64_t bytes,
                                        bool shared) const {
  for (const Row& row : rows(coll)) {
    if ((row.algorithm->shared || row.sharedOnly) && !shared) continue;
    if (row.notShared && shared) continue;
    if (row.holds(ranks, bytes)) return &row;
  }
  return nullptr;
}

std::string Selection::rulesPath(const Config& config, std::string* origin) {
  if (origin != nullptr) *origin = "COLLX_RULES";
  if (std::optional<std::string> named = kRules.get(config)) {
    return *named == "none" ? std::string() : *named;
  }
  if (origin != nullptr) *origin = "rules file";
  std::vector<std::string> places;
  if (std::optional<std::string> xdg = config.env("XDG_CONFIG_HOME"); xdg && xdg->front() == '/') {
    places.push_back(*xdg + "/collx/rules.json");
  } else if (std::optional<std::string> home = config.env("HOME")) {
    places.push_back(*home + "/.config/collx/rules.json");
  }
  places.emplace_back("/etc/collx/rules.json");
  for (const std::string& place : places) {
    struct stat st {};
    if (::stat(place.c_str(), &st) == 0) return place;  // (unreadable: fromFile says so)
  }
  return {};
}

SelectionPolicy SelectionPolicy::fromConfig(const Config& config, bool sharedMemory, int hosts) {
  SelectionPolicy policy;
  policy.sharedMemory = sharedMemory;
  policy.hosts = hosts;
  policy.rulesPath = Selection::rulesPath(config, &policy.rulesOrigin);
  if (!policy.rulesPath.empty()) {
    policy.rules = std::make_shared<const Selection>(
        Selection::fromFile(policy.rulesPath, policy.rulesOrigin));
    policy.table = policy.rules.get();
  }
  for (Collective coll : collectives()) {
    // The setting's choices are the registry's names: a value it returns is an algorithm.
    std::optional<std::string> name = algorithmSetting(coll).get(config);
    if (!name) continue;
    policy.configured[static_cast<std::size_t>(coll)] = findAlgorithm(coll, *name);
  }
  return policy;
}

namespace {

// selectionBytes(), inlined where select() needs it.
inline std::uint64_t bytesOf(const ScheduleParams& p) noexcept {
  switch (p.coll) {
    case Collective::kAllgather:
      return p.count * p.elementSize * static_cast<std::uint64_t>(p.size);
    case Collective::kAllgatherv:
    case Collective::kReduceScatter: {
      // The whole buffer, which every rank knows (its own block differs between ranks with
      // per-rank counts).
      std::uint64_t total = 0;
      for (std::uint64_t c : p.counts) total += c;
      return total * p.elementSize;
    }
    default:
      return p.count * p.elementSize;
  }
}

}  // namespace

std::uint64_t selectionBytes(const ScheduleParams& p) noexcept { return bytesOf(p); }

ScheduleParams paramsOf(const UniformCall& call, int rank) {
  ScheduleParams p;
  p.coll = call.coll;
  p.rank = rank;
  p.size = call.ranks;
  // (alltoallv's counts are per peer only, as the API passes them.)
  p.count = call.coll == Collective::kAlltoallv ? 0 : call.count;
  p.elementSize = dataTypeSize(call.dtype);
  p.op = call.op;
  p.root = call.root;
  p.inPlace = call.inPlace;
  p.chunkBytes = call.chunkBytes;
  const auto P = static_cast<std::size_t>(call.ranks);
  switch (call.coll) {
    case Collective::kAllgatherv:
    case Collective::kReduceScatter:
    case Collective::kGather:
    case Collective::kGatherv:
    case Collective::kScatter:
    case Collective::kScatterv:
    case Collective::kAlltoall:
    case Collective::kAlltoallv:
      p.counts.assign(P, call.count);
      p.displs.resize(P);
      for (std::size_t i = 0; i < P; ++i) p.displs[i] = i * call.count;
      if (call.coll == Collective::kAlltoall || call.coll == Collective::kAlltoallv) {
        p.recvCounts = p.counts;
        p.recvDispls = p.displs;
      }
      if (call.coll == Collective::kAlltoallv) p.countMatrix.assign(P * P, call.count);
      break;
    default:
      break;
  }
  return p;
}

Choice defaultChoice(const UniformCall& call, const SelectionPolicy& policy) {
  return select(paramsOf(call, 0), policy);
}

const char* algorithmVariable(Collective coll) noexcept {
  static const auto kNames = [] {
    std::array<std::string, kCollectiveSlots> names;
    for (Collective c : collectives()) {
      std::string name = std::string("COLLX_") + collectiveName(c) + "_ALGO";
      for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      names[static_cast<std::size_t>(c)] = std::move(name);
    }
    return names;
  }();
  return kNames[static_cast<std::size_t>(coll) % kCollectiveSlots].c_str();
}

namespace {

enum class Refusal { kNone, kSharedMemory, kRankOrder };

// Whether `info` can take the call in this job (its prerequisites).
Refusal refusal(const AlgorithmInfo& info, const ScheduleParams& p,
                const SelectionPolicy& policy) noexcept {
  if (info.shared && !policy.sharedMemory) return Refusal::kSharedMemory;
  if (!p.commutative && !info.keepsOrder) return Refusal::kRankOrder;
  return Refusal::kNone;
}

std::string orderKeepingAlgorithms(Collective coll) {
  std::string out;
  for (const auto& info : algorithmRegistry()) {
    if (info.coll == coll && info.keepsOrder)
      out += (out.empty() ? "" : ", ") + std::string(info.name);
  }
  return out.empty() ? "none" : out;
}

// An algorithm a call or COLLX_<COLL>_ALGO named: it must take the call.
Choice named(const AlgorithmInfo& info, const ScheduleParams& p, const SelectionPolicy& policy,
             const char* source, const ReduceOp* op) {
  const char* what = collectiveName(p.coll);
  switch (refusal(info, p, policy)) {
    case Refusal::kNone:
      return Choice{&info, source};
    case Refusal::kSharedMemory:
      throw InvalidArgument(
          Where{p.rank, what, -1},
          std::string(what) + " algorithm '" + info.name + "' (from " + source +
              (policy.subContext ? ") needs a shared-memory group of its own, which this "
                                   "sub-context (Context::split) did not get: its ranks do not "
                                   "all share memory, it has one rank, or some member had no "
                                   "free slot (at most 8 sub-groups at once)"
                                 : ") needs every rank on this host over shared memory, which "
                                   "this job's ranks are not"));
    case Refusal::kRankOrder:
      throw InvalidArgument(Where{p.rank, what, -1},
                            "reduce op '" + (op != nullptr ? op->name() : std::string("custom")) +
                                "' is not commutative and " + what + " algorithm '" + info.name +
                                "' (from " + source +
                                ") does not keep rank order (algorithms that do: " +
                                orderKeepingAlgorithms(p.coll) + ")");
  }
  return Choice{&info, source};
}

}  // namespace

namespace {

// The first algorithm of the collective that can take the call, when no row did.
Choice lastResort(const ScheduleParams& p, const SelectionPolicy& policy, const ReduceOp* op) {
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll == p.coll && refusal(info, p, policy) == Refusal::kNone) {
      return Choice{&info, "registry (no row takes the call)"};
    }
  }
  const char* what = collectiveName(p.coll);
  if (!p.commutative) {
    throw InvalidArgument(Where{p.rank, what, -1},
                          "reduce op '" + (op != nullptr ? op->name() : std::string("custom")) +
                              "' is not commutative and no " + what +
                              " algorithm keeps rank order");
  }
  throw Unsupported(Where{p.rank, what, -1}, std::string("no ") + what + " algorithm for " +
                                                 std::to_string(p.size) + " ranks and " +
                                                 std::to_string(bytesOf(p)) + " bytes");
}

// The first row, from `from` on, that holds and whose algorithm can take the call.
const Selection::Row* firstRow(const std::vector<Selection::Row>& rows, std::size_t from,
                               std::size_t to, const ScheduleParams& p,
                               const SelectionPolicy& policy, std::uint64_t bytes) noexcept {
  for (std::size_t i = from; i < to; ++i) {
    const Selection::Row& row = rows[i];
    if (!row.holds(p.size, bytes) || (row.sharedOnly && !policy.sharedMemory) ||
        (row.notShared && policy.sharedMemory) || policy.hosts > row.maxHosts ||
        refusal(*row.algorithm, p, policy) != Refusal::kNone) {
      continue;
    }
    return &row;
  }
  return nullptr;
}

// The rules file's rows, then the host rule, then the built-in rows.
Choice acrossHosts(const ScheduleParams& p, const SelectionPolicy& policy, const ReduceOp* op) {
  const std::vector<Selection::Row>& rows = policy.table->rows(p.coll);
  const std::uint64_t bytes = bytesOf(p);
  std::size_t builtIn = 0;
  while (builtIn < rows.size() && !rows[builtIn].builtIn) ++builtIn;
  if (const Selection::Row* row = firstRow(rows, 0, builtIn, p, policy, bytes)) {
    return Choice{row->algorithm, row->source.c_str()};
  }
  // The built-in table gives way to the algorithms made for jobs over hosts; every rank
  // decides alike, from the same host layout.
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll == p.coll && info.acrossHosts && refusal(info, p, policy) == Refusal::kNone) {
      return Choice{&info, "default table (hosts)"};
    }
  }
  if (const Selection::Row* row = firstRow(rows, builtIn, rows.size(), p, policy, bytes)) {
    return Choice{row->algorithm, row->source.c_str()};
  }
  return lastResort(p, policy, op);
}

}  // namespace

std::vector<const AlgorithmInfo*> eligibleAlgorithms(const ScheduleParams& p,
                                                     const SelectionPolicy& policy) {
  std::vector<const AlgorithmInfo*> out;
  for (const AlgorithmInfo& info : algorithmRegistry()) {
    if (info.coll == p.coll && refusal(info, p, policy) == Refusal::kNone) out.push_back(&info);
  }
  return out;
}

Choice select(const ScheduleParams& p, const SelectionPolicy& policy, std::string_view name,
              const ReduceOp* op) {
  if (!name.empty()) [[unlikely]] {
    const AlgorithmInfo* info = findAlgorithm(p.coll, name);
    if (info == nullptr) {
      throw InvalidArgument(Where{p.rank, collectiveName(p.coll), -1},
                            "unknown " + std::string(collectiveName(p.coll)) + " algorithm '" +
                                std::string(name) +
                                "' (from options; valid: " + algorithmNames(p.coll) + ")");
    }
    return named(*info, p, policy, "options", op);
  }
  const auto slot = static_cast<std::size_t>(p.coll) % kCollectiveSlots;
  if (const AlgorithmInfo* info = policy.configured[slot]) [[unlikely]] {
    return named(*info, p, policy, algorithmVariable(p.coll), op);
  }
  if (policy.hosts > 1 && policy.hosts < p.size) [[unlikely]]
    return acrossHosts(p, policy, op);
  // The common case, on every call: the first row that holds and can take the call.
  const std::vector<Selection::Row>& rows = policy.table->rows(p.coll);
  const std::uint64_t bytes = bytesOf(p);
  if (const Selection::Row* row = firstRow(rows, 0, rows.size(), p, policy, bytes)) [[likely]] {
    return Choice{row->algorithm, row->source.c_str()};
  }
  return lastResort(p, policy, op);
}

}  // namespace collx::algorithms
