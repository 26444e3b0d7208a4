// collx-trace: works on the Chrome trace files that COLLX_TRACE=<dir> makes every rank write
// (algorithms/include/collx/algorithms/tracer.h has their content).
//
//   collx-trace merge <dir> [-o merged.json] [--top N] [--job ID] [--generation G]
//
// merge joins one job's files (collx-trace-<job>-g<generation>-r<rank>.json) into one
// trace, one track (pid) per rank, on rank 0's clock (each rank's timestamps were written
// so), and prints, per collective call (collective + sequence number), the rank that entered
// it last and how long the others waited for it: from their own entry to the last rank's,
// mean and max over the other ranks; then the totals. A file whose last event was cut short
// (a rank killed while writing) loses that event with a warning; a file that lacks its
// closing bracket (a rank that never closed its context) is read to its end.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kAbout =
    R"(Works on the trace files that COLLX_TRACE=<dir> makes every rank of a job write.

merge <dir>: joins one job's files into one Chrome trace (one track per rank, timestamps on
rank 0's clock; open it in https://ui.perfetto.dev or chrome://tracing) and prints, per
collective call (collective#seq), the rank that entered it last and how long the other
ranks waited for it (from their entry to its: mean and max over them), in call order (with
more than --top calls, the --top the others waited longest for), then the totals.
)";

constexpr const char* kFooter =
    R"(exit codes: 0 merged; 1 no such directory, no trace files, or a malformed file (a
truncated last event is dropped with a warning instead); 2 bad arguments.
)";

struct Args {
  std::string command;
  std::string dir;
  std::string output;
  int top = 20;
  std::string job;
  std::optional<std::int64_t> generation;
};

// A failure that ends the tool with exit code 1.
struct Failure {
  std::string what;
};

struct TraceFile {
  fs::path path;
  std::string job;
  std::int64_t generation = 0;
  int rank = 0;
  std::vector<json> events;
};

// One call as one rank saw it.
struct CallSpan {
  std::string algorithm;
  std::uint64_t bytes = 0;
  double beginUs = 0;
  std::optional<double> endUs;
};

struct CallKey {
  std::string collective;
  std::uint64_t seq = 0;
  bool operator<(const CallKey& o) const {
    return seq != o.seq ? seq < o.seq : collective < o.collective;
  }
};

// collx-trace-<job>-g<generation>-r<rank>.json
const std::regex kTraceName(R"(collx-trace-(.+)-g(-?[0-9]+)-r([0-9]+)\.json)");

void warn(const std::string& what) {
  std::fprintf(stderr, "collx-trace: warning: %s\n", what.c_str());
}

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure{"cannot read " + path.string()};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The events of a JSON Array Format file, one event per line as collx writes them; the
// closing bracket may be missing and the last event cut short (dropped, with a warning).
std::vector<json> readEvents(const fs::path& path) {
  const std::string text = readAll(path);
  const std::string name = path.filename().string();
  // A complete file: the whole array (or the JSON Object Format's traceEvents).
  json whole = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (whole.is_array()) return whole.get<std::vector<json>>();
  if (whole.is_object() && whole.contains("traceEvents") && whole["traceEvents"].is_array()) {
    return whole["traceEvents"].get<std::vector<json>>();
  }
  const std::size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) throw Failure{name + ": the file is empty"};
  if (text[start] != '[') {
    throw Failure{name + ": not a trace event file (it does not begin with '[')"};
  }
  // Line by line: "[", then "{event}" or ",{event}", then "]" when the rank closed it.
  std::vector<std::string> lines;
  std::istringstream in(text.substr(start + 1));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string::npos) {
    lines.pop_back();
  }
  std::vector<json> events;
  bool closed = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string line = lines[i];
    const std::size_t first = line.find_first_not_of(" \t\r,");
    if (first == std::string::npos) continue;
    line = line.substr(first);
    while (!line.empty() && (line.back() == ',' || line.back() == ' ' || line.back() == '\r')) {
      line.pop_back();
    }
    if (line == "]") {
      closed = true;
      continue;
    }
    json event = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.is_object()) {
      if (i + 1 == lines.size()) {
        warn(name + ": dropped its last event, which was cut short (line " + std::to_string(i + 1) +
             ": the rank was stopped while writing it)");
        break;
      }
      throw Failure{name + ": line " + std::to_string(i + 1) +
                    " is not a JSON event: " + line.substr(0, 80)};
    }
    events.push_back(std::move(event));
  }
  if (!closed) {
    warn(name +
         ": the trace has no closing bracket (the rank did not close its context: it "
         "crashed, was killed or is still running); read to its end");
  }
  return events;
}

std::vector<TraceFile> findFiles(const Args& args) {
  std::error_code error;
  if (!fs::is_directory(args.dir, error)) {
    throw Failure{args.dir + ": no such directory"};
  }
  std::vector<TraceFile> all;
  for (const auto& entry : fs::directory_iterator(args.dir, error)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !std::regex_match(name, m, kTraceName)) continue;
    TraceFile f;
    f.path = entry.path();
    f.job = m[1];
    try {
      f.generation = std::stoll(m[2]);
      f.rank = std::stoi(m[3]);
    } catch (const std::exception&) {
      continue;
    }
    all.push_back(std::move(f));
  }
  if (error) throw Failure{args.dir + ": " + error.message()};
  if (all.empty()) {
    throw Failure{args.dir +
                  ": no trace files (collx-trace-<job>-g<generation>-r<rank>.json) in it; "
                  "run the job with COLLX_TRACE=" +
                  args.dir};
  }
  // One job and generation: the one asked for, else the only one there.
  std::set<std::pair<std::string, std::int64_t>> sets;
  std::vector<TraceFile> chosen;
  for (TraceFile& f : all) {
    if (!args.job.empty() && f.job != args.job) continue;
    if (args.generation && f.generation != *args.generation) continue;
    sets.insert({f.job, f.generation});
    chosen.push_back(std::move(f));
  }
  if (chosen.empty()) {
    throw Failure{args.dir + ": no trace files of job '" + args.job + "'" +
                  (args.generation ? " generation " + std::to_string(*args.generation) : "")};
  }
  if (sets.size() > 1) {
    std::string list;
    for (const auto& [job, generation] : sets) {
      list += (list.empty() ? "" : ", ") + job + " generation " + std::to_string(generation);
    }
    throw Failure{args.dir + " holds the traces of several jobs (" + list +
                  "): choose one with --job and --generation"};
  }
  std::sort(chosen.begin(), chosen.end(),
            [](const TraceFile& a, const TraceFile& b) { return a.rank < b.rank; });
  return chosen;
}

std::string millis(double us) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", us / 1000.0);
  return text;
}

// The collective calls of every rank (send and receive have tags, not sequence numbers:
// they are not matched across ranks).
std::map<CallKey, std::map<int, CallSpan>> callsOf(const std::vector<TraceFile>& files) {
  std::map<CallKey, std::map<int, CallSpan>> calls;
  for (const TraceFile& f : files) {
    std::map<std::string, CallKey> open;  // span id -> call
    for (const json& e : f.events) {
      if (e.value("cat", "") != "call" || !e.contains("id") || !e.contains("ts")) continue;
      const std::string ph = e.value("ph", "");
      const std::string id = e["id"].is_string() ? e["id"].get<std::string>() : e["id"].dump();
      if (!e["ts"].is_number()) continue;
      const double ts = e["ts"].get<double>();
      if (ph == "b") {
        const json args = e.value("args", json::object());
        if (!args.contains("seq") || !args["seq"].is_number_unsigned()) continue;
        const CallKey key{e.value("name", ""), args["seq"].get<std::uint64_t>()};
        CallSpan span;
        span.algorithm = args.value("algorithm", "");
        span.bytes = args.value("bytes", std::uint64_t{0});
        span.beginUs = ts;
        calls[key][f.rank] = span;
        open[id] = key;
      } else if (ph == "e") {
        const auto it = open.find(id);
        if (it == open.end()) continue;
        calls[it->second][f.rank].endUs = ts;
        open.erase(it);
      }
    }
  }
  return calls;
}

int merge(const Args& args) {
  std::vector<TraceFile> files = findFiles(args);
  const std::string job = files.front().job;
  const std::int64_t generation = files.front().generation;
  int size = 0;
  std::size_t eventCount = 0;
  for (TraceFile& f : files) {
    f.events = readEvents(f.path);
    eventCount += f.events.size();
    bool aligned = false;
    for (const json& e : f.events) {
      if (e.value("ph", "") == "M" && e.value("name", "") == "collx" && e.contains("args")) {
        size = std::max(size, e["args"].value("size", 0));
        aligned = e["args"].value("clock_source", "not aligned") != "not aligned";
      }
    }
    if (!aligned && files.size() > 1 && f.rank != 0) {
      warn(f.path.filename().string() +
           ": its clock was not aligned with rank 0's (not every rank traced); its times may "
           "be off by the clocks' difference");
    }
  }
  std::set<int> present;
  for (const TraceFile& f : files) present.insert(f.rank);
  std::string missing;
  for (int r = 0; r < size; ++r) {
    if (present.count(r) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!missing.empty()) warn("no trace of rank(s) " + missing + " of " + std::to_string(size));

  // The merged trace: every rank's events, one per line.
  const fs::path output = args.output.empty()
                              ? fs::path(args.dir) / ("collx-trace-" + job + "-g" +
                                                      std::to_string(generation) + "-merged.json")
                              : fs::path(args.output);
  {
    std::ofstream out(output, std::ios::trunc);
    if (!out) throw Failure{"cannot write " + output.string()};
    out << "[";
    bool first = true;
    for (const TraceFile& f : files) {
      for (const json& e : f.events) {
        out << (first ? "\n" : ",\n") << e.dump();
        first = false;
      }
    }
    out << "\n]\n";
    if (!out) throw Failure{"writing " + output.string() + " failed"};
  }
  std::printf("merged %zu ranks' traces (job %s, generation %lld): %zu events into %s\n",
              files.size(), job.c_str(), static_cast<long long>(generation), eventCount,
              output.string().c_str());

  struct Row {
    CallKey key;
    std::string algorithm;
    std::uint64_t bytes = 0;
    std::size_t ranks = 0;
    int last = -1;
    double meanUs = 0;
    double maxUs = 0;
    double sumUs = 0;
  };
  std::vector<Row> rows;
  for (const auto& [key, byRank] : callsOf(files)) {
    Row row;
    row.key = key;
    row.ranks = byRank.size();
    double lastUs = 0;
    for (const auto& [rank, span] : byRank) {
      if (row.last < 0 || span.beginUs > lastUs) {
        row.last = rank;
        lastUs = span.beginUs;
        row.algorithm = span.algorithm;
        row.bytes = span.bytes;
      }
    }
    for (const auto& [rank, span] : byRank) {
      if (rank == row.last) continue;
      const double waited = lastUs - span.beginUs;
      row.sumUs += waited;
      row.maxUs = std::max(row.maxUs, waited);
    }
    if (row.ranks > 1) row.meanUs = row.sumUs / static_cast<double>(row.ranks - 1);
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    std::printf("no collective calls in the traces\n");
    return 0;
  }
  // The calls waited for longest, shown in call order.
  std::vector<const Row*> shown;
  shown.reserve(rows.size());
  for (const Row& r : rows) shown.push_back(&r);
  if (args.top > 0 && shown.size() > static_cast<std::size_t>(args.top)) {
    std::stable_sort(shown.begin(), shown.end(),
                     [](const Row* a, const Row* b) { return a->maxUs > b->maxUs; });
    shown.resize(static_cast<std::size_t>(args.top));
    std::stable_sort(shown.begin(), shown.end(),
                     [](const Row* a, const Row* b) { return a->key < b->key; });
    std::printf("\nthe %d calls the other ranks waited longest for (of %zu; --top 0 lists all):\n",
                args.top, rows.size());
  } else {
    std::printf("\nevery call:\n");
  }
  std::printf("  %-24s %-20s %12s %5s %13s %13s %13s\n", "call", "algorithm", "bytes", "ranks",
              "last to enter", "waited mean", "waited max");
  for (const Row* r : shown) {
    const std::string call = r->key.collective + "#" + std::to_string(r->key.seq);
    std::printf("  %-24s %-20s %12llu %5zu %13s %13s %13s\n", call.c_str(), r->algorithm.c_str(),
                static_cast<unsigned long long>(r->bytes), r->ranks,
                ("rank " + std::to_string(r->last)).c_str(), millis(r->meanUs).c_str(),
                millis(r->maxUs).c_str());
  }
  double total = 0;
  std::map<int, int> lastCount;
  for (const Row& r : rows) {
    total += r.sumUs;
    ++lastCount[r.last];
  }
  const auto most =
      std::max_element(lastCount.begin(), lastCount.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  std::printf(
      "\ntotal: %zu calls; the other ranks waited %s in all for the last rank to enter (%s "
      "per call); rank %d entered last most often (%d of %zu calls)\n",
      rows.size(), millis(total).c_str(), millis(total / static_cast<double>(rows.size())).c_str(),
      most->first, most->second, rows.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  collx::cli::CommandLine cli("collx-trace",
                              "collx-trace merge <dir> [-o merged.json] [--top N] [--job ID "
                              "--generation G]",
                              kAbout, kFooter);
  Args args;
  cli.app().add_option("command", args.command, "merge (the only command)")->required();
  cli.app().add_option("dir", args.dir, "the directory COLLX_TRACE named")->required();
  cli.text("-o,--output", args.output, "FILE",
           "where the merged trace goes (default: <dir>/collx-trace-<job>-g<generation>-"
           "merged.json)");
  cli.integer("--top", args.top, 0, 1 << 30, "N",
              "list the N calls the other ranks waited longest for (default 20; 0: every call)");
  cli.text("--job", args.job, "ID",
           "the job whose traces to merge, when the directory holds several");
  cli.custom("--generation", "G", "the generation of that job (default: the only one there)",
             [&args](const std::string& text, const std::string& what) {
               args.generation = collx::parseInt(text, std::numeric_limits<std::int64_t>::min(),
                                                 std::numeric_limits<std::int64_t>::max(), what);
             });
  cli.parse(argc, argv);
  if (args.command != "merge") cli.fail("unknown command '" + args.command + "' (merge)");
  try {
    return merge(args);
  } catch (const Failure& f) {
    std::fprintf(stderr, "collx-trace: %s\n", f.what.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collx-trace: %s\n", e.what());
    return 1;
  }
}
