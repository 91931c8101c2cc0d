// One command-line parser for every Flowtune tool (flowtune-allocator,
// flowtune-ctl, flowtune-sim), so flags, values and mistakes behave alike:
// -h / --help anywhere prints the usage and exits 0; a bad flag or value
// prints "PROG: reason" and a pointer to --help on standard error and exits
// 2 (kExitUsage). Values follow their flag as the next argument.
//
//   cli::Args args("flowtune-ctl", kUsage, argc, argv);
//   while (args.next()) {
//     if (args.is("--limit")) o.limit = args.count(1'000'000);
//     else if (!args.is_option()) o.command = args.arg();
//     else args.unknown();
//   }
#pragma once

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowtune::cli {

inline constexpr int kExitUsage = 2;

// What a usage error throws instead of exiting, for a parser told to
// (Args::throw_on_error): a daemon re-reading its configuration on SIGHUP
// must refuse a bad value, not exit.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "a,b,,c" -> {"a", "b", "", "c"}: every item a comma separates, empty ones
// included (so a flag's value "" or "a," reaches its own check as an empty
// item instead of vanishing).
inline std::vector<std::string> split_commas(std::string_view list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    out.emplace_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

class Args {
 public:
  // Walks argv[first..argc). `usage` is printed for -h / --help.
  Args(std::string_view prog, const char* usage, int argc, char** argv, int first = 1)
      : prog_(prog), usage_(usage), argc_(argc), argv_(argv), i_(first - 1) {}

  // Advances to the next argument; false after the last. Help exits here.
  bool next() {
    if (++i_ >= argc_) return false;
    if (arg() == "-h" || arg() == "--help") {
      std::fputs(usage_, stdout);
      std::exit(0);
    }
    return true;
  }
  std::string_view arg() const { return argv_[i_]; }
  bool is(std::string_view flag) const { return arg() == flag; }
  // "-x" or "--x"; a lone "-" (standard input) is an operand.
  bool is_option() const { return arg().size() > 1 && arg()[0] == '-'; }

  // The value after the current flag.
  const char* value() {
    if (i_ + 1 >= argc_) fail("missing value for " + std::string(arg()));
    flag_ = argv_[i_];
    return argv_[++i_];
  }
  // A finite decimal number (no hexadecimal, infinity or NaN).
  double number() {
    const char* v = value();
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !std::isfinite(d) || !decimal(v)) {
      fail(flag_ + " expects a number, got '" + v + "'");
    }
    return d;
  }
  // A finite decimal number in [lo, hi].
  double number(double lo, double hi) {
    const double d = number();
    if (d < lo || d > hi) {
      fail(flag_ + " expects a number from " + shortest(lo) + " to " + shortest(hi) + ", got '" +
           argv_[i_] + "'");
    }
    return d;
  }
  // A decimal integer in [0, max].
  std::uint64_t count(std::uint64_t max = UINT64_MAX) {
    const char* v = value();
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] == '-' || n > max) {
      fail(flag_ + (max == UINT64_MAX ? " expects a non-negative integer"
                                      : " expects an integer 0-" + std::to_string(max)) +
           ", got '" + v + "'");
    }
    return n;
  }
  // One of the named values: "FLAG expects a, b or c, got 'v'" otherwise.
  template <typename T>
  T choice(std::initializer_list<std::pair<std::string_view, T>> options) {
    const std::string_view v = value();
    std::string names;
    std::size_t k = 0;
    for (const auto& [name, result] : options) {
      if (v == name) return result;
      names += (k == 0 ? "" : k + 1 == options.size() ? " or " : ", ") + std::string(name);
      ++k;
    }
    fail(flag_ + " expects " + names + ", got '" + std::string(v) + "'");
  }

  // The current argument is not an option this command knows.
  [[noreturn]] void unknown(std::string_view context = {}) const {
    fail("unknown option '" + std::string(arg()) + "'" +
         (context.empty() ? "" : " for " + std::string(context)));
  }
  // A usage error: the reason, a pointer to --help, exit status 2; or,
  // after throw_on_error(true), UsageError with the reason.
  [[noreturn]] void fail(const std::string& reason) const {
    if (throw_) throw UsageError(reason);
    usage_error(prog_, reason);
  }
  void throw_on_error(bool on) { throw_ = on; }

  [[noreturn]] static void usage_error(std::string_view prog, const std::string& reason) {
    const std::string p(prog);
    std::fprintf(stderr, "%s: %s\n(run '%s --help' for usage)\n", p.c_str(), reason.c_str(),
                 p.c_str());
    std::exit(kExitUsage);
  }

 private:
  std::string_view prog_;
  const char* usage_;
  int argc_;
  char** argv_;
  int i_;
  std::string flag_;  // the flag whose value was taken last
  bool throw_ = false;

  // Digits, sign, point and exponent only: strtod also takes "0x10" and
  // "0x1p3", which no flag means.
  static bool decimal(std::string_view v) {
    return v.find_first_not_of("0123456789+-.eE") == std::string_view::npos;
  }
  static std::string shortest(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.15g", d);
    return buf;
  }
};

}  // namespace flowtune::cli
