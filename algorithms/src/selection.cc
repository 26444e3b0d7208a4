#include "collx/algorithms/selection.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "collx/base/error.h"
#include "collx/base/units.h"
#include "json.h"

namespace collx::algorithms {

namespace {

constexpr std::uint64_t kAnyBytes = std::numeric_limits<std::uint64_t>::max();
constexpr int kAnyRanks = 1 << 30;

[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw InvalidArgument(Where{-1, "selection rules", -1}, source + ": " + what);
}

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
    if (info == nullptr) continue;  // a table row naming a missing algorithm is a build bug
    rows_.push_back(Row{rule.coll, rule.minRanks, rule.maxRanks, rule.minBytes, rule.maxBytes, info,
                        "default table", rule.sharedOnly});
  }
}

Selection Selection::fromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) bad("COLLX_RULES " + path, "cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  return fromJson(text.str(), "COLLX_RULES " + path);
}

Selection Selection::fromJson(std::string_view text, const std::string& source) {
  json::Value doc;
  try {
    doc = json::parse(text);
  } catch (const json::ParseError& e) {
    bad(source, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.isObject()) bad(source, "the document must be an object of collectives");
  std::vector<Row> rules;
  for (const auto& [name, list] : doc.object()) {
    const Collective* coll = nullptr;
    for (const Collective& c : collectives()) {
      if (name == collectiveName(c)) coll = &c;
    }
    if (coll == nullptr) {
      bad(source, "unknown collective '" + name + "' (" + list.where() +
                      "; valid: " + validCollectives() + ")");
    }
    if (!list.isArray()) bad(source, name + " (" + list.where() + ") must be an array of rules");
    int index = 0;
    for (const json::Value& entry : list.array()) {
      ++index;
      const std::string at = name + " entry " + std::to_string(index);
      if (!entry.isObject()) bad(source, at + " (" + entry.where() + ") must be an object");
      Row row{*coll, 1, kAnyRanks, 0, kAnyBytes, nullptr, source + ", " + at};
      for (const auto& [field, value] : entry.object()) {
        auto number = [&](std::int64_t min) -> std::int64_t {
          if (!value.isNumber() || value.number() < static_cast<double>(min) ||
              value.number() != std::floor(value.number())) {
            bad(source, at + ": " + field + " (" + value.where() +
                            ") must be a whole number >= " + std::to_string(min));
          }
          return static_cast<std::int64_t>(value.number());
        };
        auto bytes = [&]() -> std::uint64_t {
          if (value.isNumber()) return static_cast<std::uint64_t>(number(0));
          if (value.isString()) {
            if (value.string() == "inf") return kAnyBytes;
            try {
              return parseBytes(value.string(), field);
            } catch (const std::exception&) {
            }
          }
          bad(source, at + ": " + field + " (" + value.where() +
                          ") must be a byte count such as 65536, \"64K\", \"1M\" or \"inf\"");
        };
        if (field == "algorithm") {
          if (!value.isString()) bad(source, at + ": algorithm must be a string");
          row.algorithm = findAlgorithm(*coll, value.string());
          if (row.algorithm == nullptr) {
            bad(source, at + ": unknown " + name + " algorithm '" + value.string() +
                            "' (valid: " + algorithmNames(*coll) + ")");
          }
        } else if (field == "min_ranks") {
          row.minRanks = static_cast<int>(number(1));
        } else if (field == "max_ranks") {
          row.maxRanks = static_cast<int>(number(1));
        } else if (field == "min_bytes") {
          row.minBytes = bytes();
        } else if (field == "max_bytes") {
          row.maxBytes = bytes();
        } else {
          bad(source, at + ": unknown field '" + field +
                          "' (fields: min_ranks, max_ranks, min_bytes, max_bytes, algorithm)");
        }
      }
      if (row.algorithm == nullptr) bad(source, at + " names no algorithm");
      if (row.minRanks > row.maxRanks || row.minBytes > row.maxBytes) {
        bad(source, at + ": an empty range (min above max)");
      }
      rules.push_back(std::move(row));
    }
  }
  Selection selection;
  rules.insert(rules.end(), selection.rows_.begin(), selection.rows_.end());
  selection.rows_ = std::move(rules);
  return selection;
}

const Selection::Row* Selection::choose(Collective coll, int ranks, std::uint64_t bytes,
                                        bool shared) const {
  for (const Row& row : rows_) {
    if ((row.algorithm->shared || row.sharedOnly) && !shared) continue;
    if (row.coll == coll && ranks >= row.minRanks && ranks <= row.maxRanks &&
        bytes >= row.minBytes && bytes <= row.maxBytes) {
      return &row;
    }
  }
  return nullptr;
}

std::vector<const Selection::Row*> Selection::rows(Collective coll) const {
  std::vector<const Row*> out;
  for (const Row& row : rows_) {
    if (row.coll == coll) out.push_back(&row);
  }
  return out;
}

}  // namespace collx::algorithms
