// flowtune-relay: endpoints of a rack (or any group) talk to a relay as to
// the allocator; the relay forwards what they say upstream in batches
// (wire/relay.h) and fans the answers back. The endpoint protocol is
// unchanged: an endpoint cannot tell a relay from the allocator but by its
// address. Relays stack (rack -> pod -> allocator): a relay below is one
// more hop in each route.
//
// One thread, one loop: drain what the endpoints sent, send it upstream as
// one message once the batch is full or its first message has waited
// batch_us, and deliver what came down. The wait is what makes batches: at
// a few thousand events a second hardly two arrive together, and the
// allocator pays a turn (and an engine iteration) per message it receives
// alone; gathered, one turn serves the batch. batch_us = 0 sends what each
// drain found, waiting for nothing. A relay
// keeps no protocol state, so its restart and the allocator's are repaired
// by the endpoints' own rules (notRegistered or a new epoch: hello +
// resync). Given a standby pair upstream (allocator --standby-of), it asks
// each for its role every probe_ms, as the pair ask each other, and sends
// up to the one that answers active (the highest term); after a takeover
// the endpoints behind it meet an allocator that does not know them, and
// the same rules resync them there.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/daemon/auth.h"

namespace flowtune::relay {

struct Config {
  std::string listen = "tcp://0.0.0.0:5556";
  // The allocator or the relay above; several: a standby pair's endpoints.
  std::vector<std::string> upstream = {"tcp://127.0.0.1:5555"};
  std::size_t max_batch = 1024;   // (route, message) pairs per upstream message
  std::uint64_t batch_us = 500;   // the longest a message waits for its batch
  std::uint32_t heartbeat_ms = 1000;  // ZeroMQ's liveness checks upstream
  std::uint32_t probe_ms = 100;       // with several upstreams: how often each is asked its role
  // CURVE upstream: the relay's key pair, an endpoint key of the allocator's
  // --curve-clients bound to the hosts behind it (unset: plain).
  std::optional<curve::ClientKeys> curve;
  // CURVE downstream: the key pair endpoints (and relays below) must speak
  // to (unset: plain). Each message goes up with the key it came with, and
  // the allocator decides (keyed batches, wire/relay.h).
  std::optional<curve::KeyPair> listen_key;
  // The relay's own allow-list under CURVE downstream, in the allocator's
  // formats (docs/security.md; empty: any key connects): endpoint keys
  // (NAME.pub with hosts, `relay = true` for a relay below), and keys that
  // may only ask this relay's status. A key in neither is refused at the
  // handshake; a message whose key a reload removed is dropped; a keyed
  // batch goes up only from a relay key, with every key of its chain listed.
  std::string clients_dir, ctl_dir;
};

struct Counters {
  std::uint64_t messages_up = 0;    // endpoint messages forwarded upstream
  std::uint64_t batches_up = 0;
  std::uint64_t messages_down = 0;  // answers delivered to endpoints or relays below
  std::uint64_t batches_down = 0;
  std::uint64_t dropped = 0;        // a queue was full, or a route was unknown or malformed
  std::uint64_t bad_frames = 0;     // neither a message, a batch nor a flowtune-ctl request
  std::uint64_t upstream_switches = 0;  // a standby took over and the relay followed
  std::uint64_t key_changes = 0;        // the allocator's key file named a new key
  std::uint64_t unkeyed = 0;  // under CURVE downstream, a message without a key, or a keyed batch from a plain relay
  // With an allow-list: handshakes refused (a key in no list), and
  // messages dropped (a key a reload removed, a key without the role, a
  // batch from a key without `relay = true`, a chain key not listed).
  std::uint64_t refused = 0;
  std::uint64_t not_listed = 0;
  std::uint64_t reloads = 0;  // allow-lists read again (SIGHUP), successfully
};

class Relay {
 public:
  // Binds and connects; throws std::runtime_error naming the endpoint.
  Relay(zmq::context_t& ctx, const Config& c);
  // Runs until a signal arrives on signal_fd (its number is returned), or
  // for `turns` turns (tests; -1 as signal_fd).
  int run(int signal_fd, std::uint64_t turns = UINT64_MAX);
  const std::string& bound_endpoint() const { return bound_; }
  const Counters& counters() const { return counters_; }
  // Reads the allow-lists again (SIGHUP). "" on success (or without
  // lists), else the reason, and the lists in force stay.
  std::string reload();
  std::size_t listed_keys() const;

 private:
  void drain_down();
  void drain_up(std::size_t i);
  // Several upstreams: asks each its role, and follows the active one.
  void probe(std::chrono::steady_clock::time_point now);
  void read_role(std::size_t i, std::string_view answer, std::chrono::steady_clock::time_point now);
  void choose_upstream(std::chrono::steady_clock::time_point now);
  void follow_server_key(std::chrono::steady_clock::time_point now);
  // A batch from a relay below; keyed: triples with key chains. below_key:
  // the raw key the relay below connected with (CURVE downstream), which
  // joins each chain.
  void take_batch(std::string_view hop, bool more, bool keyed, std::string_view below_key);
  void add_up(std::string route, std::string keys, zmq::message_t&& body);
  void enable_curve_down(zmq::context_t& ctx);
  void answer_zap();
  // The allow-list's entry for a message's connection key (its User-Id);
  // null where not listed. Without an allow-list: never called.
  const daemon::KeyEntry* listed(const zmq::message_t& m) const;
  bool chain_listed(std::string_view chain) const;
  void flush_up();
  std::string status() const;

  Config config_;
  zmq::socket_t down_;  // ROUTER: endpoints and relays below
  std::unique_ptr<zmq::socket_t> zap_;  // REP: CURVE downstream's handshakes
  std::unique_ptr<daemon::KeyRing> ring_;  // the allow-list, if any
  std::vector<zmq::socket_t> ups_;  // DEALERs: the allocator(s) or the relay above
  std::size_t active_ = 0;          // where batches go
  bool chosen_ = false;             // one upstream, or one of a pair said it is active
  struct Upstream {
    bool active = false;  // its last answer said so
    std::uint64_t term = 0;
    std::uint64_t id = 0;
    std::chrono::steady_clock::time_point heard{};
  };
  std::vector<Upstream> roles_;
  std::chrono::steady_clock::time_point next_probe_{};
  std::chrono::steady_clock::time_point up_heard_{};       // anything from upstream
  std::chrono::steady_clock::time_point next_key_check_{};
  std::string key_error_;  // the last one told
  static constexpr long kKeyCheckMs = 1000;
  std::string bound_;
  // The batch going up: routes and messages, interleaved.
  std::vector<std::string> routes_;
  std::vector<std::string> keys_;  // each message's key chain (CURVE downstream)
  std::vector<zmq::message_t> bodies_;
  std::size_t batch_bytes_ = 0;
  std::chrono::steady_clock::time_point first_at_;  // when the batch's first message came
  Counters counters_;
};

}  // namespace flowtune::relay
