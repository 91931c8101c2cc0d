#include "control.h"

#include <algorithm>
#include <cmath>

#include "flowtune/alloc/coflow.h"
#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/policy.h"
#include "flowtune/alloc/topology.h"
#include "flowtune/common/assert.h"
#include "flowtune/common/rules.h"
#include "flowtune/wire/codec.h"

namespace flowtune::packet {

std::uint64_t flow_hash(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t src_port,
                        std::uint16_t dst_port, std::uint8_t protocol) {
  return alloc::ecmp_hash(alloc::FiveTuple{src_ip, dst_ip, src_port, dst_port, protocol});
}

std::size_t framed_bytes(std::size_t encoded) { return rules::zmq_frame_bytes(encoded); }

namespace {

alloc::Topology engine_topology(const Config& c) {
  if (c.shape == Shape::kStar) return alloc::Topology::big_switch(c.star_hosts, c.host_gbps * 1e9);
  alloc::TwoTierSpec s;
  s.racks = c.racks;
  s.hosts_per_rack = c.hosts_per_rack;
  s.spines = c.spines;
  s.host_link_bps = c.host_gbps * 1e9;
  s.spine_link_bps = c.core_gbps * 1e9;
  return alloc::Topology::two_tier(s);
}

std::vector<double> scheduled(const alloc::Topology& t, double threshold) {
  std::vector<double> caps = t.capacities_bps();
  for (double& x : caps) x *= rules::capacity_scale(threshold, rules::kHeadroom);
  return caps;
}

constexpr alloc::FlowId kNone = ~alloc::FlowId{0};

}  // namespace

struct AllocatorModel::Impl {
  explicit Impl(const Config& c)
      : config(c),
        topo(engine_topology(c)),
        engine(scheduled(topo, c.threshold), topo.num_sites(), alloc::EngineConfig{}) {
    alloc::CoflowPolicy p = alloc::CoflowPolicy::kNone;
    const bool known = alloc::parse_coflow_policy(c.coflow_policy, p);
    FT_ASSERT(known, c.coflow_policy);  // validate() checked it
    const auto why = book.set_coflow(p, c.coflow_share);
    FT_ASSERT(why.empty(), why);
  }
  struct Held {
    alloc::FlowId id = kNone;
    std::uint64_t key = 0;
    std::uint64_t told = 0;  // bytes/s, 0 = nothing told
    std::uint32_t src = 0;
  };
  Config config;
  alloc::Topology topo;
  alloc::Engine engine;
  alloc::PolicyBook book;
  std::vector<Held> flows;  // by run flow index
  std::vector<std::uint32_t> live;
  bool changed = false;
  std::uint64_t now_us = 0;
};

AllocatorModel::AllocatorModel(const Config& c) : impl_(std::make_unique<Impl>(c)) {}
AllocatorModel::~AllocatorModel() = default;

namespace {
std::uint64_t to_us(double s) { return static_cast<std::uint64_t>(std::llround(s * 1e6)); }
}  // namespace

void AllocatorModel::start(std::uint32_t flow, std::uint64_t key, const FlowSpec& spec,
                           std::uint64_t hash, double now_s) {
  Impl& m = *impl_;
  if (m.flows.size() <= flow) m.flows.resize(flow + 1);
  Impl::Held& h = m.flows[flow];
  const alloc::FlowSpec fs = alloc::make_flow(m.topo, spec.src, spec.dst, hash);
  h.id = m.engine.add_flow(fs);
  alloc::FlowPolicy p;
  p.bytes = spec.stop_s > 0 ? 0 : spec.bytes;  // a streaming sender's size is unknown
  p.coflow = spec.coflow;
  p.path = fs.path;
  m.book.add(h.id, p, to_us(now_s));
  h.key = key;
  h.told = 0;
  h.src = spec.src;
  m.live.push_back(flow);
  m.changed = true;
}

void AllocatorModel::end(std::uint32_t flow) {
  Impl& m = *impl_;
  if (flow >= m.flows.size() || m.flows[flow].id == kNone) return;
  m.book.remove(m.flows[flow].id);
  m.engine.remove_flow(m.flows[flow].id);
  m.flows[flow].id = kNone;
  m.live.erase(std::find(m.live.begin(), m.live.end(), flow));
  m.changed = true;
}

// As the daemon: busy while the flow set changed or prices have not settled.
bool AllocatorModel::busy() const {
  return impl_->changed || impl_->book.dirty(impl_->now_us) ||
         (!impl_->live.empty() && !impl_->engine.stats().converged);
}

AllocatorModel::Turn AllocatorModel::turn(double now_s) {
  Impl& m = *impl_;
  m.now_us = std::max(m.now_us, to_us(now_s));
  const std::uint32_t hosts = m.topo.num_hosts();
  Turn t;
  t.rates.resize(hosts);
  t.message_bytes.assign(hosts, 0);
  if (m.live.empty()) return t;
  if (m.book.dirty(m.now_us)) m.book.apply(m.engine, m.now_us);
  m.engine.iterate();
  m.changed = false;
  std::vector<wire::AllocatorMessage> out(hosts);
  for (std::uint32_t f : m.live) {
    Impl::Held& h = m.flows[f];
    const std::uint64_t rate = rules::to_bytes_per_sec(m.engine.rate_bps(h.id));
    if (rules::update_decision(rate, h.told, m.config.threshold) != rules::Update::kSend) continue;
    h.told = rate;
    t.rates[h.src].emplace_back(f, rate);
    out[h.src].rates.push_back({h.key, rate, rules::kLeaseUs});
  }
  for (std::uint32_t h = 0; h < hosts; ++h) {
    if (out[h].rates.empty()) continue;
    out[h].epoch = 1;
    out[h].lease_refresh_us = rules::kLeaseUs;
    t.message_bytes[h] = wire::encode(out[h]).size();
  }
  return t;
}

std::uint64_t AllocatorModel::iterations() const { return impl_->engine.iterations(); }

struct EndpointCodec::Impl {
  std::vector<wire::StateDigest> digests;
  std::vector<wire::EndpointMessage> open;  // per host, add()ed and not flushed
  std::uint64_t seq = 0;
  std::size_t send(std::uint32_t host, wire::EndpointEvent e) {
    wire::EndpointMessage m;
    m.events.push_back(std::move(e));
    m.seq = ++seq;
    m.digest = digests[host];
    return wire::encode(m).size();
  }
};

EndpointCodec::EndpointCodec(std::uint32_t hosts) : impl_(std::make_unique<Impl>()) {
  impl_->digests.resize(hosts);
  impl_->open.resize(hosts);
}

namespace {
// A TCP flowlet's start as the library's session would report it.
wire::FlowletStart flowlet_start(std::uint64_t key, std::uint32_t src_ip, std::uint32_t dst_ip,
                                 std::uint16_t src_port, std::uint16_t dst_port,
                                 std::uint64_t bytes, std::uint64_t coflow) {
  wire::FlowletStart s;
  s.flow_key = key;
  s.endpoints = wire::FiveTuple{src_ip, dst_ip, src_port, dst_port, 6};
  s.bytes = bytes;
  s.coflow_id = coflow;
  return s;
}
}  // namespace

void EndpointCodec::add(std::uint32_t host, std::uint64_t key, std::uint32_t src_ip,
                        std::uint32_t dst_ip, std::uint16_t src_port, std::uint16_t dst_port,
                        std::uint64_t bytes, std::uint64_t coflow) {
  impl_->digests[host].add(key);
  impl_->open[host].events.emplace_back(
      flowlet_start(key, src_ip, dst_ip, src_port, dst_port, bytes, coflow));
}

std::size_t EndpointCodec::flush(std::uint32_t host) {
  wire::EndpointMessage& m = impl_->open[host];
  if (m.events.empty()) return 0;
  m.seq = ++impl_->seq;
  m.digest = impl_->digests[host];
  const std::size_t size = wire::encode(m).size();
  m = wire::EndpointMessage{};
  return size;
}
EndpointCodec::~EndpointCodec() = default;

std::size_t EndpointCodec::start(std::uint32_t host, std::uint64_t key, std::uint32_t src_ip,
                                 std::uint32_t dst_ip, std::uint16_t src_port,
                                 std::uint16_t dst_port, std::uint64_t bytes,
                                 std::uint64_t coflow) {
  impl_->digests[host].add(key);
  return impl_->send(host, flowlet_start(key, src_ip, dst_ip, src_port, dst_port, bytes, coflow));
}

std::size_t EndpointCodec::end(std::uint32_t host, std::uint64_t key) {
  impl_->digests[host].remove(key);
  return impl_->send(host, wire::FlowletEnd{key});
}

}  // namespace flowtune::packet
