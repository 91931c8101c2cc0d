// The endpoint's side of the protocol as a pure state machine: registered
// sockets and their flowlets in, protocol messages and pacing actions out.
// No sockets, threads or clocks: the runtime (runtime.h) feeds it events with
// the time and carries out what it emits; tests do the same by hand.
//
// Flowlets (paper §6): a begin on a socket whose flowlet is still live
// extends it (coalescing); flowlets below min_flowlet_bytes are mice and are
// never reported unless coalescing grows them past it. When every declared
// byte has been handed to the kernel, the session asks the runtime for the
// bytes the kernel has not yet sent and sends the end once they will drain
// within one control round trip at the current rate (advance end).
//
// Robustness (§5.1): rates are leases and lapse to "no cap"; a reply with a
// new epoch, or a notRegistered error, makes the session resend its whole
// state (hello + resync), never a history of events.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "flowtune/wire/messages.h"
#include "pacing.h"

namespace flowtune::client {

struct SessionConfig {
  std::string endpoint_id;
  std::string host;  // empty: the first socket's local address
  std::uint64_t min_flowlet_bytes = 65536;
  std::uint64_t max_rate_bytes_per_sec = 0;  // 0: no cap of our own
  std::uint64_t heartbeat_us = 1'000'000;
  // Control round trip assumed until one is measured (start -> first rate).
  std::uint64_t initial_rtt_us = 500;
};

struct PacingAction {
  SocketRef socket;
  std::uint64_t bytes_per_sec;  // 0 = remove the cap
};

struct SessionStats {
  std::uint64_t flowlets_started = 0;
  std::uint64_t flowlets_ended = 0;
  std::uint64_t flowlets_coalesced = 0;
  std::uint64_t mice = 0;
  std::uint64_t ends_in_advance = 0;
  std::uint64_t resyncs = 0;
  std::uint64_t allocator_errors = 0;
  std::uint64_t leases_lapsed = 0;
  bool connected = false;
};

class Session {
 public:
  // Below this many unsent bytes (or two of the socket's segments, if more)
  // the drain is predicted, not observed (see on_unsent).
  static constexpr std::uint64_t kLastBurstBytes = 64 * 1024;

  explicit Session(SessionConfig config);

  // mss: the socket's segment size (TCP_MAXSEG), which sets how coarsely
  // its queue drains when paced; 0 if unknown.
  void on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                   std::uint64_t now_us);
  void on_unregister(SocketRef s, std::uint64_t now_us);
  void on_begin(SocketRef s, std::uint64_t bytes, float weight, std::uint64_t coflow_id,
                std::uint64_t now_us);
  void on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now_us);
  // Bytes written without a begin (the shim): begin-or-extend, then sent.
  void on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now_us);
  void on_end(SocketRef s, std::uint64_t now_us);
  // Ends every flowlet in progress (the client is closing).
  void end_all(std::uint64_t now_us);
  void on_message(const wire::AllocatorMessage& m, std::uint64_t now_us);
  // A message could not be handed to the transport: resend state soon.
  void on_send_failed(std::uint64_t now_us) {
    need_resync_ = true;
    retry_at_us_ = now_us + kRetryUs;
  }
  static constexpr std::uint64_t kRetryUs = 50'000;
  // How soon to look again at a socket whose write call is in progress.
  static constexpr std::uint64_t kWritingRecheckUs = 5'000;
  // Answer to a drain query: bytes the kernel has not sent yet, and whether
  // the application is inside a write call on the socket (its bytes are not
  // counted yet, so the flowlet is not over).
  void on_unsent(SocketRef s, std::uint64_t unsent_bytes, std::uint64_t now_us,
                 bool writing = false);
  // Heartbeats, lease expiry, drain checks due at now_us.
  void on_timer(std::uint64_t now_us);
  std::uint64_t next_timer_us() const;

  // Outputs, moved out by the runtime after each batch of inputs.
  std::optional<wire::EndpointMessage> take_message(std::uint64_t now_us);
  std::vector<PacingAction> take_actions();
  std::vector<SocketRef> take_drain_queries();
  // Sockets whose flowlet the session ended since the last call.
  std::vector<SocketRef> take_ended();

  const SessionStats& stats() const { return stats_; }
  // The cap in force on a socket (bytes/s, 0 = none).
  std::uint64_t rate_of(SocketRef s) const;
  std::uint64_t rtt_us() const { return rtt_us_; }
  // Flowlets in progress (kept as they start and end: the runtime asks on
  // every wake-up).
  std::size_t active_flowlets() const { return active_count_; }

 private:
  struct Sock {
    wire::FiveTuple tuple;
    std::uint64_t last_burst = kLastBurstBytes;  // see on_unsent
    std::uint64_t key = 0;        // reported flowlet's key; 0 = none reported
    std::uint64_t declared = 0;   // bytes declared by begins of this flowlet
    std::uint64_t handed = 0;     // bytes handed to the kernel
    bool active = false;          // a flowlet (reported or mouse) is in progress
    bool end_sent = false;        // reported flowlet ended (maybe in advance)
    float weight = 1;
    std::uint64_t coflow_id = 0;
    std::uint64_t rate = 0;          // cap applied, bytes/s
    std::uint64_t lease_until = 0;   // when the cap lapses
    std::uint64_t started_us = 0;    // start sent (for the RTT estimate)
    std::uint64_t drain_check_us = 0;  // 0: none scheduled
    std::uint64_t end_at_us = 0;       // predicted: send the end then (0: none)
    bool query_pending = false;        // a look at the queue is on its way
    bool end_due = false;              // the predicted end is due: end at the next look
  };

  Sock* find(SocketRef s);
  wire::FlowletStart start_of(const Sock& k) const;
  void report_start(SocketRef ref, Sock& k, std::uint64_t now_us);
  void report_end(SocketRef ref, Sock& k);
  void set_rate(SocketRef ref, Sock& k, std::uint64_t rate);
  void finish_if_handed(SocketRef ref, Sock& k, std::uint64_t now_us);

  SessionConfig config_;
  std::unordered_map<std::uint64_t, Sock> sockets_;           // by SocketRef::packed()
  std::unordered_map<std::uint64_t, std::uint64_t> by_key_;   // flow key -> SocketRef::packed()
  std::uint64_t next_key_ = 1;
  std::size_t active_count_ = 0;
  std::uint64_t epoch_ = 0;
  bool hello_sent_ = false;
  bool need_resync_ = false;
  std::uint64_t retry_at_us_ = 0;  // a failed send is retried then (0: none)
  std::uint64_t last_sent_us_ = 0;
  std::uint64_t rtt_us_;
  std::vector<wire::EndpointEvent> events_;
  std::vector<PacingAction> actions_;
  std::vector<SocketRef> drain_queries_;
  std::vector<SocketRef> ended_;
  std::uint64_t seq_ = 0;
  SessionStats stats_;
};

}  // namespace flowtune::client
