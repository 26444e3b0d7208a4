#include "collx/base/setting.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <type_traits>

#include "collx/base/echo.h"
#include "collx/base/error.h"
#include "collx/base/units.h"

namespace collx {

namespace {

// The registry: a function-local static, so that declarations in any file, initialized in
// any order, find it built.
struct Registry {
  std::mutex mutex;
  std::vector<const SettingInfo*> all;
};

Registry& registry() {
  static Registry instance;
  return instance;
}

[[noreturn]] void badText(std::string_view what, std::string_view text,
                          const std::string& expected) {
  throw InvalidArgument(Where{-1, "config", -1},
                        std::string(what) + "='" + echoText(text) + "': expected " + expected);
}

// ---- formatting: values as a user would write them, and parsers read back ----

std::string format(kind::Integer, std::int64_t value) { return std::to_string(value); }

std::string format(kind::Bytes, std::uint64_t value) {
  static const char* const kUnits[] = {"", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && value >= 1024 && value % 1024 == 0) {
    value /= 1024;
    ++unit;
  }
  return std::to_string(value) + kUnits[unit];
}

std::string format(kind::Duration, std::chrono::milliseconds value) {
  if (value.count() % 1000 == 0) return std::to_string(value.count() / 1000) + "s";
  return std::to_string(value.count()) + "ms";
}

std::string format(kind::Bool, bool value) { return value ? "1" : "0"; }
std::string format(kind::String, const std::string& value) { return value; }
std::string format(kind::Choice, const std::string& value) { return value; }

// ---- parsing without the range ----

std::int64_t parseText(kind::Integer, std::string_view text, std::string_view what) {
  return parseInt(text, std::numeric_limits<std::int64_t>::min(),
                  std::numeric_limits<std::int64_t>::max(), what);
}
std::uint64_t parseText(kind::Bytes, std::string_view text, std::string_view what) {
  return parseBytes(text, what);
}
std::chrono::milliseconds parseText(kind::Duration, std::string_view text, std::string_view what) {
  return parseDuration(text, what);
}
bool parseText(kind::Bool, std::string_view text, std::string_view what) {
  std::string lower;
  for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "0" || lower == "false" || lower == "no" || lower == "off") return false;
  badText(what, text, "a boolean (1/0, true/false, yes/no, on/off)");
}
std::string parseText(kind::String, std::string_view text, std::string_view) {
  return std::string(text);
}
std::string parseText(kind::Choice, std::string_view text, std::string_view) {
  return std::string(text);
}

// ---- ranges: what they say, and whether they hold a value ----

std::string rangeText(const kind::Integer::Range& r) {
  const bool low = r.min != std::numeric_limits<std::int64_t>::min();
  const bool high = r.max != std::numeric_limits<std::int64_t>::max();
  if (low && high) return "[" + std::to_string(r.min) + ", " + std::to_string(r.max) + "]";
  if (low) return "at least " + std::to_string(r.min);
  if (high) return "at most " + std::to_string(r.max);
  return "";
}

std::string rangeText(const kind::Bytes::Range& r) {
  std::string text;
  if (r.max != std::numeric_limits<std::uint64_t>::max()) {
    text = "[" + format(kind::Bytes{}, r.min) + ", " + format(kind::Bytes{}, r.max) + "]";
  } else if (r.min > 0) {
    text = "at least " + format(kind::Bytes{}, r.min);
  }
  if (r.powerOfTwo) text += std::string(text.empty() ? "" : ", ") + "a power of two";
  if (r.multiple > 1) {
    text += std::string(text.empty() ? "" : ", ") + "a multiple of " + std::to_string(r.multiple);
  }
  return text;
}

std::string rangeText(const kind::Duration::Range& r) {
  const bool high = r.max != std::chrono::milliseconds::max();
  if (high)
    return "[" + format(kind::Duration{}, r.min) + ", " + format(kind::Duration{}, r.max) + "]";
  if (r.min > std::chrono::milliseconds::zero())
    return "at least " + format(kind::Duration{}, r.min);
  return "";
}

std::string rangeText(const kind::Bool::Range&) { return "1/0, true/false, yes/no, on/off"; }
std::string rangeText(const kind::String::Range&) { return ""; }

std::string rangeText(const kind::Choice::Range& r) {
  std::string text;
  for (const std::string& word : r.words()) text += (text.empty() ? "" : ", ") + word;
  return text;
}

// What an error says was expected.
std::string expected(const kind::Integer::Range& r) {
  const std::string range = rangeText(r);
  if (range.empty()) return "an integer";
  return range[0] == '[' ? "an integer in " + range : "an integer of " + range;
}

std::string expected(const kind::Bytes::Range& r) {
  std::string text = "a size";
  if (r.max != std::numeric_limits<std::uint64_t>::max()) {
    text += " in [" + format(kind::Bytes{}, r.min) + ", " + format(kind::Bytes{}, r.max) + "]";
  } else if (r.min > 0) {
    text += " of at least " + format(kind::Bytes{}, r.min);
  }
  if (r.powerOfTwo) text += " that is a power of two";
  if (r.multiple > 1) text += " that is a multiple of " + std::to_string(r.multiple);
  return text;
}

std::string expected(const kind::Duration::Range& r) {
  const std::string range = rangeText(r);
  if (range.empty()) return "a duration";
  return range[0] == '[' ? "a duration in " + range : "a duration of " + range;
}

std::string expected(const kind::Bool::Range&) {
  return "a boolean (1/0, true/false, yes/no, on/off)";
}
std::string expected(const kind::String::Range&) { return "any text"; }
std::string expected(const kind::Choice::Range& r) { return "one of " + rangeText(r); }

bool holds(const kind::Integer::Range& r, std::int64_t v) { return v >= r.min && v <= r.max; }
bool holds(const kind::Bytes::Range& r, std::uint64_t v) {
  return v >= r.min && v <= r.max && (r.multiple <= 1 || v % r.multiple == 0) &&
         (!r.powerOfTwo || (v != 0 && (v & (v - 1)) == 0));
}
bool holds(const kind::Duration::Range& r, std::chrono::milliseconds v) {
  return v >= r.min && v <= r.max;
}
bool holds(const kind::Bool::Range&, bool) { return true; }
bool holds(const kind::String::Range&, const std::string&) { return true; }
bool holds(const kind::Choice::Range& r, const std::string& v) {
  const std::vector<std::string> words = r.words();
  return std::find(words.begin(), words.end(), v) != words.end();
}

}  // namespace

const char* settingTypeName(SettingType type) noexcept {
  switch (type) {
    case SettingType::kInteger:
      return "integer";
    case SettingType::kBytes:
      return "bytes";
    case SettingType::kDuration:
      return "duration";
    case SettingType::kBool:
      return "bool";
    case SettingType::kString:
      return "string";
    case SettingType::kChoice:
      return "choice";
  }
  return "?";
}

// ---- SettingInfo and the registry ----

SettingInfo::SettingInfo(std::string name, std::string component, SettingType type, bool automatic,
                         std::string help)
    : name_(std::move(name)),
      component_(std::move(component)),
      type_(type),
      automatic_(automatic),
      help_(std::move(help)) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.all.push_back(this);
}

SettingInfo::~SettingInfo() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.all.erase(std::remove(r.all.begin(), r.all.end(), this), r.all.end());
}

bool SettingInfo::isSet(const Config& config) const { return config.env(name_).has_value(); }

const char* SettingInfo::source(const Config& config) const {
  if (isSet(config)) return "environment";
  return automatic_ ? "automatic" : "default";
}

std::vector<const SettingInfo*> settings() {
  Registry& r = registry();
  std::vector<const SettingInfo*> all;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    all = r.all;
  }
  std::stable_sort(all.begin(), all.end(), [](const SettingInfo* a, const SettingInfo* b) {
    return a->name() < b->name();
  });
  return all;
}

const SettingInfo* findSetting(std::string_view name) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const SettingInfo* setting : r.all) {
    if (setting->name() == name) return setting;
  }
  return nullptr;
}

// ---- kind::Choice::Range ----

kind::Choice::Range::Range(std::initializer_list<const char*> words)
    : Range(std::vector<std::string>(words.begin(), words.end())) {}

kind::Choice::Range::Range(std::vector<std::string> words)
    : words_([words = std::move(words)] { return words; }) {}

kind::Choice::Range::Range(std::function<std::vector<std::string>()> words)
    : words_(std::move(words)) {}

std::vector<std::string> kind::Choice::Range::words() const { return words_(); }

// ---- TypedSetting, Setting, AutoSetting ----

namespace {

template <typename Kind, typename Declared>
typename Kind::Range declaredRange(const Declared& d) {
  if constexpr (std::is_same_v<Kind, kind::Bool> || std::is_same_v<Kind, kind::String>) {
    return {};
  } else {
    return d.range;
  }
}

}  // namespace

template <typename Kind>
TypedSetting<Kind>::TypedSetting(std::string name, std::string component, bool automatic,
                                 std::string help, Range range)
    : SettingInfo(std::move(name), std::move(component), Kind::kType, automatic, std::move(help)),
      range_(std::move(range)) {}

template <typename Kind>
typename TypedSetting<Kind>::Value TypedSetting<Kind>::parse(std::string_view text,
                                                             std::string_view what) const {
  if (text.size() > kMaxSettingBytes) {
    // Before the value is read, and without it: a secret's text is never shown.
    throw InvalidArgument(Where{-1, "config", -1},
                          std::string(what) + ": a value of " + std::to_string(text.size()) +
                              " bytes, more than the " + std::to_string(kMaxSettingBytes) +
                              " a setting may have");
  }
  Value value = parseText(Kind{}, text, what);
  if (!holds(range_, value)) {
    badText(what, this->hidden() ? std::string_view(kHiddenText) : text, expected(range_));
  }
  return value;
}

template <typename Kind>
typename TypedSetting<Kind>::Value TypedSetting<Kind>::check(const Value& value,
                                                             std::string_view what) const {
  if (holds(range_, value)) return value;
  throw InvalidArgument(
      Where{-1, "config", -1},
      std::string(what) + "=" + (this->hidden() ? kHiddenText : echoText(format(value))) +
          ": expected " + expected(range_) + (what == name() ? "" : " (as " + name() + ")"));
}

template <typename Kind>
std::optional<typename TypedSetting<Kind>::Value> TypedSetting<Kind>::find(
    const Config& config) const {
  if (auto text = config.env(name())) return parse(*text, name());
  return std::nullopt;
}

template <typename Kind>
std::string TypedSetting<Kind>::range() const {
  return rangeText(range_);
}

template <typename Kind>
std::string TypedSetting<Kind>::format(const Value& value) {
  return collx::format(Kind{}, value);
}

template <typename Kind>
Setting<Kind>::Setting(Declaration d)
    : TypedSetting<Kind>(std::move(d.name), std::move(d.component), false, std::move(d.help),
                         declaredRange<Kind>(d)),
      default_(std::move(d.defaultValue)) {}

template <typename Kind>
typename Setting<Kind>::Value Setting<Kind>::get(const Config& config) const {
  auto value = this->find(config);
  return value ? std::move(*value) : default_;
}

template <typename Kind>
std::string Setting<Kind>::defaultText() const {
  return this->format(default_);
}

template <typename Kind>
std::string Setting<Kind>::valueText(const Config& config) const {
  return this->format(get(config));
}

template <typename Kind>
AutoSetting<Kind>::AutoSetting(Declaration d)
    : TypedSetting<Kind>(std::move(d.name), std::move(d.component), true, std::move(d.help),
                         declaredRange<Kind>(d)),
      automatic_(std::move(d.automatic)) {
  if constexpr (requires { d.hidden; }) {
    if (d.hidden) this->hide();
    shown_ = d.shown;
  }
}

template <typename Kind>
std::string AutoSetting<Kind>::valueText(const Config& config) const {
  auto value = get(config);
  if (!value) return std::string();
  if (this->hidden()) return SettingInfo::kHiddenText;
  return shown_ != nullptr ? shown_(this->format(*value)) : this->format(*value);
}

template class TypedSetting<kind::Integer>;
template class TypedSetting<kind::Bytes>;
template class TypedSetting<kind::Duration>;
template class TypedSetting<kind::Bool>;
template class TypedSetting<kind::String>;
template class TypedSetting<kind::Choice>;
template class Setting<kind::Integer>;
template class AutoSetting<kind::Integer>;
template class Setting<kind::Bytes>;
template class AutoSetting<kind::Bytes>;
template class Setting<kind::Duration>;
template class AutoSetting<kind::Duration>;
template class Setting<kind::Bool>;
template class AutoSetting<kind::Bool>;
template class Setting<kind::String>;
template class AutoSetting<kind::String>;
template class Setting<kind::Choice>;
template class AutoSetting<kind::Choice>;

}  // namespace collx
