// The collx version and what this build contains.
#pragma once

#include <string>
#include <vector>

namespace collx {

// "0.1.0".
const char* versionString() noexcept;

struct BuildFeature {
  std::string name;    // "redis store", "tcp transport", ...
  bool built;          // compiled into this build
  std::string detail;  // what it was built with, or why not
};

// Transports and optional parts, as collx-info prints them.
const std::vector<BuildFeature>& buildFeatures();

}  // namespace collx
