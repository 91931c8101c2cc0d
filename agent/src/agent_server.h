// The host agent's side of its clients (docs/agent.md): a unix socket the
// host's processes connect to, their events fed to the agent's one
// runtime (libflowtune's, holding the host's session with the allocator),
// and that runtime's decisions sent back to the process that owns the
// socket. This is the runtime's SocketPort.
//
// A process's sockets are named in the session by ids the agent gives
// them (SocketRef{id, 1}), so two processes' fd numbers never meet; each
// id routes back to (process, fd, generation). Everything runs on the
// runtime thread: its loop watches the server's epoll set (the listening
// socket, the connections and a 250 ms tick timer), each turn begins by
// reading what is ready into the runtime's queue, and ends by sending the
// replies the turn gathered. No hop between threads on the way.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent_proto.h"
#include "fair_share.h"
#include "flowtune/common/fd.h"
#include "flowtune/common/result.h"
#include "runtime.h"

namespace flowtune::agent {

struct ServerConfig {
  std::string listen = std::string(client::agent::kDefaultAddress);
  std::string allocator;             // the runtime's: processes that name another are refused
  std::string host;                  // the session's (--host): likewise
  client::agent::HelloBody session;  // processes that ask for other settings are refused
  std::size_t max_sockets_per_process = 65536;
  // Users whose processes are served (empty: every user's); root's and the
  // agent's own always are.
  std::vector<uid_t> allowed_uids;
  // Flowlet events a second (begins, ends, registrations; each byte count
  // a sixteenth) the agent forwards for the whole host, shared equally by
  // the processes sending them (fair_share.h); 0: unlimited.
  double max_events_per_sec = 20'000;
  int log_level = 2;
};

class Server final : public client::SocketPort {
 public:
  static constexpr std::uint64_t kTickUs = 250'000;
  // A process heard from not at all for this long (it ticks every second)
  // is frozen or gone: its sockets are unregistered and it is dropped.
  static constexpr std::uint64_t kClientSilenceUs = 3'000'000;
  // Replies a process did not read, past which it is disconnected.
  static constexpr std::size_t kMaxUnread = 4u << 20;

  Server(ServerConfig config, std::shared_ptr<client::TenantNames> tenants);
  ~Server() override;
  // The runtime the events go to (set before it starts).
  void attach(client::Runtime* runtime) { runtime_ = runtime; }
  // Binds and listens.
  Result<void> open();

  // SocketPort (the runtime thread).
  client::SocketTable::Result set_rate(client::SocketRef s, std::uint64_t bytes_per_sec,
                                       int* err) override;
  bool look(client::SocketRef s, Look* out) override;
  void clear_flowlet(client::SocketRef s) override;
  void flush() override;
  int watch_fd() const override { return epoll_fd_.get(); }
  void on_ready() override;
  bool busy() const override { return !backlog_.empty(); }

 private:
  struct Client {
    UniqueFd fd;
    pid_t pid = 0;
    uid_t uid = 0;
    bool welcomed = false;
    std::uint64_t heard_us = 0;                            // its last packet
    std::unordered_map<std::uint64_t, std::uint32_t> ids;  // SocketRef::packed() -> id
    std::vector<std::uint8_t> out;                         // replies gathered this turn
    bool told_full = false;
    FairShare::Bucket share;
    bool throttled = false;   // past its share: not read until the bucket refills
    bool told_share = false;  // logged the first time it was
  };
  struct Route {
    Client* client;
    std::int32_t fd;
    std::uint32_t gen;
    std::uint64_t begins = 0;  // begin and wrote records seen (kEnded echoes it)
  };

  void accept_all();
  // Reads what c sent; false when it is gone (or broke the protocol).
  bool read_client(Client& c);
  void on_record(Client& c, const client::agent::Record& r, std::string_view payload);
  void on_hello(Client& c, const client::agent::Record& r, std::string_view payload);
  void on_register(Client& c, const client::Event& e);
  void forward(Client& c, client::Event e);
  void drop_client(Client& c);
  void tick();
  // A process past its share leaves the epoll set's reads until its bucket
  // refills (the throttle timer); one whose bucket did is read again.
  void throttle(Client& c);
  void on_throttle_timer();
  void arm_throttle_timer(std::uint64_t wait_us);
  // Queues a reply to the process behind id.
  void reply(std::uint32_t id, client::agent::Op op, std::uint64_t value);
  // Into the runtime's queue; what does not fit waits in backlog_, and no
  // process is read until it went in.
  void push(const client::Event& e);
  bool drain_backlog();
  std::uint32_t new_id();
  bool allowed(uid_t uid) const;
  // Out of descriptors: stop accepting until a process leaves.
  void pause_accepting(int err);
  void resume_accepting();
  static std::uint64_t now_us();
  void log(int level, const std::string& text) const;

  ServerConfig config_;
  std::shared_ptr<client::TenantNames> tenants_;
  client::Runtime* runtime_ = nullptr;
  UniqueFd listen_fd_;
  UniqueFd epoll_fd_;
  UniqueFd tick_fd_;
  UniqueFd throttle_fd_;
  FairShare fair_;
  std::uint64_t turn_us_ = 0;          // the time at the turn's start
  std::uint64_t throttle_due_us_ = 0;  // when the throttle timer fires (0: disarmed)
  std::unordered_map<int, std::unique_ptr<Client>> clients_;  // by connection fd
  std::unordered_map<std::uint32_t, Route> routes_;
  std::deque<client::Event> backlog_;
  std::uint32_t next_id_ = 1;
  bool accept_paused_ = false;
};

}  // namespace flowtune::agent
