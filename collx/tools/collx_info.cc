// collx-info: prints collx's version, what this build contains and the configuration table;
// with --rendezvous, joins the job described by the environment and prints what it saw.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli.h"
#include "collx/algorithms/registry.h"
#include "collx/algorithms/selection.h"
#include "collx/algorithms/settings.h"
#include "collx/collx.h"
#include "collx/rendezvous/pmix_store.h"
#include "collx/secure/tls.h"
#include "collx/transport/ibverbs_info.h"
#include "collx/transport/mesh.h"

namespace {

constexpr const char* kAbout =
    R"(Prints the collx version, the transports and optional parts of this build, and every
setting: each COLLX_* variable with the component that reads it, its type and accepted
values, its default, the value in effect in this environment and where it comes from, and
what it does; then the algorithm selection table in effect, what RDMA verbs offer here:
the verbs library, every device and port, and the port collx would use (or why none), and
TLS: whether COLLX_TLS is on with which files, and whether this kernel can seal the records.
)";

// What a setting accepts: its type and range ("bytes in [0, 1GiB]", "choice of a|b").
std::string acceptsOf(const collx::SettingInfo& setting) {
  std::string accepts = collx::settingTypeName(setting.type());
  const std::string range = setting.range();
  if (range.empty()) {
  } else if (setting.type() == collx::SettingType::kChoice) {
    accepts += " of " + range;
  } else if (setting.type() == collx::SettingType::kBool) {
    accepts += " (" + range + ")";
  } else {
    accepts += (range[0] == '[' ? " in " : ", ") + range;
  }
  return accepts;
}

// Every declared setting sorted by the component that reads it, then by name.
std::vector<const collx::SettingInfo*> sortedSettings() {
  std::vector<const collx::SettingInfo*> all = collx::settings();
  std::stable_sort(all.begin(), all.end(), [](const auto* a, const auto* b) {
    return std::tie(a->component(), a->name()) < std::tie(b->component(), b->name());
  });
  return all;
}

// --settings-markdown: every setting as docs/configuration.md's generated table (between
// the markers docs/algorithms_doc.cmake replaces), independent of the environment.
void printSettingsMarkdown() {
  const auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c == '\n' ? ' ' : c;
    }
    return out;
  };
  std::cout << "<!-- generated from the registry of settings: collx-info --settings-markdown "
               "-->\n| variable | component | accepts | default | what it does |\n"
               "|---|---|---|---|---|\n";
  for (const collx::SettingInfo* setting : sortedSettings()) {
    std::cout << "| `" << setting->name() << "` | " << setting->component() << " | "
              << cell(acceptsOf(*setting)) << " | "
              << cell(setting->automatic() ? "automatic: " + setting->defaultText()
                                           : setting->defaultText())
              << " | " << cell(setting->help()) << " |\n";
  }
  std::cout << "<!-- end of the generated table -->\n";
}

// Every declared setting, by the component that reads it: name, type and accepted values,
// default, the value in effect here and where it comes from, and its help.
void printSettings(const collx::Config& config) {
  std::cout << "\nsettings (precedence: explicit option > environment > default):\n";
  std::string component;
  for (const collx::SettingInfo* setting : sortedSettings()) {
    if (setting->component() != component) {
      component = setting->component();
      std::cout << "  " << component << ":\n";
    }
    const std::string accepts = acceptsOf(*setting);
    std::string value;
    try {
      value = setting->automatic() && !setting->isSet(config) ? "automatic"
                                                              : setting->valueText(config);
    } catch (const collx::Error& e) {
      value = "invalid: " + e.detail();
    }
    const std::string line = setting->name() + ": " + accepts + "; default: " +
                             (setting->automatic() ? "automatic (" + setting->defaultText() + ")"
                                                   : setting->defaultText()) +
                             "; in effect: " + value +
                             (setting->isSet(config) ? " (environment)" : "");
    std::cout << "    " << collx::cli::wrap(line, 8, 96) << "\n";
    std::cout << "        " << collx::cli::wrap(setting->help(), 8, 96) << "\n";
  }
}

// What RDMA verbs offer here, with the settings a context would use (COLLX_IBVERBS_LIBRARY,
// COLLX_IB_HCA, COLLX_IB_GID_INDEX): the library, devices, ports and the port collx would use,
// or why ibverbs is not usable.
void printVerbs(const collx::Config& config) {
  std::cout << "\nRDMA verbs (ibverbs transport):\n";
  std::string text;
  try {
    text = collx::transport::describeIbverbs(collx::transport::MeshOptions::fromConfig(config));
  } catch (const collx::Error& e) {
    text = "cannot read the transport's settings: " + e.detail() + "\n";
  }
  std::istringstream verbs(text);
  for (std::string line; std::getline(verbs, line);) {
    const std::size_t depth = line.find_first_not_of(' ');
    if (depth == std::string::npos) continue;
    std::cout << std::string(2 + depth, ' ') << collx::cli::wrap(line, 6 + depth, 96) << "\n";
  }
}

// TLS: on (its files) or off, and whether the kernel offers TLS (kTLS) to seal the records.
void printTls(const collx::Config& config) {
  std::cout << "\nTLS (COLLX_TLS):\n";
  try {
    auto tls = collx::secure::TlsContext::fromConfig(config);
    std::cout << "  " << (tls ? "on: " + tls->describe() : std::string("off")) << "\n";
  } catch (const collx::Error& e) {
    std::cout << "  " << collx::cli::wrap("invalid: " + e.detail(), 4, 96) << "\n";
  }
  std::string why;
  const std::string kernel =
      collx::secure::kernelTlsAvailable(&why)
          ? "kernel TLS (kTLS): available (OpenSSL gives the kernel the records it can)"
          : "kernel TLS (kTLS): not available, " + why +
                ": OpenSSL seals the records in the "
                "process";
  std::cout << "  " << collx::cli::wrap(kernel, 4, 96) << "\n";
}

// Launchers: whether a PMIx server is here, and the address rank 0 gives ranks on other
// hosts when a bootstrap (PMIx, MPI) passes its store's address.
void printLaunch(const collx::Config& config) {
  std::cout << "\nlaunchers:\n";
  const auto pmix = collx::rendezvous::pmixServerIn(config);
  std::cout << "  "
            << collx::cli::wrap(
                   std::string("PMIx server: ") +
                       (pmix ? "named by the environment (" + *pmix + ")"
                             : "none named by the environment (mpirun and srun --mpi=pmix set "
                               "PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*)"),
                   4, 96)
            << "\n";
  // One line per address: what it is for, and the address (or why it cannot be told).
  auto print = [&config](const std::string& what, std::string (*address)(const collx::Config&)) {
    std::string text;
    try {
      text = address(config);
    } catch (const collx::Error& e) {
      text = "cannot tell: " + e.detail();
    }
    std::cout << "  " << collx::cli::wrap(what + ": " + text, 4, 96) << "\n";
  };
  print("this host's reachable address (in rank 0's store URL across hosts, under PMIx or MPI)",
        collx::transport::reachableAddress);
  print(
      "the address ranks' tcp connections use when the store gives none to route toward (a "
      "file:// store, PMIx; COLLX_IFNAME overrides)",
      collx::transport::unroutedTcpAddress);
}

void printInfo() {
  std::cout << "collx " << collx::versionString() << "\n\nbuild:\n";
  for (const collx::BuildFeature& f : collx::buildFeatures()) {
    std::printf("  %-32s %-4s %s\n", f.name.c_str(), f.built ? "yes" : "no", f.detail.c_str());
  }
  const collx::Config& config = collx::Config::process();
  printSettings(config);
  // The algorithm table in effect: COLLX_RULES first, then the built-in rows (what
  // algorithms::select() reads, as a context reads it).
  const collx::algorithms::SelectionPolicy policy =
      collx::algorithms::SelectionPolicy::fromConfig(config, false, 1);
  std::cout << "\nalgorithm selection (options > COLLX_<COLL>_ALGO > rules file > built-in "
               "table; first matching row):\n";
  if (policy.rulesPath.empty()) {
    std::cout << "  rules file: none ("
              << (collx::algorithms::kRules.get(config) ? "COLLX_RULES=none"
                                                        : "none in the default places")
              << ": the built-in table alone)\n";
  } else {
    std::cout << "  rules file: " << policy.rulesPath << " ("
              << (policy.rulesOrigin == "COLLX_RULES" ? "COLLX_RULES" : "found in a default place")
              << "; its rows come first)\n";
  }
  for (collx::algorithms::Collective coll : collx::algorithms::collectives()) {
    std::printf("  %s  (algorithms: %s)\n", collx::algorithms::collectiveName(coll),
                collx::algorithms::algorithmNames(coll).c_str());
    if (const auto* every = policy.configured[static_cast<std::size_t>(coll)]) {
      std::printf("    every call: %s (from %s)\n", every->name,
                  collx::algorithms::algorithmVariable(coll));
    }
    for (const auto& info : collx::algorithms::algorithmRegistry()) {
      if (info.coll != coll || !info.acrossHosts) continue;
      std::printf(
          "    across hosts (more than one, some with several ranks): %s "
          "in place of the built-in rows%s\n",
          info.name,
          collx::algorithms::reduces(coll) && !info.keepsOrder ? " (commutative ops)" : "");
    }
    for (const auto& row : policy.table->rows(coll)) {
      std::string ranks =
          std::to_string(row.minRanks) + ".." +
          (row.maxRanks >= (1 << 30) ? std::string("inf") : std::to_string(row.maxRanks));
      std::string bytes =
          collx::formatBytes(row.minBytes) + ".." + collx::formatBytes(row.maxBytes);
      const bool shared = row.sharedOnly || row.algorithm->shared;
      std::printf("    P %-9s bytes %-20s -> %-20s (%s%s%s)\n", ranks.c_str(), bytes.c_str(),
                  row.algorithm->name, row.source.c_str(),
                  row.maxHosts < (1 << 30)
                      ? ("; jobs on at most " + std::to_string(row.maxHosts) + " host(s)").c_str()
                      : "",
                  shared          ? "; only when every rank shares memory"
                  : row.notShared ? "; only when the ranks do not all share memory"
                                  : "");
    }
  }
  printVerbs(config);
  printTls(config);
  printLaunch(config);
  std::vector<std::string> unknown = config.unknownVariables();
  if (!unknown.empty()) {
    std::cout << "\nunknown COLLX_* variables in the environment (ignored):\n";
    for (const std::string& name : unknown) std::cout << "  " << name << "\n";
  }
}

int rendezvous() {
  collx::Bootstrap b;
  auto context = collx::init({}, &b);
  std::string out =
      "rank " + std::to_string(context->rank()) + " of " + std::to_string(context->size()) +
      ": job " + context->jobId() + " generation " + std::to_string(context->generation()) +
      ", launcher " + b.launcher + ", store " +
      (b.storeUrl.empty() ? "(object)" : collx::rendezvous::hidePassword(b.storeUrl)) + "\n";
  for (const auto& [what, origin] : b.origin) out += "  " + what + " from " + origin + "\n";
  out += "  peers:";
  for (const collx::PeerInfo& peer : context->peers()) {
    out += " " + std::to_string(peer.rank) + "=" + peer.hostname + ":" + std::to_string(peer.pid);
    if (!peer.cpus.empty()) out += "(cpus " + peer.cpus + ")";
  }
  out += "\n";
  out += std::string("  this host's ranks ") +
         (context->ranksOutnumberCpus() ? "outnumber" : "do not outnumber") +
         " the CPUs they may run on\n";
  std::fwrite(out.data(), 1, out.size(), stdout);  // one write: lines of ranks do not interleave
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  collx::cli::CommandLine cli("collx-info", "collx-info [--rendezvous | --settings-markdown]",
                              kAbout);
  bool join = false, markdown = false;
  cli.flag("--settings-markdown", markdown,
           "print every setting as a Markdown table (docs/configuration.md's), nothing else");
  cli.flag(
      "--rendezvous", join,
      "also join the job described by the environment (COLLX_RANK, COLLX_WORLD_SIZE, "
      "COLLX_STORE, torchrun's variables, the PMIx server of mpirun or srun --mpi=pmix, or "
      "Open MPI's or Slurm's variables) and print what this rank saw: "
      "rank, world size, job, generation, where each value came from, every peer (with the "
      "CPUs it may run on) and whether this host's ranks outnumber them. Run it under a "
      "launcher: collx-run -n 4 -- collx-info --rendezvous, mpirun -np 4 collx-info --rendezvous");
  cli.parse(argc, argv);
  try {
    if (markdown) {
      printSettingsMarkdown();
      return 0;
    }
    if (join) return rendezvous();
    printInfo();
    return 0;
  } catch (const collx::Error& e) {
    std::cerr << "collx-info: " << collx::errorKindName(e.kind()) << ": " << e.what() << "\n";
    return 1;
  }
}
