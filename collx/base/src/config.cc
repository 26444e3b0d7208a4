#include "collx/base/config.h"

#include <algorithm>
#include <stdexcept>

#include "collx/base/setting.h"

extern char** environ;

namespace collx {

namespace {

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

Config::Config(Environment env) : env_(std::move(env)) {
  std::erase_if(env_, [](const auto& entry) { return entry.second.empty(); });
}

Config Config::fromProcessEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view item(*entry);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return Config(std::move(env));
}

const Config& Config::process() {
  static const Config config = fromProcessEnvironment();
  return config;
}

std::optional<std::string> Config::env(std::string_view name) const {
  auto it = env_.find(name);
  if (it == env_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Config::unknownVariables() const {
  const std::vector<const SettingInfo*> known = settings();
  std::vector<std::string> unknown;
  for (const auto& [name, value] : env_) {
    if (name.rfind("COLLX_", 0) != 0 || findSetting(name) != nullptr) continue;
    std::string entry = name;
    std::size_t best = 4;
    for (const SettingInfo* setting : known) {
      std::size_t distance = editDistance(name, setting->name());
      if (distance < best) {
        best = distance;
        entry = name + " (did you mean " + setting->name() + "?)";
      }
    }
    unknown.push_back(entry);
  }
  return unknown;
}

}  // namespace collx
