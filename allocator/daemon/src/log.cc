#include "flowtune/daemon/log.h"

#include <cstdio>

namespace flowtune::daemon {

Log::Sink Log::stderr_sink() {
  return [](std::string_view line) {
    std::fprintf(stderr, "flowtune-allocator: %.*s\n", static_cast<int>(line.size()), line.data());
  };
}

void Log::write(LogLevel l, std::string_view text) {
  if (!enabled(l)) return;
  // Lines quote peers' text (host ids, details): control characters would
  // let a peer forge log lines.
  std::string line(text);
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  sink_(line);
}

bool Log::pass(CauseState& s, std::uint64_t now_us, std::string* tail) {
  if (s.logged && now_us - s.last_us < interval_us_) {
    ++s.suppressed;
    return false;
  }
  if (s.suppressed > 0) *tail = " [" + std::to_string(s.suppressed) + " more of this kind not logged]";
  s = CauseState{now_us, 0, true};
  return true;
}

void Log::refusal(Cause c, std::uint64_t now_us, std::string_view peer, std::string_view detail) {
  std::string tail;
  if (!pass(causes_[static_cast<std::size_t>(c)], now_us, &tail)) return;
  write(LogLevel::kWarn, "refused (" + std::string(to_string(c)) + ") from " +
                             printable_peer(peer) + ": " + std::string(detail) + tail);
}

void Log::note(Note n, LogLevel l, std::uint64_t now_us, std::string_view text) {
  if (!enabled(l)) return;
  std::string tail;
  if (!pass(notes_[static_cast<std::size_t>(n)], now_us, &tail)) return;
  write(l, std::string(text) + tail);
}

std::string printable_peer(std::string_view id) {
  bool printable = !id.empty();
  for (unsigned char c : id) printable = printable && c >= 0x21 && c < 0x7f;
  if (printable) return std::string(id);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : id) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace flowtune::daemon
