// The daemon's event loop: one ZeroMQ ROUTER socket, the Allocator, and a
// signal fd. Each turn it drains the socket, runs due timers, runs one engine
// iteration while the allocator is busy, and sends what the allocator owes.
// When nothing is due it blocks in zmq_poll until a message, a timer or a
// signal, so an idle network costs no CPU.
//
// Frames: an endpoint message is one frame after the routing id; a
// flowtune-ctl request is two ("flowtune-ctl", command) and gets two back
// ("flowtune-ctl", JSON). Anything else is refused and counted.
//
// With CURVE on (AuthConfig), libzmq asks the server's ZAP handler, an
// inproc socket polled by the same loop, whether each connecting key is in
// an allow-list; every message then carries its key, checked again against
// the current lists (a key removed by a reload stops being heard at once).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>
#include <string>

#include <zmq.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/common/ipv4.h"
#include "flowtune/daemon/allocator.h"
#include "flowtune/daemon/auth.h"
#include "flowtune/daemon/control.h"
#include "flowtune/daemon/log.h"
#include "flowtune/daemon/standby.h"

namespace flowtune::daemon {

inline constexpr const char* kControlTag = wire::kControlTag.data();

class Server {
 public:
  // Binds `listen`; throws ConfigError naming the endpoint when it cannot.
  // busy_poll_us: after traffic, poll without blocking this long before
  // sleeping, trading CPU for the wake-up latency of the next message.
  // auth: CURVE's keys; throws ConfigError when they do not load.
  Server(zmq::context_t& ctx, Allocator& allocator, Log& log, const std::string& listen,
         std::uint64_t busy_poll_us = 0, const AuthConfig& auth = {});
  ~Server();

  // Runs until a signal arrives on signal_fd (read and reported) and returns
  // its number; -1 as signal_fd runs until stop_after_turns (tests) is hit.
  int run(int signal_fd, std::uint64_t stop_after_turns = UINT64_MAX);

  // The endpoint actually bound (a tcp://*:0 listen gets its port here).
  const std::string& bound_endpoint() const { return bound_; }

  // Monotonic microseconds since the server started.
  std::uint64_t now_us() const;

  // What a reload did, for the log (an error when !ok) and flowtune-ctl.
  struct Reload {
    bool ok = true;
    std::string text;
  };
  // Re-reads the allow-lists; a list that does not load leaves the old
  // ones. Endpoints whose key is gone, or no longer names their host, are
  // dropped with their flows (Allocator::revalidate_keys).
  Reload reload_keys();
  // A new --curve-secret: the listener again, with it; what happened.
  std::string rotate_key(const curve::KeyPair& own);
  void rekey_probe(bool alternate);
  // What `flowtune-ctl reload` (an admin request) runs: the daemon's reload
  // of its policy and keys.
  void set_reload(std::function<Reload()> reload) { reload_ = std::move(reload); }
  const AuthInfo& auth_info() const { return auth_info_; }

  // One of a hot standby pair (standby.h): probes `peer` with flowtune-ctl
  // `role` every probe_us and serves endpoints only while active. Starts in
  // standby; call before run(). With CURVE the probe speaks with this
  // allocator's own key pair, as the pair's server key (the two share one
  // pair, and each lists its public key among the other's ctl keys).
  struct Standby {
    std::string peer;
    std::uint64_t probe_us = 100'000;
    std::uint64_t takeover_us = 500'000;
    std::uint64_t id = 1;  // tie-break: random per process
    std::function<std::uint64_t()> new_epoch;  // for each takeover
    // The pair's witness (flowtune-witness), if any: see standby.h. It
    // speaks the pair's CURVE key pair when CURVE is on.
    std::string witness;
  };
  void enable_standby(zmq::context_t& ctx, Standby s);
  // Addresses flowtune-relay may send batches from (TCP; ipc listeners
  // are local and take any). None: relays are refused.
  void set_relay_from(std::vector<Cidr> nets) { relay_from_ = std::move(nets); }
  // `role` probes answered a second (--role-probes-per-sec); past it and a
  // tenth of a second's burst they are told to retry.
  static constexpr std::uint64_t kRoleRequestsPerSec = 20'000;
  void set_role_probe_rate(double per_sec) { role_tokens_ = TokenBucket(per_sec, 0); }
  PairRole role() const { return allocator_.active() ? PairRole::kActive : PairRole::kStandby; }

 private:
  long poll_timeout_ms(std::uint64_t now_us);
  int drain(std::int64_t drain_start_ns);
  // Endpoint messages handled (a relay's batch counts each); 0: none waiting.
  int receive_one(std::uint64_t now_us);
  // One endpoint message (`body`), and one flowtune-ctl request, answered.
  void hear_endpoint(std::string_view peer, const zmq::message_t& body, const KeyEntry* sender,
                     std::uint64_t now_us);
  void answer_control(std::string_view peer, std::string_view request, const KeyEntry* sender,
                      std::uint64_t now_us);
  // A flowtune-ctl request from `sender` (null: CURVE off).
  std::string control(std::string_view request, const KeyEntry* sender, std::uint64_t now_us);
  void enable_curve(zmq::context_t& ctx);
  void count_keys();
  void answer_zap(std::uint64_t now_us);
  void return_memory(std::uint64_t now_us);
  void trim_if_worth_it(std::uint64_t now_us, bool compacted);
  bool weigh_heap(std::uint64_t now_us, std::int64_t* gap);
  void read_monitor(std::uint64_t now_us);
  void standby_turn(std::uint64_t now_us);
  // A relay's batch; returns the endpoint messages it held.
  int relay_batch(std::string_view relay, const zmq::message_t& tag, bool more, std::uint64_t now_us);
  // Why a relay's batch is refused as a whole (empty: heard); *sender: the
  // relay's key entry with CURVE on.
  std::string relay_refusal(const zmq::message_t& tag, bool keyed, const KeyEntry** sender) const;
  bool relay_allowed(std::string_view address) const;
  Result<const Principal*> vouched(std::string_view chain, const KeyEntry& top);
  // What the turn owes the endpoints behind one relay (peers: full keys).
  struct RelayOut {
    std::vector<std::string> peers;
    std::vector<std::vector<std::uint8_t>> bytes;
  };
  bool send_relay_batch(const std::string& relay, const RelayOut& out, std::size_t at, std::size_t end);
  void read_probe_answers(std::uint64_t now_us);
  // With a witness: its answers to claims, and a claim (or renewal) when due.
  void read_witness_answers(std::uint64_t now_us);
  void claim(std::uint64_t now_us);
  HaInfo ha_info(std::uint64_t now_us) const;
  void flush();
  // False when the message was dropped (the peer left or its queue is full).
  bool send(const std::string& peer, const void* data, std::size_t size, const char* tag);

  Allocator& allocator_;
  Log& log_;
  // Hot standby: the pair's rule, the probe socket, when to probe next.
  std::optional<Standby> standby_;
  std::optional<Takeover> takeover_;
  std::unique_ptr<zmq::socket_t> probe_;
  std::unique_ptr<zmq::socket_t> witness_;  // DEALER to the witness, if any
  std::uint64_t next_witness_warning_us_ = 0;
  curve::KeyPair own_;                       // the key the listener speaks
  curve::KeyPair probe_key_, probe_prev_key_;  // the probe's, and the one before
  std::uint64_t last_rekey_check_us_ = 0;
  std::uint64_t next_probe_us_ = 0;
  std::uint64_t next_peer_warning_us_ = 0;
  std::unordered_map<std::string, RelayOut> relay_out_;  // by the relay's routing id
  std::vector<Cidr> relay_from_;
  zmq::socket_t router_;
  std::string bound_;
  std::int64_t start_ns_;
  std::uint64_t busy_poll_us_;
  std::uint64_t last_active_us_ = 0;
  std::int64_t last_iteration_ns_ = 0;
  // flowtune-ctl requests are answered at most this often (per second, with
  // a burst of a tenth): a state dump is O(flows) and must not stall the loop.
  static constexpr double kControlRequestsPerSec = 200;
  TokenBucket control_tokens_{kControlRequestsPerSec, 0};
  // `role` probes (the standby peer's, relays'): a bucket of their own, far
  // above what a pair and a relay per rack send (one each per probe period),
  // so that a flood of flowtune-ctl requests never reads as this
  // allocator's death and a flood of probes costs the loop a bounded share.
  TokenBucket role_tokens_{kRoleRequestsPerSec, 0};

  AuthConfig auth_;
  KeyRing keys_;
  // Endpoint keys vouched for by relays, by chain (Server::vouched).
  std::unordered_map<std::string, Principal> vouched_;
  static constexpr std::size_t kMaxVouched = 1u << 16;
  AuthInfo auth_info_;
  std::unique_ptr<zmq::socket_t> zap_;      // REP, inproc://zeromq.zap.01
  std::unique_ptr<zmq::socket_t> monitor_;  // PAIR: the router's failed handshakes
  std::function<Reload()> reload_;
  bool loopback_only_ = false;  // the listener is reachable from this host only
  bool tcp_ = false;            // peers have IP addresses (libzmq's Peer-Address)
  static constexpr std::uint64_t kMemoryCheckUs = 5'000'000;
  static constexpr std::size_t kTrimFreeBytes = 8u << 20;
  std::uint64_t next_memory_check_us_ = 0;
  // Resident bytes not in use by the heap, least since the last trim.
  std::int64_t least_gap_ = INT64_MAX;
  HeapInfo heap_;  // as last weighed
  ControlCache control_cache_;  // status's, links' and tenants' sums over every flow
};

}  // namespace flowtune::daemon
