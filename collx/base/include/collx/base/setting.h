// Settings: every COLLX_* environment variable collx reads, each declared once, in the file
// that reads it, with its type, range, default and help (in the spirit of NCCL's NCCL_PARAM
// and UCC's per-component configuration tables):
//
//   const Setting<kind::Integer> kTcpStreams({
//       .name = "COLLX_TCP_STREAMS",
//       .component = "transport.tcp",
//       .defaultValue = 1,
//       .range = {1, 64},
//       .help = "TCP connections per peer; ..."});
//   const AutoSetting<kind::Integer> kSpinUs({..., .automatic = "50 unless ...", ...});
//   ...
//   options.tcpStreams = static_cast<int>(kTcpStreams.get(config));
//
// A declaration registers itself, so collx-info, collx.config() and the typo check
// (Config::unknownVariables; collx::warnUnknownVariables runs it where every layer is loaded)
// list every setting of the layers in the program, and code reads a setting only through its
// declaration's typed accessor. A value that does not parse or
// lies outside the range throws InvalidArgument naming the variable, the value and what was
// expected: "COLLX_TCP_STREAMS='100': expected an integer in [1, 64]". Precedence
// everywhere: an explicit option in code > the environment > the declared default.
//
// Declarations are namespace-scope objects: they register during static initialization, in
// a registry that is a function-local static (so the order of files does not matter), and
// are read at run time only, never by another static initializer. In a static link, a
// declaration is registered when its object file is linked, that is when its reader is;
// declare a setting in the file whose functions read it.
//
// C++17 users include this header too (the PyTorch extension reads its setting through it).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collx/base/config.h"

namespace collx {

// The longest value a setting takes (a path, a list of levels): longer text is refused
// unread, and no error repeats it.
inline constexpr std::size_t kMaxSettingBytes = 4096;

enum class SettingType { kInteger, kBytes, kDuration, kBool, kString, kChoice };

// "integer", "bytes", "duration", "bool", "string", "choice".
const char* settingTypeName(SettingType type) noexcept;

// A setting as the registry, collx-info, collx.config() and the typo check see it, whatever
// its type.
class SettingInfo {
 public:
  SettingInfo(const SettingInfo&) = delete;
  SettingInfo& operator=(const SettingInfo&) = delete;

  const std::string& name() const noexcept { return name_; }
  // Who reads it: "bootstrap", "rendezvous", "transport.tcp", "algorithms.selection", ...
  const std::string& component() const noexcept { return component_; }
  const std::string& help() const noexcept { return help_; }
  SettingType type() const noexcept { return type_; }
  // Unset means "computed by the code that reads it" (defaultText() says how): such a
  // setting has no fixed default.
  bool automatic() const noexcept { return automatic_; }

  // The values it accepts, e.g. "[1, 64]", "[4KiB, 1GiB], a power of two", "at least 1ms",
  // "auto, tcp, shm"; empty when any text is accepted.
  virtual std::string range() const = 0;
  // The default as a value would be written ("300s", "256KiB", "auto"); for an automatic
  // setting, the rule that computes it.
  virtual std::string defaultText() const = 0;
  // Whether `config`'s environment sets it (a variable set to "" counts as unset).
  bool isSet(const Config& config) const;
  // The value in effect in `config`, written like defaultText() (empty when an automatic
  // setting is unset). Throws InvalidArgument as reading it would.
  virtual std::string valueText(const Config& config) const = 0;
  // Where the value in effect comes from: "environment", "default" or "automatic".
  const char* source(const Config& config) const;
  // A secret: valueText() is kHiddenText when it is set, and nothing shows its value.
  bool hidden() const noexcept { return hidden_; }
  static constexpr const char* kHiddenText = "(set, hidden)";

 protected:
  SettingInfo(std::string name, std::string component, SettingType type, bool automatic,
              std::string help);
  ~SettingInfo();
  void hide() noexcept { hidden_ = true; }

 private:
  std::string name_;
  std::string component_;
  SettingType type_;
  bool automatic_;
  std::string help_;
  bool hidden_ = false;
};

// Every registered setting, sorted by name (a name declared twice appears twice: a bug the
// tests catch).
std::vector<const SettingInfo*> settings();
// The registered setting called `name`, or nullptr.
const SettingInfo* findSetting(std::string_view name) noexcept;

// The kinds of values, each with its parser (collx/base/units.h) and its range.
namespace kind {

struct Integer {
  using Value = std::int64_t;
  struct Range {
    Range() = default;  // any integer
    Range(std::int64_t low, std::int64_t high) : min(low), max(high) {}
    std::int64_t min = std::numeric_limits<std::int64_t>::min();
    std::int64_t max = std::numeric_limits<std::int64_t>::max();
  };
  static constexpr SettingType kType = SettingType::kInteger;
};

// Sizes as parseBytes reads them ("4096", "64K", "1.5M", "2GiB").
struct Bytes {
  using Value = std::uint64_t;
  struct Range {
    Range() = default;  // any size
    Range(std::uint64_t low, std::uint64_t high) : min(low), max(high) {}
    static Range powersOfTwo(std::uint64_t low, std::uint64_t high) {
      Range r(low, high);
      r.powerOfTwo = true;
      return r;
    }
    static Range multiplesOf(std::uint64_t unit, std::uint64_t low, std::uint64_t high) {
      Range r(low, high);
      r.multiple = unit;
      return r;
    }
    std::uint64_t min = 0;
    std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t multiple = 1;
    bool powerOfTwo = false;
  };
  static constexpr SettingType kType = SettingType::kBytes;
};

// Durations as parseDuration reads them ("30s", "500ms", "2m"; a plain number is seconds).
struct Duration {
  using Value = std::chrono::milliseconds;
  struct Range {
    Range() = default;                                                    // any duration
    Range(Value low, Value high = Value::max()) : min(low), max(high) {}  // NOLINT: implicit
    Value min = Value::zero();
    Value max = Value::max();
  };
  static constexpr SettingType kType = SettingType::kDuration;
};

// 1/0, true/false, yes/no, on/off, in any case.
struct Bool {
  using Value = bool;
  struct Range {};
  static constexpr SettingType kType = SettingType::kBool;
};

// Any text; the reader checks it (a URL, a log spec, a file name).
struct String {
  using Value = std::string;
  struct Range {};
  static constexpr SettingType kType = SettingType::kString;
};

// One of a set of words.
struct Choice {
  using Value = std::string;
  class Range {
   public:
    Range(std::initializer_list<const char*> words);
    explicit Range(std::vector<std::string> words);
    // Words computed when first needed (e.g. from a registry that is not built yet while
    // declarations register).
    explicit Range(std::function<std::vector<std::string>()> words);
    std::vector<std::string> words() const;

   private:
    std::function<std::vector<std::string>()> words_;
  };
  static constexpr SettingType kType = SettingType::kChoice;
};

}  // namespace kind

namespace detail {

// What a declaration states, field by field (designated initializers); the kinds that accept
// any value (Bool, String) have no `range`.
template <typename Kind>
struct Declaration {
  std::string name;
  std::string component;
  typename Kind::Value defaultValue;
  typename Kind::Range range;
  std::string help;
};
template <typename Kind>
struct AutoDeclaration {
  std::string name;
  std::string component;
  std::string automatic;
  typename Kind::Range range;
  std::string help;
};
template <>
struct Declaration<kind::Bool> {
  std::string name;
  std::string component;
  bool defaultValue;
  std::string help;
};
template <>
struct Declaration<kind::String> {
  std::string name;
  std::string component;
  std::string defaultValue;
  std::string help;
};
template <>
struct AutoDeclaration<kind::Bool> {
  std::string name;
  std::string component;
  std::string automatic;
  std::string help;
};
template <>
struct AutoDeclaration<kind::String> {
  std::string name;
  std::string component;
  std::string automatic;
  std::string help;
  // A secret (COLLX_JOB_SECRET): its value is never shown (valueText says only that it is
  // set).
  bool hidden = false;
  // How its value is shown when not hidden (a URL without its password); nullptr: as it is.
  std::string (*shown)(std::string_view value) = nullptr;
};

}  // namespace detail

// What a setting of kind Kind accepts, whether it has a default or not. Kind is one of
// kind::Integer, Bytes, Duration, Bool, String, Choice (instantiated in setting.cc).
template <typename Kind>
class TypedSetting : public SettingInfo {
 public:
  using Value = typename Kind::Value;
  using Range = typename Kind::Range;

  const Range& accepted() const noexcept { return range_; }
  // `text` read as this setting's kind and range, naming `what` in errors: the same
  // quantity given another way (another launcher's variable, an option given as text).
  Value parse(std::string_view text, std::string_view what) const;
  // `value`, given in code (an explicit option), if the range holds it; else throws
  // InvalidArgument naming `what` and this setting.
  Value check(const Value& value, std::string_view what) const;
  // The environment's value, or std::nullopt when unset. Throws InvalidArgument naming the
  // variable, the value and the range.
  std::optional<Value> find(const Config& config) const;

  std::string range() const override;

 protected:
  TypedSetting(std::string name, std::string component, bool automatic, std::string help,
               Range range);
  ~TypedSetting() = default;
  // A value written as defaultText() is.
  static std::string format(const Value& value);

 private:
  Range range_;
};

// A setting with a fixed default.
template <typename Kind>
class Setting final : public TypedSetting<Kind> {
 public:
  using Value = typename Kind::Value;
  using Declaration = detail::Declaration<Kind>;

  explicit Setting(Declaration declaration);

  // The environment's value if set, else the default. Throws InvalidArgument naming the
  // variable, the value and the range.
  Value get(const Config& config) const;
  const Value& defaultValue() const noexcept { return default_; }

  std::string defaultText() const override;
  std::string valueText(const Config& config) const override;

 private:
  Value default_;
};

// A setting whose value, when unset, the code that reads it computes (from the world size,
// the CPUs, another launcher's variables...); `automatic` describes how, for collx-info.
template <typename Kind>
class AutoSetting final : public TypedSetting<Kind> {
 public:
  using Value = typename Kind::Value;
  using Declaration = detail::AutoDeclaration<Kind>;

  explicit AutoSetting(Declaration declaration);

  // The environment's value, or std::nullopt when unset (the reader computes it). Throws
  // InvalidArgument naming the variable, the value and the range.
  std::optional<Value> get(const Config& config) const { return this->find(config); }

  std::string defaultText() const override { return automatic_; }
  std::string valueText(const Config& config) const override;

 private:
  std::string automatic_;
  std::string (*shown_)(std::string_view value) = nullptr;
};

// Instantiated in setting.cc, for these kinds only.
extern template class TypedSetting<kind::Integer>;
extern template class TypedSetting<kind::Bytes>;
extern template class TypedSetting<kind::Duration>;
extern template class TypedSetting<kind::Bool>;
extern template class TypedSetting<kind::String>;
extern template class TypedSetting<kind::Choice>;
extern template class Setting<kind::Integer>;
extern template class AutoSetting<kind::Integer>;
extern template class Setting<kind::Bytes>;
extern template class AutoSetting<kind::Bytes>;
extern template class Setting<kind::Duration>;
extern template class AutoSetting<kind::Duration>;
extern template class Setting<kind::Bool>;
extern template class AutoSetting<kind::Bool>;
extern template class Setting<kind::String>;
extern template class AutoSetting<kind::String>;
extern template class Setting<kind::Choice>;
extern template class AutoSetting<kind::Choice>;

}  // namespace collx
