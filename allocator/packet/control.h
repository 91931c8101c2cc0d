// The Flowtune side of a packet-level run, behind a header the ns-3
// translation units can include: ns-3.37's headers compile only as C++17,
// the engine and the codec are C++20. Everything here is the project's own
// code: the engine (allocator/core), the daemon's update rule
// (common/rules.h) and the wire codec (schema/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "packet.h"

namespace flowtune::packet {

// alloc::ecmp_hash of a 5-tuple (addresses and ports in host order): the
// spine a ToR forwards a flow to is this modulo the spines, as in the
// engine's Topology::path.
std::uint64_t flow_hash(std::uint32_t src_ip, std::uint32_t dst_ip, std::uint16_t src_port,
                        std::uint16_t dst_port, std::uint8_t protocol);

// The allocator node: the engine over the run's topology (capacities scaled
// by rules::capacity_scale, as the daemon does), fed starts and ends, one
// iteration per turn, and the update rule deciding what to send. With a
// coflow policy (Config::coflow_policy), the daemon's PolicyBook plans the
// coflow order into floors before an iteration, as the daemon does.
class AllocatorModel {
 public:
  explicit AllocatorModel(const Config& c);
  ~AllocatorModel();
  AllocatorModel(const AllocatorModel&) = delete;
  AllocatorModel& operator=(const AllocatorModel&) = delete;

  // `flow` is the run's flow index; key what the endpoint calls it; the
  // spec's bytes (0: unknown) and coflow go to the policy.
  void start(std::uint32_t flow, std::uint64_t key, const FlowSpec& spec, std::uint64_t hash,
             double now_s);
  void end(std::uint32_t flow);
  bool busy() const;
  // One engine iteration, then the rates to send: (flow, bytes/s) grouped by
  // source host; rates_bytes[h] is the encoded size of host h's message (0:
  // nothing to send).
  struct Turn {
    std::vector<std::vector<std::pair<std::uint32_t, std::uint64_t>>> rates;
    std::vector<std::size_t> message_bytes;
  };
  Turn turn(double now_s);
  std::uint64_t iterations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// An endpoint's messages as the real codec encodes them: sequence numbers and
// the state digest every message carries. Returns encoded sizes (no framing).
class EndpointCodec {
 public:
  explicit EndpointCodec(std::uint32_t hosts);
  ~EndpointCodec();
  EndpointCodec(const EndpointCodec&) = delete;
  EndpointCodec& operator=(const EndpointCodec&) = delete;
  std::size_t start(std::uint32_t host, std::uint64_t key, std::uint32_t src_ip,
                    std::uint32_t dst_ip, std::uint16_t src_port, std::uint16_t dst_port,
                    std::uint64_t bytes, std::uint64_t coflow = 0);
  // Several starts in one message, as an endpoint sends the events of one
  // poll: add() each, then flush() encodes them (0 when none was added).
  void add(std::uint32_t host, std::uint64_t key, std::uint32_t src_ip, std::uint32_t dst_ip,
           std::uint16_t src_port, std::uint16_t dst_port, std::uint64_t bytes,
           std::uint64_t coflow);
  std::size_t flush(std::uint32_t host);
  std::size_t end(std::uint32_t host, std::uint64_t key);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes a message of `encoded` bytes takes in its ZeroMQ frame.
std::size_t framed_bytes(std::size_t encoded);

}  // namespace flowtune::packet
