// A process's link to its host's agent (agent/, docs/agent.md): the
// client's backend when an agent serves this host. The agent holds the
// host's one session with the allocator; this thread forwards the
// application's events to it over a unix socket, and carries out what the
// agent decides for the process's sockets (rates, looks at their queues,
// ends), through the process's own SocketTable. So the process opens no
// allocator connection and no ZeroMQ context, and its flowlets are rated by
// a session that is already open.
//
// The thread is built like the runtime's (runtime.h): a private fd table,
// woken by a signal sent to it alone when it sleeps deeply, napping while
// events are recent. Fail-open: when the agent closes the connection, or
// is silent for kSilenceUs (it ticks every Agent tick), every cap the
// agent set is removed at once and the link reconnects with backoff; on
// reconnecting it registers its sockets again and reports the flowlets in
// progress with the bytes they still hold.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "agent_proto.h"
#include "backend.h"
#include "control_thread.h"
#include "event_loop.h"
#include "event_queue.h"
#include "flowtune/common/fd.h"
#include "intake.h"
#include "pacing.h"
#include "policy.h"
#include "wakeup.h"

namespace flowtune::client {

struct AgentLinkConfig {
  std::string address;  // "@name" (abstract) or a path
  int log_level = 2;
  agent::HelloBody hello;
  std::string allocator;  // named by the program (hello.explicit_allocator)
  std::string host;       // named by the program (hello.host_bytes)
  std::size_t queue_capacity = std::size_t{1} << 14;
};

class AgentLink final : public Backend, private IntakeSink {
 public:
  // An agent that stops answering is given up after this long.
  static constexpr std::uint64_t kSilenceUs = 1'000'000;
  // How long start() waits for the agent's welcome.
  static constexpr int kWelcomeWaitMs = 50;
  // Said to the agent when nothing else was, so it can tell a live
  // process from a frozen one (it drops those silent for 3 s).
  static constexpr std::uint64_t kTickUs = 1'000'000;
  static constexpr std::uint64_t kPollUs = 1000;
  static constexpr std::uint64_t kLingerUs = 100'000;
  static constexpr std::uint64_t kRetryMinUs = 10'000;
  static constexpr std::uint64_t kRetryMaxUs = 1'000'000;
  // Unsent records kept while the agent is slow to read; past this the
  // agent counts as stalled.
  static constexpr std::size_t kMaxBacklog = 4u << 20;

  AgentLink(AgentLinkConfig config, SocketTable& table, std::shared_ptr<const TenantNames> tenants);
  ~AgentLink() override;
  AgentLink(const AgentLink&) = delete;
  AgentLink& operator=(const AgentLink&) = delete;

  // FT_OK once the agent welcomed this process; FT_ECONNECT when no agent
  // listens or it refused (its reason is logged at level 2): then nothing
  // stays open and the caller runs its own session.
  int start() override;
  int stop() override;
  bool push(const Event& e, bool urgent) override;
  void wake() override;
  ft_stats stats() const override;

 private:
  struct Reg {
    std::uint32_t gen = 0;
    wire::FiveTuple tuple;
    std::uint32_t mss = 0;
    std::optional<FlowletPolicy> defaults;
    std::uint64_t outstanding = 0;        // begun and not yet handed to the kernel
    std::optional<FlowletPolicy> policy;  // the flowlet's (its last begin's)
    // Begins (and writes that may begin) sent on this connection; the
    // agent's kEnded carries the count it had seen, so an end decided
    // before a later begin does not clear that begin's flowlet.
    std::uint64_t begins = 0;
    bool open = false;  // a flowlet in progress, as far as the link knows
  };

  void run(std::promise<int>* ready);
  bool enter_private_table();
  // Connects, says hello and waits for the welcome: FT_OK or FT_ECONNECT.
  int connect_agent();
  bool open_wakeups();
  // Closes what run() opened (the link's thread: its own fd table).
  void close_all();
  void turn();
  void receive(std::uint64_t now);
  // The agent's socket is readable (the loop's callback): receive, then turn.
  void on_readable();
  void on_record(const agent::Record& r);
  void send_out(std::uint64_t now);
  // The agent is gone or stalled: remove every cap, reconnect later.
  void lost(std::uint64_t now, const std::string& why);
  void try_reconnect(std::uint64_t now);
  void resend_state();
  void arm_timer(std::uint64_t now);
  void emit(const Event& e);
  void set_open(Reg& r, bool open);
  void log(int level, const std::string& text) const;
  std::uint64_t now_us() const;

  void on_register(SocketRef s, const wire::FiveTuple& tuple, std::uint32_t mss,
                   const FlowletPolicy& defaults, std::uint64_t now) override;
  void on_unregister(SocketRef s, std::uint64_t now) override;
  void on_begin(SocketRef s, std::uint64_t bytes, const std::optional<FlowletPolicy>& policy,
                std::uint64_t now) override;
  void on_sent(SocketRef s, std::uint64_t bytes, std::uint64_t now) override;
  void on_wrote(SocketRef s, std::uint64_t bytes, std::uint64_t now) override;
  void on_end(SocketRef s, std::uint64_t now) override;
  void on_unsent(SocketRef, std::uint64_t, bool, std::uint64_t) override {}

  AgentLinkConfig config_;
  SocketTable& table_;
  std::shared_ptr<const TenantNames> tenants_;
  ControlInbox inbox_;
  Intake intake_{inbox_.queue, table_};
  std::unordered_map<int, Reg> regs_;
  std::vector<std::uint8_t> out_;                  // records gathered this turn
  std::deque<std::vector<std::uint8_t>> pending_;  // packets the agent did not take yet
  std::size_t pending_bytes_ = 0;

  UniqueFd sock_;
  UniqueFd timer_fd_;
  UniqueFd signal_fd_;
  UniqueFd pidfd_;
  EventLoop loop_;
  std::thread thread_;
  bool napping_ = false;
  bool readable_ = false;  // set by on_readable, cleared by the turn that reads
  std::atomic<bool> stopping_{false};
  std::uint64_t linger_until_us_ = 0;
  std::uint64_t heard_us_ = 0;     // the agent's last packet
  std::uint64_t said_us_ = 0;      // our last packet
  std::size_t open_flowlets_ = 0;  // Regs with open set
  std::uint64_t retry_at_us_ = 0;  // while disconnected: reconnect then
  std::uint64_t backoff_us_ = 0;
  std::int64_t start_ns_;
  int loop_close_rc_ = 0;

  struct Published {
    std::atomic<std::uint64_t> rates_applied{0}, rates_cleared{0}, pacing_failures{0},
        queue_overflows{0}, resyncs{0};
    std::atomic<int> connected{0};
  };
  mutable Published published_;
  bool pacing_failure_logged_ = false;
};

}  // namespace flowtune::client
