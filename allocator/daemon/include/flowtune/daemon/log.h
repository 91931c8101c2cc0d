// The daemon's log: lines to a sink (stderr in the daemon, a vector in tests),
// and refusals logged at most once per cause per interval so a flood of bad
// input cannot flood the log; the next line says how many were not logged.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "flowtune/daemon/counters.h"

namespace flowtune::daemon {

enum class LogLevel { kError = 0, kWarn, kInfo, kDebug };

// Events other than refusals that a peer can make happen many times at once
// (10,000 endpoints that go silent together time out together): each is
// logged at most once per interval too.
enum class Note : std::uint8_t { kEndpointTimedOut, kKeyRefused, kHandshakeFailed, kCount };

class Log {
 public:
  using Sink = std::function<void(std::string_view line)>;

  // A sink writing to stderr.
  static Sink stderr_sink();

  Log(Sink sink, LogLevel level, std::uint64_t refusal_interval_us)
      : sink_(std::move(sink)), level_(level), interval_us_(refusal_interval_us) {}

  bool enabled(LogLevel l) const { return l <= level_; }
  void write(LogLevel l, std::string_view text);
  // Logs a refusal unless one of the same cause was logged within the interval.
  void refusal(Cause c, std::uint64_t now_us, std::string_view peer, std::string_view detail);
  // Logs `text` at `l` unless a note of the same kind was logged within the
  // interval; the next one logged says how many were not.
  void note(Note n, LogLevel l, std::uint64_t now_us, std::string_view text);

 private:
  struct CauseState {
    std::uint64_t last_us = 0;
    std::uint64_t suppressed = 0;
    bool logged = false;
  };
  // Whether a line of this kind is logged now; *tail then carries the count
  // of those that were not since the last.
  bool pass(CauseState& s, std::uint64_t now_us, std::string* tail);
  Sink sink_;
  LogLevel level_;
  std::uint64_t interval_us_;
  std::array<CauseState, kNumCauses> causes_{};
  std::array<CauseState, static_cast<std::size_t>(Note::kCount)> notes_{};
};

// A peer's routing id as printable text (hex when not printable).
std::string printable_peer(std::string_view routing_id);

}  // namespace flowtune::daemon
