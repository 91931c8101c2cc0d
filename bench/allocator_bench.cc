// Micro-benchmarks of the allocator's protocol state machine without sockets.
//
// BM_Events: cost per flowlet event of Allocator::on_message (decode, flow
//   table, engine add/remove) on batched messages of 64 ends + 64 starts that
//   keep `active` flows live, with one iterate() per `msgs_per_iteration`
//   messages, as the daemon's loop does. items_per_second = events/s on one
//   core, the ceiling of the daemon's absorb rate.
// BM_DecodeOnly: the same messages through wire::decode alone: the baseline
//   the state machine's cost is compared with (same run). BM_DecodeCost: the
//   scan that prices them before decoding.
// BM_Iterate vs BM_EngineIterate: one allocator iteration (engine + scan for
//   rates that moved past the threshold) against the bare engine iteration on
//   the same flows, so the scan's overhead shows as a ratio.
// BM_DecodeBomb vs BM_UnpackBombBaseline: a 4 KB decompression bomb through
//   wire::decode (refused from a scan) against Cap'n Proto unpacking it as
//   the codec let it before.
// BM_CtlFlowsPage: one page of flowtune-ctl's flows reply at 100,352 flows.
// BM_CtlStatus, BM_CtlLinksPage, BM_CtlTenantsPage/shared:0|1: status and a
//   page of links or tenants at 100,352 flows, 200 requests a second, each
//   making its own pass over the flows (0, the baseline) or sharing one a
//   second (1, ControlCache as the server runs it).
// BM_StartAnswer/cold:0|1: one flowlet start answered as the daemon's turn
//   answers it with early rates on (on_message, tell_early_rates,
//   take_outbox, wire::encode), then ended and iterated off the clock; with
//   cold = 1 the caches are flushed first (64 MB touched off the clock), as
//   after the loop slept while other processes ran: cold over hot is what a
//   sleeping loop pays in the allocator itself, apart from wake-ups.
// BM_LeaseRefresh/slice:S: one lease-refresh tick over every endpoint,
//   which also digests the (key, rate) pairs each endpoint was told: its
//   ns_per_flow beside BM_Iterate's is the digest's price, paid once per
//   refresh interval (300 ms) instead of once per iteration. The tick takes
//   S flows per on_timer call (AllocatorConfig::timer_slice; 0: all in one,
//   the baseline); us_per_call is what one server turn carries.
#include <benchmark/benchmark.h>
#include <capnp/serialize-packed.h>
#include <kj/io.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/control.h"
#include "flowtune/wire/codec.h"

namespace {

using namespace flowtune;
using daemon::Allocator;

constexpr std::uint32_t kHosts = 512;
constexpr std::size_t kHalf = 64;

// Distinct tenant names the setup's flows carry (0: none); make() sets it.
std::size_t g_tenants = 0;

wire::FlowletStart flow(std::uint64_t key, std::uint32_t src) {
  wire::FlowletStart s;
  if (g_tenants > 0) s.tenant = "tenant-" + std::to_string(key % g_tenants);
  s.flow_key = key + 1;  // keys on the wire start at 1
  std::uint32_t dst = static_cast<std::uint32_t>(((key * 0x9E3779B97F4A7C15ULL) >> 33) % kHosts);
  if (dst == src) dst = (dst + 1) % kHosts;
  s.endpoints = wire::HostPair{src, dst};
  s.bytes = 1 << 20;
  return s;
}

struct Setup {
  std::unique_ptr<Allocator> alloc;
  std::vector<std::vector<std::uint8_t>> cycle;  // end/start messages
  std::uint64_t now = 1;
};

// `active` flows (a multiple of kHalf) held by as many endpoints as the
// per-endpoint limit needs, settled; the message cycle churns endpoint 0's.
Setup make(std::size_t active, std::uint32_t timer_slice = daemon::AllocatorConfig{}.timer_slice,
           std::size_t tenants = 0) {
  Setup s;
  g_tenants = tenants;
  daemon::AllocatorConfig c;
  c.timer_slice = timer_slice;
  // No quotas: one endpoint sends far above any source's share here, and
  // a refused message would be counted as handled.
  c.max_messages_per_sec = 0;
  c.max_source_bytes_per_sec = 0;
  c.endpoint_timeout_us = std::uint64_t{1} << 50;  // nobody times out in a benchmark
  s.alloc = std::make_unique<Allocator>(daemon::Network::big_switch(kHosts, 10e9), c, 1, nullptr);
  const std::size_t endpoints = (active + 8191) / 8192;
  const std::size_t per = active / endpoints / kHalf * kHalf;
  for (std::size_t e = 0; e < endpoints; ++e) {
    const auto host = static_cast<std::uint32_t>(e);
    wire::EndpointMessage m;
    m.events.emplace_back(wire::Hello{"bench" + std::to_string(e), "h" + std::to_string(e)});
    wire::Resync r;
    for (std::uint64_t k = 0; k < per; ++k) r.flows.push_back(flow(k, host));
    m.events.emplace_back(std::move(r));
    s.alloc->on_message("p" + std::to_string(e), wire::encode(m), s.now);
  }
  if (s.alloc->num_flows() != per * endpoints) throw std::logic_error("setup refused flows");
  for (int i = 0; i < 5000 && s.alloc->busy(); ++i) s.alloc->iterate(s.now);
  (void)s.alloc->take_outbox();
  const std::size_t key_space = per + kHalf;
  for (std::size_t j = 0; j < key_space / kHalf; ++j) {
    wire::EndpointMessage b;
    for (std::size_t i = 0; i < kHalf; ++i) b.events.emplace_back(wire::FlowletEnd{(j * kHalf + i) % key_space + 1});
    for (std::size_t i = 0; i < kHalf; ++i) b.events.emplace_back(flow((per + j * kHalf + i) % key_space, 0));
    s.cycle.push_back(wire::encode(b));
  }
  return s;
}

void BM_Events(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  const auto per_iter = static_cast<std::size_t>(state.range(1));
  std::size_t j = 0, since = 0, refused = 0;
  for (auto _ : state) {
    s.alloc->on_message("p0", s.cycle[j], ++s.now);
    j = (j + 1) % s.cycle.size();
    if (++since == per_iter) {
      s.alloc->iterate(s.now);
      for (const auto& o : s.alloc->take_outbox()) refused += o.message.errors.size();
      since = 0;
    }
  }
  // A refused message costs next to nothing: counted, it would flatter the rate.
  if (refused > 0) state.SkipWithError(("the allocator refused events: " + std::to_string(refused)).c_str());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * kHalf));
}
BENCHMARK(BM_Events)->ArgNames({"active", "msgs_per_iteration"})
    ->Args({1024, 8})->Args({10240, 8})->Args({50176, 8})->Args({50176, 64});

void BM_StartAnswer(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  const bool cold = state.range(1) != 0;
  std::vector<std::uint8_t> flush(cold ? 64 << 20 : 0, 1);
  std::uint64_t key = 1'000'000;
  std::size_t told = 0;
  for (auto _ : state) {
    if (cold) {
      // Read and write every line, so no level of cache keeps the state.
      for (std::size_t i = 0; i < flush.size(); i += 64) flush[i] = static_cast<std::uint8_t>(flush[i] + 1);
      benchmark::ClobberMemory();
    }
    wire::EndpointMessage m;
    m.events.emplace_back(flow(key, 0));
    const auto bytes = wire::encode(m);
    const auto t0 = std::chrono::steady_clock::now();
    s.alloc->on_message("p0", bytes, ++s.now);
    told += s.alloc->tell_early_rates(s.now);
    for (const auto& o : s.alloc->take_outbox()) benchmark::DoNotOptimize(wire::encode(o.message));
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    wire::EndpointMessage end;
    end.events.emplace_back(wire::FlowletEnd{key + 1});
    s.alloc->on_message("p0", wire::encode(end), ++s.now);
    for (int i = 0; i < 64 && s.alloc->busy(); ++i) s.alloc->iterate(s.now);
    (void)s.alloc->take_outbox();
    ++key;
  }
  if (told != state.iterations()) state.SkipWithError("a start was not told an early rate");
}
// Each round costs far more off the clock (settling after the end, and for
// cold ones the flush) than on it: fixed counts keep the run short.
BENCHMARK(BM_StartAnswer)->ArgNames({"active", "cold"})->Args({1024, 0})->Args({50176, 0})
    ->Iterations(2000)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StartAnswer)->ArgNames({"active", "cold"})->Args({1024, 1})->Args({50176, 1})
    ->Iterations(300)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_DecodeOnly(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  std::size_t j = 0;
  for (auto _ : state) {
    wire::EndpointMessage m;
    benchmark::DoNotOptimize(wire::decode(s.cycle[j], &m));
    j = (j + 1) % s.cycle.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * kHalf));
}
BENCHMARK(BM_DecodeOnly)->ArgName("active")->Arg(1024);

// What on_message charges the same messages before decoding them (a scan of
// their tags, Allocator::decode_cost), beside BM_DecodeOnly's decode.
void BM_DecodeCost(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  std::size_t j = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(Allocator::decode_cost(s.cycle[j]));
    j = (j + 1) % s.cycle.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 2 * kHalf));
}
BENCHMARK(BM_DecodeCost)->ArgName("active")->Arg(1024);

// A 4 KB packed frame of zero runs that unpacks to 4 MiB (issue 17's bomb).
std::vector<std::uint8_t> bomb() {
  std::vector<std::uint8_t> b = {0x40, 0x08};  // one segment of 2^19 words
  while (b.size() < 4096) {
    b.push_back(0x00);
    b.push_back(0xff);
  }
  return b;
}

// wire::decode on the bomb (refused from a scan of its bytes) against
// Cap'n Proto unpacking it under the 4 MiB limit the codec had before: the
// baseline, same run.
void BM_DecodeBomb(benchmark::State& state) {
  const std::vector<std::uint8_t> b = bomb();
  for (auto _ : state) {
    wire::EndpointMessage m;
    benchmark::DoNotOptimize(wire::decode(b, &m));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * b.size()));
}
BENCHMARK(BM_DecodeBomb);

void BM_UnpackBombBaseline(benchmark::State& state) {
  const std::vector<std::uint8_t> b = bomb();
  for (auto _ : state) {
    kj::ArrayInputStream in(kj::arrayPtr(b.data(), b.size()));
    capnp::ReaderOptions o;
    o.traversalLimitInWords = wire::kMaxMessageBytes / sizeof(capnp::word);
    try {
      capnp::PackedMessageReader reader(in, o);
      benchmark::DoNotOptimize(reader.getSegment(0).size());
    } catch (const kj::Exception&) {
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * b.size()));
}
BENCHMARK(BM_UnpackBombBaseline);

// One page of `flowtune-ctl flows` (control_reply, built in the loop) at
// 100,000 flows, pages in turn: µs per page and per flow beside one
// iteration's (BM_Iterate, same run).
void BM_CtlFlowsPage(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  const auto page = static_cast<std::size_t>(state.range(1));
  daemon::ControlCache cache;
  std::uint64_t from = 0;
  for (auto _ : state) {
    const std::string r = daemon::control_reply(
        *s.alloc, {"bench", 0, {}, {}, {}}, "flows " + std::to_string(page) + " " + std::to_string(from), s.now,
        cache);
    benchmark::DoNotOptimize(r.data());
    from = (from + page) % s.alloc->num_flows();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * page));
}
BENCHMARK(BM_CtlFlowsPage)->ArgNames({"active", "page"})->Args({100352, 500})->Unit(benchmark::kMicrosecond);

// `flowtune-ctl status`, one page of `links` and one of `tenants` at
// 100,000 flows (carrying `tenants` distinct tenant names), requests in
// turn as a flood sends them, the server's clock moving 5 ms a request (200
// requests a second, the server's budget): with shared:1 the replies share
// one pass over the flows a second (ControlCache, as the server does), with
// shared:0 each makes its own (the baseline: status did so before). What
// each request costs the loop, beside BM_Iterate's iteration.
void ctl_requests(benchmark::State& state, const std::string& request) {
  Setup s = make(static_cast<std::size_t>(state.range(0)), daemon::AllocatorConfig{}.timer_slice,
                 static_cast<std::size_t>(state.range(1)));
  // shared:0, the baseline: a pass per request (an unlimited budget).
  daemon::ControlCache cache(state.range(2) != 0 ? daemon::ControlCache::kPassesPerSec : 0);
  std::size_t bytes = 0;
  for (auto _ : state) {
    s.now += 5000;
    // The loop iterates between requests (off the clock): every request
    // finds the rates moved.
    state.PauseTiming();
    s.alloc->iterate(s.now);
    benchmark::DoNotOptimize(s.alloc->take_outbox());
    state.ResumeTiming();
    const std::string r = daemon::control_reply(*s.alloc, {"bench", 0, {}, {}, {}}, request, s.now, cache);
    bytes = r.size();
    benchmark::DoNotOptimize(r.data());
  }
  state.counters["reply_bytes"] = static_cast<double>(bytes);
  state.counters["passes_per_request"] =
      static_cast<double>(cache.passes()) / static_cast<double>(state.iterations());
}
void BM_CtlStatus(benchmark::State& state) { ctl_requests(state, "status"); }
void BM_CtlLinksPage(benchmark::State& state) { ctl_requests(state, "links 500"); }
void BM_CtlTenantsPage(benchmark::State& state) { ctl_requests(state, "tenants 500"); }
void ctl_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"active", "tenants", "shared"})->Unit(benchmark::kMicrosecond);
  for (int shared : {0, 1}) {
    for (int tenants : {0, 65536}) b->Args({100352, tenants, shared});
  }
}
BENCHMARK(BM_CtlStatus)->Apply(ctl_args);
BENCHMARK(BM_CtlLinksPage)->Apply(ctl_args);
BENCHMARK(BM_CtlTenantsPage)->Apply(ctl_args);

void BM_Iterate(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    s.alloc->iterate(++s.now);
    benchmark::DoNotOptimize(s.alloc->take_outbox());
  }
  state.counters["ns_per_flow"] = benchmark::Counter(
      static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_Iterate)->ArgName("active")->Arg(1024)->Arg(10240)->Arg(50176);

void BM_EngineIterate(benchmark::State& state) {
  Setup s = make(static_cast<std::size_t>(state.range(0)));
  auto& engine = const_cast<alloc::Engine&>(s.alloc->engine());
  for (auto _ : state) engine.iterate();
  state.counters["ns_per_flow"] = benchmark::Counter(
      static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
}
BENCHMARK(BM_EngineIterate)->ArgName("active")->Arg(1024)->Arg(10240)->Arg(50176);

void BM_LeaseRefresh(benchmark::State& state) {
  const auto slice = static_cast<std::uint32_t>(state.range(1));
  Setup s = make(static_cast<std::size_t>(state.range(0)), slice == 0 ? UINT32_MAX : slice);
  double calls = 0;
  for (auto _ : state) {
    s.now += 300'000;
    // One tick: as many calls as the server's turns would make.
    while (s.alloc->next_timer_us() <= s.now) {
      s.alloc->on_timer(s.now);
      benchmark::DoNotOptimize(s.alloc->take_outbox());
      ++calls;
    }
  }
  state.counters["ns_per_flow"] = benchmark::Counter(
      static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate |
                                               benchmark::Counter::kInvert);
  // What one server turn carries: the tick's time over its calls.
  state.counters["calls_per_tick"] = calls / static_cast<double>(state.iterations());
  state.counters["us_per_call"] = benchmark::Counter(
      calls / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
// slice 0: the whole tick in one call (as before ticks were sliced).
BENCHMARK(BM_LeaseRefresh)->ArgNames({"active", "slice"})->ArgsProduct({{1024, 50176, 200704}, {0, 8192}});

}  // namespace

BENCHMARK_MAIN();
