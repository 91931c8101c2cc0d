#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>
#include <system_error>
#include <thread>

#include "service.h"

namespace flowtune::shuffle {

namespace {

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

// The planned fetch a line's words give, or why they do not give one.
Result<PlannedFetch> parse_line(const std::vector<std::string_view>& w) {
  const auto bad = [](std::string why) { return fail(ErrorCause::kInvalid, std::move(why)); };
  if (w.size() < 5) return bad("expected START_MS SHUFFLE PARTITION COFLOW SOURCE...");
  PlannedFetch f;
  if (!parse_whole(w[0], f.start_ms) || !(f.start_ms >= 0) || f.start_ms > 1e9) {
    return bad("START_MS must be a number of milliseconds in [0, 1e9]");
  }
  if (!parse_whole(w[1], f.shuffle)) return bad("bad SHUFFLE '" + std::string(w[1]) + "'");
  if (!parse_whole(w[2], f.partition)) return bad("bad PARTITION '" + std::string(w[2]) + "'");
  if (!parse_whole(w[3], f.coflow)) return bad("bad COFLOW '" + std::string(w[3]) + "'");
  for (std::size_t k = 4; k < w.size(); ++k) {
    auto s = parse_source(w[k]);
    if (!s) return bad("bad SOURCE '" + std::string(w[k]) + "' (HOST:PORT:FIRST-LAST)");
    f.sources.push_back(std::move(*s));
  }
  return f;
}

}  // namespace

std::optional<FetchSource> parse_source(std::string_view v) {
  const auto c2 = v.rfind(':');
  if (c2 == std::string_view::npos || c2 == 0) return std::nullopt;
  const auto c1 = v.rfind(':', c2 - 1);
  const auto dash = v.find('-', c2);
  if (c1 == std::string_view::npos || c1 == 0 || dash == std::string_view::npos) return std::nullopt;
  FetchSource s;
  s.host = std::string(v.substr(0, c1));
  // "[::1]": an IPv6 address in brackets; getaddrinfo wants it bare.
  if (s.host.size() > 2 && s.host.front() == '[' && s.host.back() == ']') {
    s.host = s.host.substr(1, s.host.size() - 2);
  }
  std::uint32_t port = 0;
  // The last map below UINT32_MAX: the fetch loop counts up to it inclusive.
  if (!parse_whole(v.substr(c1 + 1, c2 - c1 - 1), port) || port == 0 || port > 65535 ||
      !parse_whole(v.substr(c2 + 1, dash - c2 - 1), s.first_map) ||
      !parse_whole(v.substr(dash + 1), s.last_map) || s.first_map > s.last_map ||
      s.last_map == UINT32_MAX) {
    return std::nullopt;
  }
  s.port = static_cast<std::uint16_t>(port);
  return s;
}

Result<std::vector<PlannedFetch>> parse_plan(std::string_view text) {
  std::vector<PlannedFetch> plan;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    const auto w = words(line);
    if (w.empty()) continue;
    auto f = parse_line(w);
    if (!f) return f.error().with_context("line " + std::to_string(line_no));
    plan.push_back(std::move(*f));
  }
  return plan;
}

namespace {

// One fetch; an exception (out of memory, no thread for a source) fails
// its blocks with the reason instead of ending the process.
template <typename Since>
void run_one(const PlannedFetch& f, const Since& since_t0, std::uint32_t read_timeout_ms,
             PlannedOutcome& o) {
  o.start_s = since_t0();
  try {
    o.result = fetch_partition(f.sources, f.shuffle, f.partition, f.coflow, read_timeout_ms);
  } catch (const std::exception& e) {
    o.result = {};
    o.result.failed = 1;
    o.result.blocks.push_back({0, 0, 0, std::string("fetch failed: ") + e.what()});
  }
  o.finish_s = since_t0();
}

}  // namespace

std::vector<PlannedOutcome> run_plan(const std::vector<PlannedFetch>& plan,
                                     std::chrono::system_clock::time_point t0,
                                     const PlannedDone& done, std::uint32_t read_timeout_ms) {
  using std::chrono::duration;
  using std::chrono::system_clock;
  std::vector<PlannedOutcome> out(plan.size());
  std::vector<std::size_t> order(plan.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return plan[a].start_ms < plan[b].start_ms; });
  const auto since_t0 = [t0] { return duration<double>(system_clock::now() - t0).count(); };
  // A thread per fetch only while it runs (finished ones are joined before
  // the next starts): a long plan holds neither sleepers nor dead threads.
  struct Running {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  std::vector<Running> threads;
  for (const std::size_t i : order) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<system_clock::duration>(
                                           duration<double, std::milli>(plan[i].start_ms)));
    std::erase_if(threads, [](Running& r) {
      if (!r.finished->load(std::memory_order_acquire)) return false;
      r.thread.join();
      return true;
    });
    auto finished = std::make_shared<std::atomic<bool>>(false);
    const auto work = [&, i, finished] {
      run_one(plan[i], since_t0, read_timeout_ms, out[i]);
      if (done) done(i, out[i]);
      finished->store(true, std::memory_order_release);
    };
    try {
      threads.push_back({std::thread(work), finished});
    } catch (const std::system_error&) {
      work();  // no thread to be had: this fetch runs here, late rather than lost
    }
  }
  for (auto& r : threads) r.thread.join();
  return out;
}

}  // namespace flowtune::shuffle
