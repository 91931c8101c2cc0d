#include "network.h"

#include <stdexcept>
#include <string>

#include "control.h"
#include "ns3/core-module.h"
#include "ns3/point-to-point-module.h"

namespace flowtune::packet {

using namespace ns3;

const char* hop_name(int hop) {
  static const char* names[kNumHops] = {"host_up", "tor_up", "spine_down", "tor_down", "control"};
  return hop >= 0 && hop < kNumHops ? names[hop] : "?";
}

namespace {

// Host h's link is 10.0.0.0 + 4h /30 (host .1, ToR .2); the allocator's is
// 10.255.255.252/30; ToR r to spine s is 11.0.0.0 + 4(r * spines + s) /30.
constexpr std::uint32_t kHostBase = 0x0a000000u;
constexpr std::uint32_t kAllocatorNet = 0x0afffffcu;
constexpr std::uint32_t kCoreBase = 0x0b000000u;

// Static forwarding for every node: a table from destination host (or the
// allocator) to an interface, else up; up is a spine chosen by the flow's
// 5-tuple hash, as the engine's Topology::path picks it.
class FabricRouting : public Ipv4RoutingProtocol {
 public:
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("flowtune::FabricRouting")
                            .SetParent<Ipv4RoutingProtocol>()
                            .AddConstructor<FabricRouting>();
    return tid;
  }
  // to_host[h]: interface towards host h, or -1 to go up; uplinks in spine order.
  void configure(std::vector<int> to_host, int to_allocator, std::vector<std::uint32_t> uplinks) {
    to_host_ = std::move(to_host);
    to_allocator_ = to_allocator;
    uplinks_ = std::move(uplinks);
  }

  Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p, const Ipv4Header& header, Ptr<NetDevice>,
                             Socket::SocketErrno& err) override {
    const int oif = choose(p, header);
    if (oif < 0) {
      err = Socket::ERROR_NOROUTETOHOST;
      return nullptr;
    }
    err = Socket::ERROR_NOTERROR;
    return route(header, static_cast<std::uint32_t>(oif));
  }

  bool RouteInput(Ptr<const Packet> p, const Ipv4Header& header, Ptr<const NetDevice> idev,
                  UnicastForwardCallback ucb, MulticastForwardCallback, LocalDeliverCallback lcb,
                  ErrorCallback ecb) override {
    const std::uint32_t iif = static_cast<std::uint32_t>(ipv4_->GetInterfaceForDevice(idev));
    if (ipv4_->IsDestinationAddress(header.GetDestination(), iif)) {
      if (!lcb.IsNull()) lcb(p, header, iif);
      return true;
    }
    const int oif = choose(p, header);
    if (oif < 0) {
      ecb(p, header, Socket::ERROR_NOROUTETOHOST);
      return true;
    }
    ucb(route(header, static_cast<std::uint32_t>(oif)), p, header);
    return true;
  }

  void NotifyInterfaceUp(std::uint32_t) override {}
  void NotifyInterfaceDown(std::uint32_t) override {}
  void NotifyAddAddress(std::uint32_t, Ipv4InterfaceAddress) override {}
  void NotifyRemoveAddress(std::uint32_t, Ipv4InterfaceAddress) override {}
  void SetIpv4(Ptr<Ipv4> ipv4) override { ipv4_ = ipv4; }
  void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override {}

 private:
  int choose(Ptr<const Packet> p, const Ipv4Header& header) const {
    const Ipv4Address dst = header.GetDestination();
    const int h = host_of(dst);
    if (h >= 0 && static_cast<std::size_t>(h) < to_host_.size() && to_host_[h] >= 0)
      return to_host_[h];
    if (dst.Get() == kAllocatorNet + 1 && to_allocator_ >= 0) return to_allocator_;
    if (uplinks_.empty()) return -1;
    if (uplinks_.size() == 1) return static_cast<int>(uplinks_[0]);
    std::uint8_t ports[4] = {0, 0, 0, 0};
    if (p && header.GetFragmentOffset() == 0 && p->GetSize() >= 4) p->CopyData(ports, 4);
    const std::uint64_t hash = flow_hash(
        header.GetSource().Get(), dst.Get(), static_cast<std::uint16_t>(ports[0] << 8 | ports[1]),
        static_cast<std::uint16_t>(ports[2] << 8 | ports[3]), header.GetProtocol());
    return static_cast<int>(uplinks_[hash % uplinks_.size()]);
  }

  Ptr<Ipv4Route> route(const Ipv4Header& header, std::uint32_t oif) const {
    Ptr<Ipv4Route> r = Create<Ipv4Route>();
    r->SetDestination(header.GetDestination());
    r->SetGateway(header.GetDestination());  // point-to-point: no ARP, any next hop
    r->SetSource(ipv4_->GetAddress(oif, 0).GetLocal());
    r->SetOutputDevice(ipv4_->GetNetDevice(oif));
    return r;
  }

  Ptr<Ipv4> ipv4_;
  std::vector<int> to_host_;
  int to_allocator_ = -1;
  std::vector<std::uint32_t> uplinks_;
};

class FabricRoutingHelper : public Ipv4RoutingHelper {
 public:
  Ipv4RoutingHelper* Copy() const override { return new FabricRoutingHelper(*this); }
  Ptr<Ipv4RoutingProtocol> Create(Ptr<Node>) const override {
    return CreateObject<FabricRouting>();
  }
};

Ptr<FabricRouting> routing_of(Ptr<Node> n) {
  return DynamicCast<FabricRouting>(n->GetObject<Ipv4>()->GetRoutingProtocol());
}

// The scheme's queue discipline on every port.
TrafficControlHelper queue_helper(const Config& c, double gbps) {
  TrafficControlHelper tc;
  const std::string size = std::to_string(c.buffer_packets) + "p";
  switch (c.scheme) {
    case Scheme::kDctcp: {
      const double k = c.dctcp_k_packets;
      tc.SetRootQueueDisc("ns3::RedQueueDisc", "MaxSize", StringValue(size), "MinTh",
                          DoubleValue(k), "MaxTh", DoubleValue(k), "LinkBandwidth",
                          DataRateValue(DataRate(static_cast<std::uint64_t>(gbps * 1e9))),
                          "LinkDelay",
                          TimeValue(MicroSeconds(static_cast<std::int64_t>(c.link_delay_us))));
      break;
    }
    case Scheme::kFqCodel:
      tc.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "MaxSize", StringValue(size), "Target",
                          StringValue(std::to_string(c.codel_target_us) + "us"), "Interval",
                          StringValue(std::to_string(c.codel_interval_us) + "us"));
      break;
    default:
      tc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue(size));
  }
  return tc;
}

void record_sojourn(std::vector<float>* out, Time t) {
  out->push_back(static_cast<float>(t.GetSeconds() * 1e6));
}

// A point-to-point link a-b at `gbps` with the scheme's queues; returns the
// two devices. hop_a / hop_b: where each end's queue sits.
NetDeviceContainer link(const Config& c, Network* net, Ptr<Node> a, Ptr<Node> b, double gbps,
                        int hop_a, int hop_b, std::uint32_t subnet) {
  PointToPointHelper p2p;
  p2p.SetDeviceAttribute("DataRate",
                         DataRateValue(DataRate(static_cast<std::uint64_t>(gbps * 1e9))));
  p2p.SetChannelAttribute("Delay",
                          TimeValue(NanoSeconds(static_cast<std::int64_t>(c.link_delay_us * 1e3))));
  p2p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
  NetDeviceContainer d = p2p.Install(a, b);
  QueueDiscContainer q = queue_helper(c, gbps).Install(d);
  const int hops[2] = {hop_a, hop_b};
  for (std::uint32_t i = 0; i < 2; ++i) {
    net->ports.push_back({q.Get(i), hops[i]});
    q.Get(i)->TraceConnectWithoutContext(
        "SojournTime", MakeBoundCallback(&record_sojourn, &net->sojourn_us[hops[i]]));
  }
  Ipv4AddressHelper addr;
  addr.SetBase(Ipv4Address(subnet), Ipv4Mask("255.255.255.252"));
  addr.Assign(d);
  return d;
}

std::uint32_t if_of(Ptr<NetDevice> d) {
  return static_cast<std::uint32_t>(d->GetNode()->GetObject<Ipv4>()->GetInterfaceForDevice(d));
}

}  // namespace

int host_of(Ipv4Address a) {
  const std::uint32_t v = a.Get();
  if (v < kHostBase || v >= kAllocatorNet) return -1;
  return static_cast<int>((v - kHostBase) >> 2);
}

void build_network(const Config& c, Network* net) {
  const bool star = c.shape == Shape::kStar;
  const std::uint32_t hosts = num_hosts(c);
  const std::uint32_t racks = star ? 1 : c.racks, per_rack = star ? hosts : c.hosts_per_rack;
  const std::uint32_t spines = star ? 0 : c.spines;
  net->sojourn_us.assign(kNumHops, {});
  net->hosts.Create(hosts);
  net->switches.Create(racks + spines);
  net->allocator = CreateObject<Node>();
  InternetStackHelper stack;
  stack.SetRoutingHelper(FabricRoutingHelper());
  stack.Install(net->hosts);
  stack.Install(net->switches);
  stack.Install(net->allocator);

  std::vector<std::vector<int>> to_host(racks + spines, std::vector<int>(hosts, -1));
  std::vector<std::vector<std::uint32_t>> up(racks + spines);
  for (std::uint32_t h = 0; h < hosts; ++h) {
    const std::uint32_t r = h / per_rack;
    auto d = link(c, net, net->hosts.Get(h), net->switches.Get(r), c.host_gbps, kHostUp, kTorDown,
                  kHostBase + 4 * h);
    net->host_addr.push_back(Ipv4Address(kHostBase + 4 * h + 1));
    net->into_host.push_back(net->ports.back().qdisc);
    routing_of(net->hosts.Get(h))->configure({}, -1, {if_of(d.Get(0))});
    to_host[r][h] = static_cast<int>(if_of(d.Get(1)));
  }
  for (std::uint32_t r = 0; r < racks; ++r) {
    for (std::uint32_t s = 0; s < spines; ++s) {
      auto d = link(c, net, net->switches.Get(r), net->switches.Get(racks + s), c.core_gbps, kTorUp,
                    kSpineDown, kCoreBase + 4 * (r * spines + s));
      up[r].push_back(if_of(d.Get(0)));
      for (std::uint32_t h = r * per_rack; h < (r + 1) * per_rack; ++h) {
        to_host[racks + s][h] = static_cast<int>(if_of(d.Get(1)));
      }
      if (r == 0)
        up[racks + s].push_back(if_of(d.Get(1)));  // spines reach the allocator via rack 0
    }
  }
  auto d = link(c, net, net->allocator, net->switches.Get(0), c.allocator_gbps, kControl, kControl,
                kAllocatorNet);
  net->allocator_addr = Ipv4Address(kAllocatorNet + 1);
  routing_of(net->allocator)->configure({}, -1, {if_of(d.Get(0))});
  for (std::uint32_t n = 0; n < racks + spines; ++n) {
    routing_of(net->switches.Get(n))
        ->configure(to_host[n], n == 0 ? static_cast<int>(if_of(d.Get(1))) : -1, up[n]);
  }
}

}  // namespace flowtune::packet
