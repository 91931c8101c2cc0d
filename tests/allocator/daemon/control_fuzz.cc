// libFuzzer target over flowtune-ctl's request parser and the replies it
// leads to (control_reply): the bytes a ctl connection sends, as one
// request or as several (split at newlines, at most 8, one cache between
// them), against one allocator holding 240 flows over 29 tenants and
// flows in none (the empty name), peers' names among them: quotes, control
// bytes, invalid UTF-8. Few flows keep an input cheap (each reply is
// parsed back): paging, not the page's size, is what is fuzzed. Checked,
// beyond nothing crashing or tripping a sanitizer:
//   - every reply is one JSON object;
//   - an error is a string, and an unknown request's names only printable
//     characters;
//   - a page holds at most its limit and 500 items, "next" is null or past
//     where it started, and a whole listing's "total" is its length;
//   - the sums over flows add up: status's classes, a whole listing of
//     tenants (with the flows in none) and of endpoints come to every
//     flow, a whole listing of links to two a flow (uplink and downlink);
//   - status counts the allocator's flows;
//   - histograms' buckets are cumulative over rising edges.
// Run with -max_len=1024.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/control.h"
#include "flowtune/wire/codec.h"

namespace {

using namespace flowtune;
using nlohmann::json;

[[noreturn]] void fail(const char* what, std::string_view request, const std::string& reply) {
  std::fprintf(stderr, "control_fuzz: %s\nrequest: %.*s\nreply: %.400s\n", what,
               static_cast<int>(request.size()), request.data(), reply.c_str());
  std::abort();
}

daemon::Allocator& allocator() {
  static const std::unique_ptr<daemon::Allocator> a = [] {
    daemon::AllocatorConfig c;
    c.unknown_hosts = daemon::UnknownHosts::kAdd;
    auto alloc = std::make_unique<daemon::Allocator>(daemon::Network::big_switch(16, 1e9, 4), c, 7, nullptr);
    const char* odd[] = {"a\"b\\c", "\x01\x7f", "\xff\xfe", "\xc3\xa9t\xc3", "", "t"};
    for (std::uint32_t e = 0; e < 4; ++e) {
      wire::EndpointMessage m;
      m.events.emplace_back(wire::Hello{"ep-" + std::to_string(e), "h" + std::to_string(e)});
      wire::Resync r;
      for (std::uint64_t k = 1; k <= 60; ++k) {
        wire::FlowletStart s;
        s.flow_key = k;
        s.endpoints = wire::HostPair{e, static_cast<std::uint32_t>(4 + (k + e) % 12)};
        s.bytes = k << 10;
        s.tenant = k % 7 == 0 ? std::string(odd[(k / 7 + e) % 6]) : "tenant-" + std::to_string(k % 24);
        r.flows.push_back(s);
      }
      m.events.emplace_back(std::move(r));
      alloc->on_message("p" + std::to_string(e), wire::encode(m), 1);
    }
    for (int i = 0; i < 50 && alloc->busy(); ++i) alloc->iterate(2);
    (void)alloc->take_outbox();
    return alloc;
  }();
  return *a;
}

bool printable(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

// The limit and start a page request names, as control_reply parses them
// (absent: 500 from 0); false when they do not parse.
bool page_args(std::string_view request, std::size_t* limit, std::uint64_t* from) {
  *limit = 500;
  *from = 0;
  const std::size_t space = request.find(' ');
  if (space == std::string_view::npos) return true;
  const std::string rest(request.substr(space + 1));
  unsigned long long l = 0, f = 0;
  int used = 0;
  if (std::sscanf(rest.c_str(), "%llu%n", &l, &used) != 1) return false;
  *limit = l == 0 ? 1 : l > 500 ? 500 : static_cast<std::size_t>(l);
  if (used < static_cast<int>(rest.size()) && std::sscanf(rest.c_str() + used, " %llu", &f) == 1) *from = f;
  return true;
}

// Every histogram: as many cumulative counts as edges, edges rising,
// counts never falling and never past the histogram's count.
void check_histograms(const json& j, std::string_view request, const std::string& reply) {
  if (j.empty()) fail("histograms without a histogram", request, reply);
  for (const auto& [name, h] : j.items()) {
    const json& le = h["le_ns"];
    const json& cum = h["cumulative"];
    if (!le.is_array() || !cum.is_array() || le.size() != cum.size() || le.empty()) {
      fail("a histogram's edges and counts differ in length", request, reply);
    }
    const std::uint64_t count = h["count"].get<std::uint64_t>();
    for (std::size_t i = 0; i < le.size(); ++i) {
      const std::uint64_t c = cum[i].get<std::uint64_t>();
      if (c > count) fail("a bucket counts more than its histogram", request, reply);
      if (i > 0 && (le[i] <= le[i - 1] || c < cum[i - 1].get<std::uint64_t>())) {
        fail("a histogram's buckets are not cumulative", request, reply);
      }
    }
  }
}

void check(const daemon::Allocator& a, std::string_view request, const std::string& reply) {
  const json j = json::parse(reply, nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail("reply is not a JSON object", request, reply);
  if (j.contains("error")) {
    if (!j["error"].is_string()) fail("error is not a string", request, reply);
    const std::string e = j["error"];
    if (e.rfind("unknown request", 0) == 0 && !printable(e)) fail("unprintable error", request, reply);
    return;
  }
  const std::string cmd(request.substr(0, request.find(' ')));
  if (cmd == "status") {
    if (j["flows"] != a.num_flows()) fail("status miscounts flows", request, reply);
    std::uint64_t by_class = 0;
    for (const auto& [k, c] : j["policy"]["classes"].items()) by_class += c["flows"].get<std::uint64_t>();
    if (by_class != a.num_flows()) fail("status's classes do not add up to its flows", request, reply);
    return;
  }
  if (cmd == "histograms") {
    check_histograms(j, request, reply);
    return;
  }
  if (!j.contains(cmd)) fail("a page without its items", request, reply);
  std::size_t limit = 0;
  std::uint64_t from = 0;
  if (!page_args(request, &limit, &from)) return;
  const std::size_t n = j[cmd].size();
  if (n > limit) fail("a page past its limit", request, reply);
  if (!j["next"].is_null() && (!j["next"].is_number_unsigned() || j["next"].get<std::uint64_t>() <= from)) {
    fail("next does not move on", request, reply);
  }
  if (!j["total"].is_number_unsigned()) fail("a page without a total", request, reply);
  // A page from the start that holds everything (tenant ids start at 1):
  // its total is its length, and its sums are every flow's.
  const bool whole = j["next"].is_null() && (cmd == "tenants" ? from <= 1 : from == 0);
  if (!whole) return;
  if (j["total"].get<std::uint64_t>() != n) fail("a whole listing's total is not its length", request, reply);
  if (cmd == "flows") return;
  std::uint64_t sum = 0;
  for (const auto& item : j[cmd]) sum += item["flows"].get<std::uint64_t>();
  const std::uint64_t none = cmd == "tenants" ? j["no_tenant"]["flows"].get<std::uint64_t>() : 0;
  // A big switch: every flow crosses one host uplink and one downlink.
  const std::uint64_t want = (cmd == "links" ? 2 : 1) * a.num_flows();
  if (sum + none != want) fail("a whole listing's flows do not add up", request, reply);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  daemon::Allocator& a = allocator();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  daemon::ControlCache cache;
  std::uint64_t now = 10;
  // One request, or (first byte odd) several split at newlines.
  const bool several = size > 0 && (data[0] & 1) != 0;
  std::size_t at = several ? 1 : 0;
  for (int k = 0; k < 8 && at <= size; ++k) {
    const std::size_t end = several ? std::min(input.find('\n', at), size) : size;
    const std::string_view request = input.substr(at, end - at);
    const std::string reply = daemon::control_reply(a, {"fuzz", now, {}, {}, {}}, request, now, cache);
    check(a, request, reply);
    now += 250'000;
    at = end + 1;
    if (!several) break;
  }
  return 0;
}
