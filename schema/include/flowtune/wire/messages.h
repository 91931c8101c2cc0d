// Flowtune's protocol messages as plain C++ values (schema/flowtune.capnp is
// the wire form; codec.h converts). Both sides of the protocol include this
// one header, so units, limits and ids cannot drift apart (a Fastpass bug
// came from two sides disagreeing on time units).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace flowtune::wire {

inline constexpr std::uint16_t kProtocolVersion = 1;

// Limits every decoder enforces; larger values are bad input. They are chosen
// so that any message a decoder accepts re-encodes within them too: at most
// one hello, and at most kMaxItemsPerMessage events, resync entries, rates or
// errors in all (a sender splits bigger batches).
inline constexpr std::size_t kMaxMessageBytes = 4u << 20;  // one ZeroMQ frame
inline constexpr std::size_t kMaxItemsPerMessage = 16384;
inline constexpr std::size_t kMaxErrorsPerMessage = 1024;
// An allocator answers an endpoint's messages over a rate limit with
// rateLimited at most once per this time (the rest are dropped unanswered),
// and an endpoint told so waits at least this long before it resyncs.
inline constexpr std::uint64_t kRateLimitedQuietUs = 100'000;
// The most flows one resync can carry next to its hello: an endpoint's whole
// live state must fit one message, so this also caps flows per endpoint.
inline constexpr std::size_t kMaxResyncFlows = kMaxItemsPerMessage - 2;
inline constexpr std::size_t kMaxTextBytes = 256;
inline constexpr std::uint64_t kMaxFlowletBytes = std::uint64_t{1} << 60;
inline constexpr float kMinWeight = 1e-6f;  // as the engine (alloc::kMinWeight)
inline constexpr float kMaxWeight = 1e6f;
// Strict priority classes, as the engine's (alloc::kNumClasses); a start
// without one says kClassUnset and gets the operator's default.
inline constexpr std::uint8_t kNumClasses = 8;
inline constexpr std::uint8_t kClassUnset = 255;
inline constexpr std::uint64_t kMaxDeadlineUs = std::uint64_t{1} << 42;  // ~51 days

struct FiveTuple {
  std::uint32_t src_ip = 0;  // IPv4, host byte order
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = 0;
  std::uint8_t protocol = 6;
  bool operator==(const FiveTuple&) const = default;
};

struct HostPair {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  bool operator==(const HostPair&) const = default;
};

struct FlowletStart {
  std::uint64_t flow_key = 0;
  std::variant<FiveTuple, HostPair> endpoints;
  std::uint64_t bytes = 0;  // 0 = not known
  float weight = 1.0f;
  std::uint64_t coflow_id = 0;
  std::uint8_t priority_class = kClassUnset;  // 0..kNumClasses-1 or kClassUnset
  std::string tenant;                         // empty = not set
  std::uint64_t deadline_us = 0;  // time left when sent; 0 = none
  bool operator==(const FlowletStart&) const = default;
};

struct Hello {
  std::string endpoint_id;
  std::string host_id;
  // The host's aggregate pacer: holds no flows, is told the host's rate.
  bool host_pacer = false;
  bool operator==(const Hello&) const = default;
};

struct FlowletEnd {
  std::uint64_t flow_key = 0;
  bool operator==(const FlowletEnd&) const = default;
};

struct Heartbeat {
  bool operator==(const Heartbeat&) const = default;
};

struct Resync {
  std::vector<FlowletStart> flows;
  bool operator==(const Resync&) const = default;
};

// Live flows whose rate the endpoint does not apply (it never arrived, or its
// lease lapsed): the allocator answers with each one's current rate, whatever
// its update threshold says, or with unknownFlow for a key it does not hold.
struct RateRequest {
  std::vector<std::uint64_t> flow_keys;
  bool operator==(const RateRequest&) const = default;
};

// How far reported flowlets have got (schema: FlowProgress): each one's size
// as now known and the bytes handed to the kernel so far. Endpoints send it
// only to an allocator whose helloAck came with progress_ok.
struct FlowProgress {
  std::uint64_t flow_key = 0;
  std::uint64_t bytes = 0;
  std::uint64_t sent = 0;
  bool operator==(const FlowProgress&) const = default;
};
struct Progress {
  std::vector<FlowProgress> flows;
  bool operator==(const Progress&) const = default;
};

using EndpointEvent =
    std::variant<Hello, FlowletStart, FlowletEnd, Heartbeat, Resync, RateRequest, Progress>;

// The endpoint's live reported flows after a message's events: how many, and
// the sum of digest_mix(key) over them (wrapping). Both sides keep it
// incrementally with the same function, so a lost start or end shows as a
// mismatch on the next message.
struct StateDigest {
  std::uint32_t flows = 0;
  std::uint64_t key_sum = 0;
  void add(std::uint64_t key) {
    ++flows;
    key_sum += digest_mix(key);
  }
  void remove(std::uint64_t key) {
    --flows;
    key_sum -= digest_mix(key);
  }
  // A rated flow: its key and the bytes/s it was told, so a lost update shows.
  void add_rate(std::uint64_t key, std::uint64_t bytes_per_sec) {
    ++flows;
    key_sum += digest_mix(key ^ digest_mix(bytes_per_sec + 0x9e3779b97f4a7c15ULL));
  }
  static std::uint64_t digest_mix(std::uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  bool operator==(const StateDigest&) const = default;
};

struct EndpointMessage {
  std::uint64_t seq = 0;
  std::vector<EndpointEvent> events;
  std::optional<StateDigest> digest;  // absent: not checked
  bool operator==(const EndpointMessage&) const = default;
};

struct RateUpdate {
  std::uint64_t flow_key = 0;
  std::uint64_t bytes_per_sec = 0;
  std::uint32_t lease_us = 0;
  bool operator==(const RateUpdate&) const = default;
};

enum class ErrorCode : std::uint16_t {
  kMalformed = 0,
  kUnsupportedVersion,
  kNotRegistered,
  kUnknownFlow,
  kBadValue,
  kUnknownHost,
  kTooManyFlows,
  kRateLimited,
  kStateMismatch,
  kStandby,
};
const char* to_string(ErrorCode c);

struct ErrorReport {
  ErrorCode code = ErrorCode::kMalformed;
  std::string text;
  std::uint64_t flow_key = 0;
  bool operator==(const ErrorReport&) const = default;
};

struct AllocatorMessage {
  std::uint64_t epoch = 0;
  std::vector<RateUpdate> rates;
  std::uint32_t lease_refresh_us = 0;
  std::vector<ErrorReport> errors;
  // A hello in the message answered was accepted (the endpoint is
  // registered); a refused hello is answered with errors only.
  bool hello_ack = false;
  // With a lease refresh: a digest of (key, rate) over the flows the
  // allocator has rated for this endpoint (StateDigest::add_rate), and the
  // seq of the endpoint's last message handled before it.
  std::optional<StateDigest> rate_digest;
  std::uint64_t ack_seq = 0;
  // To a host pacer: bytes/s, the sum of the rates last told to the flows
  // whose source is its host.
  std::uint64_t host_rate = 0;
  std::uint32_t host_flows = 0;  // with host_rate: how many flows have a rate
  // With hello_ack: the allocator reads Progress events.
  bool progress_ok = false;
  bool operator==(const AllocatorMessage&) const = default;
};

}  // namespace flowtune::wire
