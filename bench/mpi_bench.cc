// The engine across MPI ranks (allocator/mpi) at the paper's §5.2 sizes:
// per NED + F-NORM iteration, its time (the slowest rank's, p50 and p99),
// the split between the slowest rank's own work and the rest (MPI), and the bytes
// a rank sends; beside it, in the same run, the single-process engine with
// the same FlowBlocks on rank 0 alone (the baseline of the ratio). Every
// exchange, the diagonal one only under 4^k ranks (else "skipped" says why).
//
//   mpirun -np R build/release/bench/mpi_bench [--blocks B] [--iterations N]
//          [--sizes HOSTS:FLOWS,...] [--quick] > mpi.json
//
// As root, Open MPI wants --allow-run-as-root (or OMPI_ALLOW_RUN_AS_ROOT=1
// and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1). Prints one JSON object on rank 0;
// docs/results/scale-mpi.md fits its model to these figures.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_journal.h"
#include "flowtune/alloc/mpi_driver.h"
#include "flowtune/alloc/topology.h"
#include "workload.h"

namespace {

using flowtune::alloc::Engine;
using flowtune::alloc::EngineConfig;
using flowtune::alloc::Exchange;
using flowtune::alloc::FlowSpec;
using flowtune::alloc::JournaledEngine;
using flowtune::alloc::MpiDriver;
using flowtune::alloc::Topology;
using flowtune::alloc::TwoTierSpec;
using Clock = std::chrono::steady_clock;

// engine_bench's network: racks of 16 hosts, 4 spines, 40 Gbit/s host links.
Topology make_topology(std::uint32_t hosts) {
  TwoTierSpec s;
  s.racks = hosts / 16;
  s.hosts_per_rack = 16;
  s.spines = 4;
  s.host_link_bps = 40e9;
  return Topology::two_tier(s);
}

double us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

struct Options {
  std::uint32_t blocks = 2;
  int iterations = 400;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes = {
      {384, 3072}, {768, 6144}, {1536, 12288}, {1536, 24576}, {1536, 49152}, {3072, 49152}, {4608, 49152}};
};

[[noreturn]] void usage(int rank, const char* why) {
  if (rank == 0) {
    std::fprintf(stderr,
                 "mpi_bench: %s\nusage: mpirun -np R mpi_bench [--blocks B] [--iterations N] "
                 "[--sizes HOSTS:FLOWS,...] [--quick]\n",
                 why);
  }
  MPI_Finalize();
  std::exit(2);
}

Options parse(int argc, char** argv, int rank) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(rank, (a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--blocks") {
      o.blocks = static_cast<std::uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
      if (o.blocks < 1 || o.blocks > 64) usage(rank, "--blocks must be between 1 and 64");
    } else if (a == "--iterations") {
      o.iterations = std::atoi(value().c_str());
      if (o.iterations < 10) usage(rank, "--iterations must be at least 10");
    } else if (a == "--sizes") {
      o.sizes.clear();
      std::string s = value();
      for (std::size_t at = 0; at < s.size();) {
        std::size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        unsigned h = 0, f = 0;
        if (std::sscanf(s.substr(at, end - at).c_str(), "%u:%u", &h, &f) != 2 || h < 32 || h % 16 || f == 0) {
          usage(rank, "--sizes wants HOSTS:FLOWS pairs, hosts a multiple of 16 (at least 32)");
        }
        o.sizes.emplace_back(h, f);
        at = end + 1;
      }
    } else if (a == "--quick") {
      o.iterations = 40;
      // Flows per host differ from one size to the next, so that the
      // model (bench/mpi_model.py) can tell flows' cost from links'.
      o.sizes = {{384, 3072}, {1536, 6144}, {1536, 24576}};
    } else if (a == "-h" || a == "--help") {
      usage(rank, "the engine across MPI ranks, per iteration");
    } else {
      usage(rank, ("unknown option " + a).c_str());
    }
  }
  return o;
}

// Per-iteration times of the slowest rank (each rank's time, max over ranks).
std::vector<double> slowest(const std::vector<double>& mine) {
  std::vector<double> out(mine.size());
  MPI_Allreduce(mine.data(), out.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  return out;
}

double max_over_ranks(double x) {
  double out = 0;
  MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

nlohmann::json measure(const Options& o, std::uint32_t hosts, std::uint32_t flows, Exchange x,
                       double single_p50) {
  const Topology t = make_topology(hosts);
  EngineConfig cfg;
  cfg.blocks = o.blocks;
  Engine e(t.capacities_bps(), t.num_sites(), cfg);
  MpiDriver d(MPI_COMM_WORLD, x);
  d.set_link_sites(t.link_sites());
  std::size_t mine = 0;
  for (const FlowSpec& f : flowtune::bench::random_host_pairs(t, flows, 42)) {
    if (d.owns(e, f)) {
      e.add_flow(f);
      ++mine;
    }
  }
  for (int i = 0; i < 10; ++i) d.iterate(e);  // warm caches and buffers
  d.reset_times();
  // Per iteration: its time, and this rank's time in MPI within it.
  std::vector<double> times, in_mpi;
  times.reserve(static_cast<std::size_t>(o.iterations));
  in_mpi.reserve(static_cast<std::size_t>(o.iterations));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < o.iterations; ++i) {
    const double mpi0 = d.times().exchange_s;
    const auto t0 = Clock::now();
    d.iterate(e);
    times.push_back(us(Clock::now() - t0));
    in_mpi.push_back((d.times().exchange_s - mpi0) * 1e6);
  }
  // A rank's own work in an iteration is its time less its time in MPI
  // (which includes waiting for the slowest rank).
  std::vector<double> own(times.size());
  for (std::size_t i = 0; i < times.size(); ++i) own[i] = times[i] - in_mpi[i];
  const std::vector<double> worst = slowest(times);
  const std::vector<double> worst_own = slowest(own);
  const auto& tm = d.times();
  const double n = static_cast<double>(tm.iterations);
  const double p50 = quantile(worst, 0.5);
  return {{"hosts", hosts},
          {"flows", flows},
          {"blocks", cfg.blocks * cfg.blocks},
          {"exchange", flowtune::alloc::to_string(x)},
          {"iteration_us_p50", p50},
          {"iteration_us_p99", quantile(worst, 0.99)},
          // The slowest rank's own work (p50 over iterations), and the rest
          // of the iteration: MPI's cost with the imbalance between ranks.
          {"compute_us_p50", quantile(worst_own, 0.5)},
          {"mpi_us_p50", p50 - quantile(worst_own, 0.5)},
          {"bytes_sent_per_iteration_max_rank", max_over_ranks(static_cast<double>(tm.bytes_sent) / n)},
          {"flows_on_largest_rank", max_over_ranks(static_cast<double>(mine))},
          {"entries_per_iteration_max_rank", max_over_ranks(static_cast<double>(tm.entries) / n)},
          // All-to-all count exchanges and neighbour graphs made over the
          // timed iterations (kNeighbors exchanges only after a change).
          {"counts_exchanges_max_rank", max_over_ranks(static_cast<double>(tm.counts_exchanges))},
          {"graphs_max_rank", max_over_ranks(static_cast<double>(tm.graphs))},
          // kDiagonal: LinkBlock arrays sent (sums and answers).
          {"arrays_sent_per_iteration_max_rank", max_over_ranks(static_cast<double>(tm.arrays_sent) / n)},
          {"links", t.num_links()},
          {"single_process_us_p50", single_p50},
          {"speedup_vs_single_process", single_p50 / p50}};
}

// flowtune-allocator --mpi's way: every rank holds every flow (a mirror),
// rank 0 leads each iteration and gathers the other ranks' rates, so it
// holds all of them. Timed on rank 0. gather: the gather threshold (0:
// every rate every iteration); change_every: 0, an empty journal every
// iteration (no churn), else one flow leaves and another comes every that
// many iterations (a full gather there).
nlohmann::json measure_mirror(const Options& o, std::uint32_t hosts, std::uint32_t flows, double single_p50,
                              double gather = 0, int change_every = 0) {
  const Topology t = make_topology(hosts);
  EngineConfig cfg;
  cfg.blocks = o.blocks;
  JournaledEngine<double> e(t.capacities_bps(), t.num_sites(), cfg);
  const std::vector<FlowSpec> specs = flowtune::bench::random_host_pairs(t, flows, 42);
  std::vector<flowtune::alloc::FlowId> ids;
  for (const FlowSpec& f : specs) ids.push_back(e.add_flow(f));
  MpiDriver d(MPI_COMM_WORLD);
  d.set_gather_threshold(gather);
  std::vector<double> times;
  std::uint64_t received = 0;
  if (d.rank() == 0) {
    std::vector<std::uint8_t> journal;
    e.set_journal(&journal);
    for (int i = 0; i < 10; ++i) d.lead(e, &journal);
    const std::uint64_t received0 = d.times().rates_received;
    for (int i = 0; i < o.iterations; ++i) {
      if (change_every > 0 && i % change_every == 0) {
        const std::size_t k = static_cast<std::size_t>(i / change_every) % ids.size();
        e.remove_flow(ids[k]);
        ids[k] = e.add_flow(specs[k]);
      }
      const auto t0 = Clock::now();
      d.lead(e, &journal);
      times.push_back(us(Clock::now() - t0));
    }
    received = d.times().rates_received - received0;
    d.finish();
  } else {
    (void)d.follow(e);
  }
  double p50 = 0, p99 = 0;
  if (d.rank() == 0) {
    p50 = quantile(times, 0.5);
    p99 = quantile(times, 0.99);
  }
  MPI_Bcast(&p50, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Bcast(&p99, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return {{"hosts", hosts},
          {"flows", flows},
          {"blocks", cfg.blocks * cfg.blocks},
          {"exchange", gather == 0 && change_every == 0
                           ? std::string("mirror (--mpi)")
                           : "mirror (--mpi), gather threshold " + std::to_string(gather).substr(0, 4) +
                                 (change_every > 0 ? ", a change every " + std::to_string(change_every)
                                                   : std::string(", no changes"))},
          {"gather_threshold", gather},
          {"change_every", change_every},
          {"iteration_us_p50", p50},
          {"iteration_us_p99", p99},
          {"rates_received_per_iteration", static_cast<double>(received) / o.iterations},
          {"rates_gathered_bytes", static_cast<double>(flows) * 2 * sizeof(double)},
          {"single_process_us_p50", single_p50},
          {"speedup_vs_single_process", single_p50 / p50}};
}

// The other ranks wait for rank 0 asleep: MPI's waits spin, and a spinning
// rank would take from rank 0's core what the baseline must have (on a VM
// its vCPU may share a physical core with rank 0's).
void wait_asleep() {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0; MPI_Test(&r, &done, MPI_STATUS_IGNORE), !done;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The baseline: every flow in one engine with the same blocks, on rank 0.
double single_process(const Options& o, std::uint32_t hosts, std::uint32_t flows, int rank) {
  double p50 = 0;
  if (rank == 0) {
    const Topology t = make_topology(hosts);
    EngineConfig cfg;
    cfg.blocks = o.blocks;
    Engine e(t.capacities_bps(), t.num_sites(), cfg);
    for (const FlowSpec& f : flowtune::bench::random_host_pairs(t, flows, 42)) e.add_flow(f);
    for (int i = 0; i < 10; ++i) e.iterate();
    std::vector<double> times;
    for (int i = 0; i < o.iterations; ++i) {
      const auto t0 = Clock::now();
      e.iterate();
      times.push_back(us(Clock::now() - t0));
    }
    p50 = quantile(times, 0.5);
  }
  wait_asleep();
  MPI_Bcast(&p50, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return p50;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Options o = parse(argc, argv, rank);
  nlohmann::json results = nlohmann::json::array();
  // The diagonal exchange's grid takes 4^k ranks only.
  std::vector<Exchange> exchanges = {Exchange::kLinkOwners, Exchange::kNeighbors, Exchange::kAllreduce};
  nlohmann::json skipped = nlohmann::json::array();
  if (MpiDriver::square_of_power_of_two(ranks)) {
    exchanges.push_back(Exchange::kDiagonal);
  } else {
    skipped.push_back("diagonal: its grid needs 4^k ranks (1, 4, 16, ...); this run has " + std::to_string(ranks));
    if (rank == 0) std::fprintf(stderr, "mpi_bench: skipping %s\n", skipped.back().get<std::string>().c_str());
  }
  for (auto [hosts, flows] : o.sizes) {
    const double single = single_process(o, hosts, flows, rank);
    for (Exchange x : exchanges) results.push_back(measure(o, hosts, flows, x, single));
    results.push_back(measure_mirror(o, hosts, flows, single));
    results.push_back(measure_mirror(o, hosts, flows, single, 0.01, 0));
    results.push_back(measure_mirror(o, hosts, flows, single, 0.01, 4));
  }
  if (rank == 0) {
    nlohmann::json out = {{"ranks", ranks}, {"iterations", o.iterations}, {"real", "double"},
                          {"skipped", skipped}, {"results", results}};
    std::printf("%s\n", out.dump(1).c_str());
  }
  MPI_Finalize();
  return 0;
}
