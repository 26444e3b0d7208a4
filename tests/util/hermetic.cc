#include "hermetic.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace collx::test {

bool steersCollx(const char* name) {
  static const char* const kPrefixes[] = {"COLLX_", "OMPI_COMM_WORLD_", "SLURM_", "PMIX_"};
  static const char* const kNames[] = {"RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_RANK",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "TORCHELASTIC_RUN_ID",
                                       "OMPI_MCA_ess_base_jobid"};
  for (const char* prefix : kPrefixes) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  for (const char* exact : kNames) {
    if (std::strcmp(name, exact) == 0) return true;
  }
  return false;
}

void makeHermetic(int& argc, char** argv) {
  std::vector<std::string> drop;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string name(*e, std::strcspn(*e, "="));
    if (steersCollx(name.c_str())) drop.push_back(name);
  }
  std::string dropped;
  for (const std::string& name : drop) {
    if (name.rfind("COLLX_", 0) == 0) dropped += " " + name;
    ::unsetenv(name.c_str());
  }
  int kept = 1;
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string assignment;
    if (arg.rfind("--env=", 0) == 0) {
      assignment = arg.substr(6);
    } else if (arg == "--env" && i + 1 < argc) {
      assignment = argv[++i];
    } else {
      listing = listing || arg == "--gtest_list_tests";
      argv[kept++] = argv[i];
      continue;
    }
    const std::size_t eq = assignment.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument("--env expects NAME=VALUE, got '" + assignment + "'");
    }
    ::setenv(assignment.substr(0, eq).c_str(), assignment.substr(eq + 1).c_str(), 1);
  }
  argc = kept;
  argv[argc] = nullptr;
  if (!dropped.empty() && !listing) {
    std::fprintf(stderr,
                 "collx tests ignore the caller's%s (hermetic; --env=NAME=VALUE sets one)\n",
                 dropped.c_str());
  }
}

}  // namespace collx::test
