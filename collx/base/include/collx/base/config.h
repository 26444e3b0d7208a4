// The configuration table: every COLLX_* environment variable with its default and help
// text, and a Config that reads the environment once.
//
// Precedence everywhere in collx: an explicit option in code > the environment > the
// default in this table.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collx/base/units.h"

namespace collx {

struct ConfigVar {
  const char* name;
  const char* defaultValue;  // "" when the variable has no default (unset means "not given")
  const char* help;
};

// Every variable collx reads, in the order collx-info prints them.
const std::vector<ConfigVar>& configVars();
// The table entry for `name`, or nullptr.
const ConfigVar* findConfigVar(std::string_view name) noexcept;

// A variable set to the empty string counts as unset (VAR= in a shell, or a launcher that
// clears it), everywhere collx reads the environment.
class Config {
 public:
  using Environment = std::map<std::string, std::string, std::less<>>;

  // The process environment, read once on first use (thread-safe). Later changes to the
  // environment are not seen: collx reads its configuration once.
  static const Config& process();
  // A snapshot of an explicit environment (tests, embedders, the launcher).
  explicit Config(Environment env);
  // A fresh snapshot of the current process environment.
  static Config fromProcessEnvironment();

  // Value of a variable in the environment, or std::nullopt. Works for any variable (the
  // bootstrap also reads RANK, MASTER_ADDR, SLURM_PROCID, ...).
  std::optional<std::string> env(std::string_view name) const;

  // A COLLX_* variable from the table: its environment value if set, else its default.
  // Asking for a name that is not in the table is a bug (std::logic_error).
  std::string getString(std::string_view name) const;
  bool isSet(std::string_view name) const;
  // Integer in [min, max]; std::nullopt when unset and without default. A malformed or
  // out-of-range value throws InvalidArgument naming the variable.
  std::optional<std::int64_t> getInt(std::string_view name, std::int64_t min,
                                     std::int64_t max) const;
  // Duration ("30", "30s", "500ms", "2m", "1.5"); plain numbers are seconds.
  std::chrono::milliseconds getDuration(std::string_view name) const;
  bool getBool(std::string_view name) const;

  // COLLX_* variables that are set but not in the table (likely typos), each with a
  // suggestion when one is close: "COLLX_TIMOUT (did you mean COLLX_TIMEOUT?)".
  std::vector<std::string> unknownVariables() const;

  const Environment& environment() const noexcept { return env_; }

 private:
  Environment env_;
};

}  // namespace collx
