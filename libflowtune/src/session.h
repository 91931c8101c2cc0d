// The endpoint's side of the protocol as a pure state machine: registered
// sockets and their flowlets in, protocol messages and pacing actions out.
// No sockets, threads or clocks: the runtime (runtime.h) feeds it events with
// the time and carries out what it emits; tests do the same by hand.
//
// Flowlets (paper §6): a begin on a socket whose flowlet is still live
// extends it (coalescing); flowlets below min_flowlet_bytes are mice and are
// never reported unless coalescing grows them past it. When every declared
// byte has been handed to the kernel, the session asks the runtime for the
// bytes the kernel has not yet sent ("a look") and sends the end once they
// will drain within one control round trip at the current rate (advance end).
//
// A socket's flowlet is in exactly one FlowletState; every input goes through
// one transition function, step(). Legal states and transitions:
//
//   kIdle      no flowlet, no cap of ours.
//              Begin -> kSending (reported if >= min_flowlet_bytes, else a mouse)
//   kSending   in progress, bytes declared but not all handed to the kernel.
//              Begin: extend.  Sent (all handed) -> kWatching, look now.
//              End -> kDraining (cap held) or kIdle (no cap).
//   kWatching  in progress, all handed: look at the queue at `due_us`.
//              Begin -> kSending.  Look: drained -> end (kDraining/kIdle);
//              drains within an RTT -> end in advance; last burst -> kEndAt;
//              else look again later.  Rate: look now.  End -> as kSending.
//   kEndAt     the last burst is queued: the end is predicted for `due_us`.
//              Timer -> kEndDue, look now.  Begin -> kSending.  Look/Rate: as
//              kWatching (re-predict).  End -> as kSending.
//   kEndDue    the predicted end is due: the look on its way ends it, unless
//              a write call is under way (-> kWatching, recheck).
//   kDraining  ended (end sent if reported); the cap stays until the queue is
//              empty, so the last bytes leave paced. Look: empty -> kIdle,
//              else look again.  Begin -> kSending (a new flowlet).
//
// A look is one outstanding ioctl at most (`looking`); its answer comes back
// through on_unsent(). Orthogonal to the phase, a flowlet in progress is
// *reported* (key != 0: the allocator holds it), a *mouse* (key == 0), or
// *refused* (the allocator said it will not schedule it: it runs uncapped).
//
// Agreement with the allocator (docs/wire.md, "repair rules"): every loss
// signal repairs, never silence.
//   - New epoch, notRegistered, rateLimited (the allocator dropped a message
//     whole), stateMismatch (every message carries a digest of the live
//     reported flows; the allocator compares it with what it holds, so a
//     lost start or end shows on the next message), unknownFlow for a live
//     key: resend state (hello + resync), with exponential backoff and
//     jitter when it repeats.
//   - A refused hello (no helloAck, errors): retried with backoff + jitter;
//     the program is told once (take_notices()).
//   - A refused flow (an error carrying a live flowlet's key): that socket's
//     cap is removed and the flowlet runs unscheduled.
//   - A reported flowlet without a rate applied (none arrived, or its lease
//     lapsed while the allocator was silent): it asks again (rateRequest),
//     with backoff, until a rate comes; the allocator answers with the
//     current rate whatever its update threshold says.
//   - Lease refreshes extend only caps of flowlets the allocator holds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "flowtune/flowtune.h"
#include "flowtune/wire/messages.h"
#include "pacing.h"
#include "policy.h"

namespace flowtune::client {

struct SessionConfig {
  std::string endpoint_id;
  std::string host;  // empty: the first socket's local address
  std::uint64_t min_flowlet_bytes = 65536;
  std::uint64_t max_rate_bytes_per_sec = 0;  // 0: no cap of our own
  std::uint64_t heartbeat_us = 1'000'000;
  // Control round trip assumed until one is measured (start -> first rate).
  std::uint64_t initial_rtt_us = 500;
  // Where flowlets' tenant indexes are named; null: no tenants.
  std::shared_ptr<const TenantNames> tenants{};
  // No socket is paced below this (bytes/s; 0: no floor). Linux paces a
  // socket by spacing each packet len / rate after the previous one at the
  // rate of that moment, and a raise does not pull the next send in: a
  // flowlet a policy held at 60 B/s sat silent for 20 s with its rate back
  // at 60 KB/s (coflow-trace, docs/coflows.md). At 16 KB/s two full
  // segments wait at most 180 ms; a flow rated below it sends a little
  // more than its rate, which the host pacer's bound absorbs.
  std::uint64_t min_rate_bytes_per_sec = 16'000;
  // Several allocators are listed (a hot standby pair): a `standby` answer,
  // or requests unanswered for kSilentHeartbeats, make failover_due() true
  // and the runtime moves to the next one.
  bool failover = false;
};

struct PacingAction {
  SocketRef socket;
  std::uint64_t bytes_per_sec;  // 0 = remove the cap
};

// The session's share of FT_STATS_COUNTERS (flowtune.h), generated from it.
#define FT_SESSION_FIELD_session(name) std::uint64_t name = 0;
#define FT_SESSION_FIELD_runtime(name)
#define FT_SESSION_FIELD_(name, owner, what) FT_SESSION_FIELD_##owner(name)
struct SessionStats {
  FT_STATS_COUNTERS(FT_SESSION_FIELD_)
  bool connected = false;
};
#undef FT_SESSION_FIELD_
#undef FT_SESSION_FIELD_session
#undef FT_SESSION_FIELD_runtime

// Something the program should be told (once, not per retry).
struct Notice {
  int level;  // as ft_config.log_level: 1 warnings, 2 information
  std::string text;
};

// One live flowlet as the session sees it (tests, diagnostics).
struct FlowletView {
  SocketRef socket;
  std::uint64_t key;   // 0: not reported (mouse or refused)
  std::uint64_t rate;  // cap applied, bytes/s (0 = none)
};

enum class FlowletState : std::uint8_t { kIdle, kSending, kWatching, kEndAt, kEndDue, kDraining };
const char* to_string(FlowletState s);

// How the endpoint stands with the allocator.
enum class LinkState : std::uint8_t {
  kNew,         // hello + resync due (at retry_at, after a backoff)
  kHelloSent,   // waiting for the helloAck
  kRegistered,  // acknowledged in this epoch
};

class Session {
 public:
  // Below this many unsent bytes (or two of the socket's segments, if more)
  // the drain is predicted, not observed (see on_unsent).
  static constexpr std::uint64_t kLastBurstBytes = 64 * 1024;
  static constexpr std::uint64_t kRetryUs = 50'000;
  // How soon to look again at a socket whose write call is in progress.
  static constexpr std::uint64_t kWritingRecheckUs = 5'000;
  // A watched queue more than this many bursts from empty is looked at
  // again halfway to its predicted drain (see on_look) ...
  static constexpr std::uint64_t kFarBursts = 4;
  // ... but at most this long.
  static constexpr std::uint64_t kFarLookMaxUs = 50'000;
  // Backoff for repeated repairs (resync, hello, rate request): doubles from
  // the first to the last, each wait jittered over its upper half.
  static constexpr std::uint64_t kMinBackoffUs = 10'000;
  static constexpr std::uint64_t kMaxBackoffUs = 10'000'000;
  // A reported flowlet with no rate after this long (or 10 RTTs) asks again.
  static constexpr std::uint64_t kFirstAskUs = 10'000;
  // Flow keys per rateRequest event (a message holds kMaxItemsPerMessage items).
  static constexpr std::size_t kMaxAskKeys = 1024;

  explicit Session(SessionConfig config);

  // mss: the socket's segment size (TCP_MAXSEG), which sets how coarsely
  // its queue drains when paced; 0 if unknown.
  // defaults: the policy of the socket's flowlets that bring none.
  void on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                   std::uint64_t now_us, const FlowletPolicy& defaults = {});
  void on_unregister(SocketRef s, std::uint64_t now_us);
  // policy: none = the socket's defaults. A deadline counts from now_us.
  void on_begin(SocketRef s, std::uint64_t bytes, const std::optional<FlowletPolicy>& policy,
                std::uint64_t now_us);
  void on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now_us);
  // Bytes written without a begin (the shim): begin-or-extend, then sent.
  void on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now_us);
  void on_end(SocketRef s, std::uint64_t now_us);
  // Ends every flowlet in progress (the client is closing).
  void end_all(std::uint64_t now_us);
  void on_message(const wire::AllocatorMessage& m, std::uint64_t now_us);
  // A message could not be handed to the transport: resend state soon.
  void on_send_failed(std::uint64_t now_us);
  // Answer to a look: bytes the kernel has not sent yet, and whether the
  // application is inside a write call on the socket (its bytes are not
  // counted yet, so the flowlet is not over).
  void on_unsent(SocketRef s, std::uint64_t unsent_bytes, std::uint64_t now_us,
                 bool writing = false);
  // Heartbeats, lease expiry, looks, predicted ends and rate requests due at now_us.
  void on_timer(std::uint64_t now_us);
  std::uint64_t next_timer_us() const;

  // Outputs, moved out by the runtime after each batch of inputs.
  std::optional<wire::EndpointMessage> take_message(std::uint64_t now_us);
  std::vector<PacingAction> take_actions();
  std::vector<SocketRef> take_drain_queries();
  // Sockets whose flowlet the session ended since the last call.
  std::vector<SocketRef> take_ended();
  std::vector<Notice> take_notices();

  // Hot standby (config.failover): whether to move to the next allocator;
  // the runtime then reconnects and calls on_allocator_switched().
  static constexpr std::uint64_t kSilentHeartbeats = 2;
  bool failover_due(std::uint64_t now_us) const;
  // Connected to another allocator: hello + resync at once; until it
  // answers, late messages of the one left (its epoch) are ignored.
  void on_allocator_switched(std::uint64_t now_us);

  const SessionStats& stats() const { return stats_; }
  // The cap in force on a socket (bytes/s, 0 = none).
  std::uint64_t rate_of(SocketRef s) const;
  FlowletState state_of(SocketRef s) const;
  LinkState link_state() const { return link_; }
  std::vector<FlowletView> flowlets() const;  // flowlets in progress
  std::uint64_t rtt_us() const { return rtt_us_; }
  // Flowlets in progress (kept as they start and end: the runtime asks on
  // every wake-up).
  std::size_t active_flowlets() const { return active_count_; }

 private:
  struct Sock {
    wire::FiveTuple tuple;
    std::uint64_t last_burst = kLastBurstBytes;  // see on_unsent
    FlowletState state = FlowletState::kIdle;
    std::uint64_t key = 0;        // reported flowlet's key; 0 = none reported
    bool refused = false;         // the allocator will not schedule this flowlet
    std::uint64_t declared = 0;   // bytes declared by begins of this flowlet
    std::uint64_t handed = 0;     // bytes handed to the kernel
    std::uint64_t told_bytes = 0;  // the size the allocator last heard (start or progress)
    FlowletPolicy defaults;        // for flowlets that bring no policy
    FlowletPolicy policy;          // this flowlet's
    std::uint64_t deadline_at_us = 0;  // this flowlet's deadline; 0 = none
    std::uint64_t rate = 0;          // cap applied, bytes/s
    // The cap is this flowlet's own rate (not the previous flowlet's, kept
    // for its tail, nor none): only then does a lease refresh extend it, and
    // until then the flowlet asks for its rate.
    bool rated = false;
    std::uint64_t told = 0;  // the allocator's last rate for it (before our own cap)
    std::uint64_t lease_until = 0;   // when the cap lapses
    std::uint64_t started_us = 0;    // start sent (for the RTT estimate)
    std::uint64_t due_us = 0;        // the state's deadline (look, predicted end); 0 = none
    bool looking = false;            // a look at the queue is on its way
    std::uint64_t ask_at_us = 0;     // ask for the rate then (0: not wanted)
    std::uint64_t ask_backoff_us = 0;
    bool in_progress() const {
      return state != FlowletState::kIdle && state != FlowletState::kDraining;
    }
  };

  // The inputs of the flowlet state machine.
  enum class Input : std::uint8_t { kBegin, kSent, kLook, kTimer, kRate, kEnd };
  struct In {
    Input kind;
    std::uint64_t bytes = 0;   // kBegin, kSent; kLook: unsent bytes
    bool writing = false;      // kLook
    FlowletPolicy policy{};    // kBegin
  };
  void step(SocketRef ref, Sock& k, const In& in, std::uint64_t now_us);
  void on_look(SocketRef ref, Sock& k, std::uint64_t unsent, bool writing, std::uint64_t now_us);
  void begin_flowlet(SocketRef ref, Sock& k, const In& in, std::uint64_t now_us);
  void extend_flowlet(SocketRef ref, Sock& k, std::uint64_t bytes, std::uint64_t now_us);
  void report_growth();
  static wire::FlowProgress told_progress(Sock& k);
  void look_now(SocketRef ref, Sock& k);
  void end_flowlet(SocketRef ref, Sock& k, std::uint64_t now_us);

  Sock* find(SocketRef s);
  wire::FlowletStart start_of(const Sock& k, std::uint64_t now_us) const;
  void report_start(SocketRef ref, Sock& k, std::uint64_t now_us);
  void set_rate(SocketRef ref, Sock& k, std::uint64_t rate);
  void refuse_flow(Sock& k);
  void on_error(const wire::ErrorReport& e, std::uint64_t now_us);
  void on_rate(const wire::RateUpdate& r, std::uint64_t now_us);
  void check_rates(const wire::StateDigest& told, std::uint64_t now_us);

  // Registration and repair.
  // Resync now, or after the backoff (and at least min_wait_us).
  void resync_after(std::uint64_t now_us, bool backoff, std::uint64_t min_wait_us = 0);
  std::uint64_t jittered(std::uint64_t backoff_us);
  static std::uint64_t next_backoff(std::uint64_t b);
  void queue_event(wire::EndpointEvent e);
  static std::size_t items_of(const wire::EndpointEvent& e);

  SessionConfig config_;
  std::unordered_map<std::uint64_t, Sock> sockets_;           // by SocketRef::packed()
  std::unordered_map<std::uint64_t, std::uint64_t> by_key_;   // flow key -> SocketRef::packed()
  wire::StateDigest digest_;  // of by_key_'s keys: sent with every message
  std::uint64_t next_key_ = 1;
  // The allocator's helloAck said it reads progress events; older ones
  // refuse a message holding one.
  bool progress_ok_ = false;
  std::size_t active_count_ = 0;
  std::uint64_t epoch_ = 0;
  std::uint64_t heard_epoch_ = 0;      // of the last message from the allocator in use (0: none)
  std::uint64_t left_epoch_ = 0;       // the allocator failed over from (0: none)
  bool standby_seen_ = false;          // a standby answered since the last switch
  std::uint64_t awaiting_since_us_ = 0;  // a hello or rate request unanswered since (0: none)
  LinkState link_ = LinkState::kNew;
  bool said_hello_ = false;        // a hello went out once (resyncs are counted after)
  std::uint64_t retry_at_us_ = 0;  // kNew: hello + resync not before then
  std::uint64_t backoff_us_ = 0;   // last repair backoff (0: none in a row)
  std::uint64_t hello_at_us_ = 0;  // when the last hello went out
  bool refusal_told_ = false;      // the program heard of the current refusal
  std::uint64_t rng_;
  std::uint64_t last_sent_us_ = 0;
  std::uint64_t rtt_us_;
  std::vector<wire::EndpointEvent> events_;
  std::vector<PacingAction> actions_;
  std::vector<SocketRef> drain_queries_;
  std::vector<SocketRef> ended_;
  std::vector<Notice> notices_;
  std::uint64_t seq_ = 0;
  SessionStats stats_;
};

}  // namespace flowtune::client
