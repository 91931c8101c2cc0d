// The simulated network (ns-3): hosts, ToRs, spines and the allocator node,
// their links and queues, and the routing that forwards each flow over the
// spine the engine's topology gives its 5-tuple (alloc::ecmp_hash), so the
// allocator's paths are the packets' paths. Internal to flowtune-packet.
#pragma once

#include <cstdint>
#include <vector>

#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/traffic-control-module.h"
#include "packet.h"

namespace flowtune::packet {

// Where a port's queue sits on a flow's path.
enum Hop { kHostUp, kTorUp, kSpineDown, kTorDown, kControl, kNumHops };
const char* hop_name(int hop);

struct Network {
  ns3::NodeContainer hosts, switches;  // switches: ToRs, then spines
  ns3::Ptr<ns3::Node> allocator;
  std::vector<ns3::Ipv4Address> host_addr;
  ns3::Ipv4Address allocator_addr;
  struct Port {
    ns3::Ptr<ns3::QueueDisc> qdisc;
    int hop = kHostUp;
  };
  std::vector<Port> ports;
  std::vector<ns3::Ptr<ns3::QueueDisc>> into_host;  // the ToR port facing each host
  // Per hop: every packet's time in a queue, µs (filled while running).
  std::vector<std::vector<float>> sojourn_us;
};

// Builds the network of `c` (Clos or star) with the scheme's queues, the
// allocator node on rack 0's ToR (or the star's switch). Call once per run,
// before ns3::Simulator::Run().
void build_network(const Config& c, Network* net);

// The engine's host id for an address (-1: not a host).
int host_of(ns3::Ipv4Address a);

}  // namespace flowtune::packet
