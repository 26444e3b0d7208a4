// The command line of collx's tools (collx-run, collx-info, collx-bench, collx-sim): CLI11
// with one --help shape and one way of failing, and every size, duration and integer read by
// collx's own parsers (collx/base/units.h), so "64K" or "30s" means what it means in a
// COLLX_* variable. Included by the tools' .cc files only: CLI11 is a large header.
//
// --help prints
//     usage: <usage>
//
//     <about>
//     options:
//       -x, --long VALUE   description, wrapped
//     <footer>
// and exits 0. A bad argument prints one line, "<tool>: <what is wrong, naming the option>
// (see <tool> --help)", and exits 2.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/reduce_op.h"
#include "collx/base/units.h"

namespace collx::cli {

// `text` broken into lines of at most `width` columns (words longer than that stand alone),
// every line after the first indented by `indent` spaces; the first line is not indented.
inline std::string wrap(const std::string& text, std::size_t indent, std::size_t width) {
  std::string out;
  std::size_t column = indent;
  bool lineEmpty = true;
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (!lineEmpty && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      lineEmpty = true;
    }
    if (!lineEmpty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    lineEmpty = false;
  }
  return out;
}

// The help shape above (CLI11's formatter lays out the options; this one names them
// "-x, --long VALUE" and wraps their descriptions).
class Formatter final : public CLI::Formatter {
 public:
  static constexpr std::size_t kWidth = 96;
  static constexpr std::size_t kColumn = 28;

  Formatter(std::string usage, std::string about)
      : usage_(std::move(usage)), about_(std::move(about)) {
    column_width(kColumn);
  }

  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode) const override {
    std::string out = "usage: " + usage_ + "\n\n" + about_;
    if (!about_.empty() && about_.back() != '\n') out += "\n";
    out += "\noptions:\n";
    for (const CLI::Option* opt : app->get_options()) {
      if (!opt->get_positional()) out += make_option(opt, false);
    }
    std::string footer = app->get_footer();
    if (!footer.empty()) out += "\n" + footer + (footer.back() == '\n' ? "" : "\n");
    return out;
  }

  std::string make_option_name(const CLI::Option* opt, bool) const override {
    std::string name;
    for (const std::string& s : opt->get_snames()) name += (name.empty() ? "-" : ", -") + s;
    if (name.empty()) name = "   ";  // long-only options line up under the long names
    for (const std::string& l : opt->get_lnames()) name += (name == "   " ? " --" : ", --") + l;
    return name;
  }

  std::string make_option_opts(const CLI::Option* opt) const override {
    return opt->get_option_text().empty() ? "" : " " + opt->get_option_text();
  }

  std::string make_option_desc(const CLI::Option* opt) const override {
    return wrap(opt->get_description(), 0, kWidth - kColumn);
  }

 private:
  std::string usage_;
  std::string about_;
};

// One tool's command line. Options keep the order they are added in (the help lists them so,
// -h/--help last); the first of an option's `names` ("--min-bytes,-b") names it in errors. An
// option given twice takes its last value.
class CommandLine {
 public:
  CommandLine(std::string tool, std::string usage, std::string about, std::string footer = "")
      : tool_(std::move(tool)), app_("", tool_) {
    app_.formatter(std::make_shared<Formatter>(std::move(usage), std::move(about)));
    app_.footer(std::move(footer));
    app_.set_help_flag();  // added again last, in parse()
    app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }

  CLI::App& app() { return app_; }
  const std::string& tool() const { return tool_; }

  CLI::Option* flag(const std::string& names, bool& out, const std::string& help) {
    return app_.add_flag(names, out, help);
  }

  CLI::Option* text(const std::string& names, std::string& out, const std::string& value,
                    const std::string& help) {
    return app_.add_option(names, out, help)->option_text(value);
  }

  // A value that `convert(text, what)` turns into the option's value (what: its name).
  CLI::Option* custom(
      const std::string& names, const std::string& value, const std::string& help,
      std::function<void(const std::string& text, const std::string& what)> convert) {
    const std::string what = names.substr(0, names.find(','));
    return app_
        .add_option_function<std::string>(
            names,
            [convert = std::move(convert), what](const std::string& text) {
              try {
                convert(text, what);
              } catch (const collx::Error& e) {
                throw CLI::ValidationError(e.detail());
              }
            },
            help)
        ->option_text(value);
  }

  // A whole number in [min, max] (collx::parseInt).
  template <class T>
  CLI::Option* integer(const std::string& names, T& out, std::int64_t min, std::int64_t max,
                       const std::string& value, const std::string& help) {
    return custom(names, value, help, [&out, min, max](const std::string& t, const std::string& w) {
      out = static_cast<T>(collx::parseInt(t, min, max, w));
    });
  }

  // A byte size, e.g. 4096, 64K, 1.5M (collx::parseBytes).
  CLI::Option* bytes(const std::string& names, std::uint64_t& out, const std::string& value,
                     const std::string& help) {
    return custom(names, value, help, [&out](const std::string& t, const std::string& w) {
      out = collx::parseBytes(t, w);
    });
  }

  // A comma-separated list of byte sizes, at least one.
  CLI::Option* byteList(const std::string& names, std::vector<std::uint64_t>& out,
                        const std::string& value, const std::string& help) {
    return custom(names, value, help, [&out](const std::string& t, const std::string& w) {
      out.clear();
      std::stringstream list(t);
      std::string item;
      while (std::getline(list, item, ',')) out.push_back(collx::parseBytes(item, w));
      if (out.empty()) throw CLI::ValidationError(w + " needs at least one size");
    });
  }

  // A positive duration, e.g. 30s, 500ms, 2m, 1.5 (seconds) (collx::parseDuration), into a
  // std::chrono::milliseconds or a std::optional of one.
  template <class Out>
  CLI::Option* duration(const std::string& names, Out& out, const std::string& value,
                        const std::string& help) {
    return custom(names, value, help, [&out](const std::string& t, const std::string& w) {
      const std::chrono::milliseconds d = collx::parseDuration(t, w);
      if (d.count() <= 0) throw CLI::ValidationError(w + " must be positive, got '" + t + "'");
      out = d;
    });
  }

  // A number above 0 (CLI11's conversion: integers, decimals, exponents).
  CLI::Option* positive(const std::string& names, double& out, const std::string& value,
                        const std::string& help) {
    return custom(names, value, help, [&out](const std::string& t, const std::string& w) {
      double v = 0;
      if (!CLI::detail::lexical_cast(t, v) || !(v > 0) || !std::isfinite(v)) {
        throw CLI::ValidationError(w + "='" + t + "': expected a positive number");
      }
      out = v;
    });
  }

  // A data type by name (int8 ... float64).
  CLI::Option* dataType(const std::string& names, DataType& out, const std::string& help) {
    return custom(names, "TYPE", help, [&out](const std::string& t, const std::string& w) {
      auto type = parseDataType(t);
      if (!type) {
        throw CLI::ValidationError(w + "='" + t +
                                   "': expected int8, uint8, int32, int64, "
                                   "float16, bfloat16, float32 or float64");
      }
      out = *type;
    });
  }

  // A reduction by name (sum ... bxor).
  CLI::Option* reduceOp(const std::string& names, ReduceOpKind& out, const std::string& help) {
    return custom(names, "OP", help, [&out](const std::string& t, const std::string& w) {
      auto op = parseReduceOpKind(t);
      if (!op) {
        throw CLI::ValidationError(w + "='" + t +
                                   "': expected sum, prod, min, max, avg, band, bor or bxor");
      }
      out = *op;
    });
  }

  // Parses the command line; prints the help and exits 0 for -h/--help, fails (exit 2) on
  // anything it cannot take.
  void parse(int argc, char** argv) {
    app_.set_help_flag("-h,--help", "this text");
    try {
      app_.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(app_.help().c_str(), stdout);
      std::exit(0);
    } catch (const CLI::ExtrasError&) {
      std::string first;
      for (const std::string& arg : app_.remaining()) {
        if (arg != "--") {
          first = arg;
          break;
        }
      }
      fail((first.size() > 1 && first[0] == '-' ? "unknown option '" : "unexpected argument '") +
           first + "'");
    } catch (const CLI::ArgumentMismatch& e) {
      // CLI11 words a missing value as "--grace: 1 required T missing".
      const std::string what = e.what();
      const std::size_t colon = what.find(':');
      const bool missing = colon != std::string::npos && what.size() > 8 &&
                           what.compare(what.size() - 8, 8, " missing") == 0;
      fail(missing ? what.substr(0, colon) + " needs a value" : what);
    } catch (const CLI::ParseError& e) {
      fail(e.what());
    }
  }

  // One line on stderr naming what is wrong, then exit 2.
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", tool_.c_str(), message.c_str(), tool_.c_str());
    std::exit(2);
  }

  std::string help() const { return app_.help(); }

 private:
  std::string tool_;
  CLI::App app_;
};

// The sizes a benchmark sweeps: --min-bytes to --max-bytes by --factor, or --sizes.
struct SizeSweep {
  std::uint64_t minBytes = 4;
  std::uint64_t maxBytes = 64ull << 20;
  std::uint64_t factor = 4;
  std::vector<std::uint64_t> sizes;

  void addOptions(CommandLine& cli) {
    cli.bytes("--min-bytes,-b", minBytes, "SIZE",
              "smallest size (default 4); K, M, G suffixes are powers of 2");
    cli.bytes("--max-bytes,-e", maxBytes, "SIZE", "largest size (default 64M)");
    cli.integer("--factor,-f", factor, 2, 1 << 20, "N",
                "multiply the size by N between steps (default 4)");
    cli.byteList("--sizes", sizes, "LIST", "explicit sizes instead, e.g. 4,1K,1M");
  }

  // The sizes in order (after parse()).
  std::vector<std::uint64_t> resolve(const CommandLine& cli) const {
    if (!sizes.empty()) return sizes;
    if (minBytes > maxBytes) cli.fail("--min-bytes is above --max-bytes");
    std::vector<std::uint64_t> out;
    for (std::uint64_t s = minBytes; s <= maxBytes; s = std::max(s + 1, s * factor)) {
      out.push_back(s);
      if (s > maxBytes / factor) break;  // the next step would pass the end (or overflow)
    }
    return out;
  }
};

}  // namespace collx::cli
