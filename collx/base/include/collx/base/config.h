// Config: a snapshot of the environment that collx reads its settings from. The settings
// themselves (every COLLX_* variable, with type, range, default and help) are declared where
// they are read (collx/base/setting.h) and read through their declarations:
// `kTcpStreams.get(config)`.
//
// Precedence everywhere in collx: an explicit option in code > the environment > the
// declared default.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collx/base/units.h"

namespace collx {

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
  // bootstrap also reads RANK, MASTER_ADDR, SLURM_PROCID, ...); a COLLX_* setting is read
  // through its declaration instead.
  std::optional<std::string> env(std::string_view name) const;

  // COLLX_* variables that are set but not registered settings (likely typos), each with a
  // suggestion when one is close: "COLLX_TIMOUT (did you mean COLLX_TIMEOUT?)".
  std::vector<std::string> unknownVariables() const;

  const Environment& environment() const noexcept { return env_; }

 private:
  Environment env_;
};

}  // namespace collx
