// flowtune-agent against a real allocator, with processes' clients (the
// library's C API) connecting to it: served clients share the agent's one
// session and get rates on their sockets; the agent's death removes every
// cap it set and a restart brings rates back; processes the agent must not
// serve, and peers that break the protocol, are turned away while the
// others are served. The record codec is checked on its own.
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../allocator/daemon/daemon_harness.h"
#include "../libflowtune/client_harness.h"
#include "agent_proto.h"
#include "flowtune/flowtune.h"

namespace flowtune::client {
namespace {

using daemon::testing::DaemonProcess;

constexpr double kLinkBytes = 0.1e9 / 8 * 0.99;  // scheduled 100 Mbit/s host link

// The agent as a child process (killed with the test however it ends).
class AgentProcess {
 public:
  ~AgentProcess() { kill9(); }
  void start(const std::vector<std::string>& extra) {
    log_path_ = "/tmp/ft-test-agent-" + std::to_string(::getpid()) + ".log";
    std::vector<std::string> args = {FT_AGENT_BINARY};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = daemon::testing::spawn_daemon(std::move(args), log_path_, "a");
    ASSERT_GE(pid_, 0);
  }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  int stop() {
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string log() const { return daemon::testing::run_command("cat " + log_path_).output; }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// A raw connection to an agent address (a peer that is not the library).
int connect_raw(const std::string& address) {
  sockaddr_un a;
  unsigned len = 0;
  if (!agent::parse_address(address, &a, &len)) return -1;
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Whether something accepts connections at an agent address.
bool listening(const std::string& address) {
  const int s = connect_raw(address);
  if (s >= 0) ::close(s);
  return s >= 0;
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_.start(listen_, {"--host-gbps", "0.1", "--lease-ms", "300", "--lease-refresh-ms", "100",
                            "--endpoint-timeout-ms", "1000"});
    ::setenv("FLOWTUNE_AGENT", address_.c_str(), 1);
    // The allocator a process names: the agent's, so it is served (and a
    // process the agent refuses finds it too).
    ::setenv("FLOWTUNE_ALLOCATOR", listen_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("FLOWTUNE_AGENT");
    ::unsetenv("FLOWTUNE_ALLOCATOR");
  }
  void start_agent(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--listen",    address_, "--allocator", listen_, "--min-flowlet-bytes", "10000",
        "--log-level", "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    agent_.start(args);
    ASSERT_TRUE(eventually([&] { return listening(address_); }, 5000)) << agent_.log();
  }
  ft_client* open(std::uint64_t min_flowlet_bytes = 10000) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.min_flowlet_bytes = min_flowlet_bytes;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK);
    return c;
  }
  std::uint64_t endpoints() { return daemon_.status().value("endpoints", 0u); }

  std::string listen_ = daemon::testing::unique_endpoint();
  std::string address_ = "@ft-test-agent-" + std::to_string(::getpid());
  DaemonProcess daemon_;
  AgentProcess agent_;
};

TEST_F(AgentTest, ServedProcessesShareTheAgentsSessionAndTheLink) {
  start_agent();
  ft_client* c1 = open();
  ft_client* c2 = open();  // a second process, as the agent sees it
  Transfer a, b;
  ASSERT_EQ(ft_socket_register(c1, a.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(c2, b.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c1, a.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] { return near(rate(c1, a.send_fd), kLinkBytes); }))
      << rate(c1, a.send_fd) << "\n"
      << agent_.log() << daemon_.log();
  ASSERT_EQ(ft_flowlet_begin(c2, b.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] {
    return near(rate(c1, a.send_fd), kLinkBytes / 2) && near(rate(c2, b.send_fd), kLinkBytes / 2);
  })) << rate(c1, a.send_fd)
      << " " << rate(c2, b.send_fd);
  // One session for the host: the allocator knows one endpoint.
  EXPECT_EQ(endpoints(), 1u);
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c1, &st), FT_OK);
  EXPECT_EQ(st.connected, 1);
  EXPECT_GE(st.rates_applied, 2u);
  // The bytes are the application's, paced or not.
  ASSERT_EQ(ft_flowlet_end(c2, b.send_fd), FT_OK);
  EXPECT_TRUE(eventually([&] { return near(rate(c1, a.send_fd), kLinkBytes); }));
  const std::uint64_t sum = b.send_all(1 << 20, c2);
  b.finish();
  EXPECT_EQ(b.received(), 1u << 20);
  EXPECT_EQ(b.checksum(), sum);
  EXPECT_EQ(ft_client_close(c2), FT_OK);
  // A process that leaves ends its flowlets; the other keeps its own.
  EXPECT_EQ(ft_client_close(c1), FT_OK);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }));
}

TEST_F(AgentTest, TheAgentsDeathRemovesItsCapsAndARestartBringsThemBack) {
  start_agent();
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); })) << agent_.log();
  agent_.kill9();
  // The connection's end is seen at once: no cap of the agent's remains.
  EXPECT_TRUE(eventually([&] { return rate(c, t.send_fd) == 0; }, 1500));
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c, &st), FT_OK);
  EXPECT_EQ(st.connected, 0);
  start_agent();
  // Back within the reconnect backoff, with the flowlet reported again.
  EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); }, 5000))
      << rate(c, t.send_fd) << "\n"
      << agent_.log();
  const std::uint64_t sum = t.send_all(1 << 20, c);
  t.finish();
  EXPECT_EQ(t.received(), 1u << 20);
  EXPECT_EQ(t.checksum(), sum);
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(AgentTest, AFlowletKeepsItsPolicyWhenTheAgentRestarts) {
  start_agent();
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ft_flowlet_opts o;
  ft_flowlet_opts_init(&o);
  o.weight = 3;
  o.coflow_id = 77;
  o.priority_class = 2;
  o.tenant = "blue";
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, &o), FT_OK);
  auto flow = [&] {
    const auto f = daemon_.control("flows");
    return f && (*f)["flows"].size() == 1 ? (*f)["flows"][0] : nlohmann::json{};
  };
  auto as_asked = [&](const nlohmann::json& f) {
    return !f.is_null() && f["coflow"] == 77 && f["class"] == 2 && f["tenant"] == "blue" &&
           f["weight"] == 3.0;
  };
  ASSERT_TRUE(eventually([&] { return as_asked(flow()); })) << flow().dump();
  agent_.kill9();
  ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) == 0; }, 1500));
  start_agent();
  // Reported again by the new agent, with the begin's policy, not the
  // socket's defaults.
  EXPECT_TRUE(eventually([&] { return as_asked(flow()) && rate(c, t.send_fd) > 0; }, 5000))
      << flow().dump() << "\n"
      << agent_.log();
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(AgentTest, AProcessThatFallsSilentIsReleasedAndItsFlowsEnd) {
  start_agent();
  // A process frozen after it began a flowlet: hello, register, begin,
  // then nothing, not even its tick.
  const int s = connect_raw(address_);
  ASSERT_GE(s, 0);
  std::vector<std::uint8_t> packet;
  agent::Record hello;
  hello.op = agent::Op::kHello;
  hello.value = agent::kProtocolVersion;
  agent::HelloBody body;
  body.min_flowlet_bytes = 10000;
  body.min_rate_bytes_per_sec = 16000;
  agent::append(packet, hello, std::string_view(reinterpret_cast<const char*>(&body), sizeof body));
  Transfer t;  // a real connected socket's addresses
  Event reg;
  reg.kind = Event::kRegister;
  reg.ref = SocketRef{t.send_fd, 1};
  reg.tuple = {0x7f000001, 0x7f000002, 40000, 5000, IPPROTO_TCP};
  Event begin;
  begin.kind = Event::kBegin;
  begin.ref = reg.ref;
  begin.bytes = 100 << 20;
  std::string tenant;
  agent::append(packet, agent::record_of(reg, nullptr, &tenant));
  agent::append(packet, agent::record_of(begin, nullptr, &tenant));
  ASSERT_EQ(::send(s, packet.data(), packet.size(), 0), static_cast<ssize_t>(packet.size()));
  ASSERT_TRUE(eventually([&] { return daemon_.status()["flows"] == 1; })) << agent_.log();
  const auto t0 = HarnessClock::now();
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 6000)) << agent_.log();
  const double s_taken = std::chrono::duration<double>(HarnessClock::now() - t0).count();
  EXPECT_GT(s_taken, 2.0);  // not before its silence counted
  EXPECT_NE(agent_.log().find("silent"), std::string::npos) << agent_.log();
  ::close(s);
}

TEST_F(AgentTest, AStalledAgentIsGivenUpWithinASecondAndUsedAgainWhenItWakes) {
  start_agent();
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); })) << agent_.log();
  agent_.signal(SIGSTOP);  // alive, connected, silent
  const auto t0 = HarnessClock::now();
  EXPECT_TRUE(eventually([&] { return rate(c, t.send_fd) == 0; }, 3000));
  const double gone_s = std::chrono::duration<double>(HarnessClock::now() - t0).count();
  EXPECT_LT(gone_s, 2.0);
  EXPECT_GT(gone_s, 0.5);  // ticks kept it trusted until it fell silent
  agent_.signal(SIGCONT);
  EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); }, 5000))
      << rate(c, t.send_fd) << "\n"
      << agent_.log();
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(AgentTest, AProcessAskingForOtherSettingsRunsItsOwnSession) {
  start_agent();
  ft_client* served = open();
  ft_client* own = open(20000);  // another min_flowlet_bytes: refused
  Transfer a, b;
  ASSERT_EQ(ft_socket_register(served, a.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(own, b.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(served, a.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(own, b.send_fd, 100 << 20, nullptr), FT_OK);
  // Its own session reports its flowlet itself; both are rated.
  EXPECT_TRUE(eventually([&] {
    ft_stats st{};
    ft_client_stats(own, &st);
    return st.flowlets_started == 1 && rate(own, b.send_fd) > 0 && rate(served, a.send_fd) > 0;
  })) << agent_.log();
  EXPECT_EQ(endpoints(), 2u);
  EXPECT_NE(agent_.log().find("refused"), std::string::npos) << agent_.log();
  EXPECT_EQ(ft_client_close(own), FT_OK);
  EXPECT_EQ(ft_client_close(served), FT_OK);
}

// A process that names its host is served only by an agent whose session
// is that host's: otherwise its flows would be placed at another host.
TEST_F(AgentTest, AProcessNamingAnotherHostRunsItsOwnSession) {
  agent_.start({"--listen", address_, "--allocator", listen_, "--min-flowlet-bytes", "10000",
                "--host", "h-agent", "--log-level", "3"});
  ASSERT_TRUE(eventually([&] { return listening(address_); }, 5000)) << agent_.log();
  const auto open_as = [&](const char* host) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.min_flowlet_bytes = 10000;
    cfg.host = host;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK);
    return c;
  };
  ft_client* same = open_as("h-agent");
  ft_client* other = open_as("h-other");
  Transfer a, b;
  ASSERT_EQ(ft_socket_register(same, a.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(other, b.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(same, a.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(other, b.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] {
    ft_stats st{};
    ft_client_stats(other, &st);
    return st.flowlets_started == 1 && rate(other, b.send_fd) > 0 && rate(same, a.send_fd) > 0;
  })) << agent_.log();
  EXPECT_EQ(endpoints(), 2u);  // the agent's session and the other host's own
  EXPECT_NE(agent_.log().find("names host \"h-other\""), std::string::npos) << agent_.log();
  EXPECT_EQ(ft_client_close(other), FT_OK);
  EXPECT_EQ(ft_client_close(same), FT_OK);
}

TEST_F(AgentTest, WithNothingListeningAProcessRunsItsOwnSession) {
  // No agent started: the address is free, as the default is on a host
  // without one.
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] {
    ft_stats st{};
    ft_client_stats(c, &st);
    return st.flowlets_started == 1 && near(rate(c, t.send_fd), kLinkBytes);
  }));
  EXPECT_EQ(endpoints(), 1u);  // its own
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(AgentTest, APeerThatBreaksTheProtocolIsDroppedAndOthersAreServed) {
  start_agent();
  const int bad = connect_raw(address_);
  ASSERT_GE(bad, 0);
  const char garbage[] = "not a record at all";
  ASSERT_GT(::send(bad, garbage, sizeof garbage, 0), 0);
  char buf[256];
  EXPECT_EQ(::recv(bad, buf, sizeof buf, 0), 0);  // the agent closed it
  ::close(bad);
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); })) << agent_.log();
  EXPECT_EQ(ft_client_close(c), FT_OK);
  EXPECT_EQ(agent_.stop(), 0);
}

// Goal 7 of issue 47: a process that floods the agent with flowlets
// (begin/end as fast as it can, on many sockets) does not keep another
// process of the host from its rate. Its share of the host's events
// (--max-events-per-sec) keeps the agent's session within the allocator's
// per-source quota, so the allocator drops none of its messages: before
// the share, it dropped 1-7 of them a flood, each losing whatever starts
// of other processes rode in it until a resync.
TEST_F(AgentTest, AFloodingProcessDoesNotStarveItsNeighbour) {
  start_agent();
  const auto rate_limited = [&] {
    return daemon_.status()["counters"]["errors"].value("rate_limited", 0u);
  };
  const std::uint64_t limited_before = rate_limited();
  ft_client* flood = open();
  ft_client* calm = open();
  std::vector<std::unique_ptr<Transfer>> socks;
  for (int i = 0; i < 16; ++i) {
    socks.push_back(std::make_unique<Transfer>());
    ASSERT_EQ(ft_socket_register(flood, socks.back()->send_fd), FT_OK);
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> flowlets{0};
  std::thread flooder([&] {
    while (!stop.load()) {
      for (auto& t : socks) {
        (void)ft_flowlet_begin(flood, t->send_fd, 1 << 20, nullptr);
        (void)ft_flowlet_end(flood, t->send_fd);
        flowlets.fetch_add(1);
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the flood is on
  Transfer t;
  ASSERT_EQ(ft_socket_register(calm, t.send_fd), FT_OK);
  const auto t0 = HarnessClock::now();
  ASSERT_EQ(ft_flowlet_begin(calm, t.send_fd, 100 << 20, nullptr), FT_OK);
  const bool rated = eventually([&] { return rate(calm, t.send_fd) > 0; }, 3000);
  const double ms = std::chrono::duration<double, std::milli>(HarnessClock::now() - t0).count();
  stop = true;
  flooder.join();
  std::printf("flood: %llu flowlets; the calm process's rate after %.1f ms\n",
              static_cast<unsigned long long>(flowlets.load()), ms);
  EXPECT_TRUE(rated) << agent_.log() << daemon_.log();
  EXPECT_EQ(rate_limited(), limited_before) << "the allocator dropped the agent's messages";
  EXPECT_GT(flowlets.load(), 10000u);  // it was a flood
  EXPECT_EQ(ft_client_close(flood), FT_OK);
  EXPECT_EQ(ft_client_close(calm), FT_OK);
}

TEST(AgentProto, RecordsCarryEventsAndTheirTenantBothWays) {
  TenantNames mine, theirs;
  Event e;
  e.kind = Event::kBegin;
  e.ref = SocketRef{42, 7};
  e.bytes = 123456;
  FlowletPolicy p;
  p.weight = 2.5f;
  p.priority_class = 3;
  p.deadline_ms = 40;
  p.coflow_id = 99;
  p.tenant = static_cast<std::uint8_t>(mine.intern("blue"));
  e.policy = p;
  std::string tenant;
  std::vector<std::uint8_t> packet;
  const agent::Record rec = agent::record_of(e, &mine, &tenant);
  agent::append(packet, rec, tenant);
  (void)theirs.intern("red");  // the agent's table numbers tenants its own way
  std::vector<Event> got;
  ASSERT_TRUE(agent::for_each_record(packet.data(), packet.size(),
                                     [&](const agent::Record& r, std::string_view t) {
                                       got.push_back(agent::event_of(r, t, &theirs));
                                     }));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kind, Event::kBegin);
  EXPECT_EQ(got[0].ref, e.ref);
  EXPECT_EQ(got[0].bytes, e.bytes);
  ASSERT_TRUE(got[0].policy.has_value());
  EXPECT_EQ(got[0].policy->weight, 2.5f);
  EXPECT_EQ(got[0].policy->coflow_id, 99u);
  EXPECT_EQ(theirs.name(got[0].policy->tenant), "blue");
  // A truncated packet, and an unknown op, are refused whole.
  EXPECT_FALSE(agent::for_each_record(packet.data(), packet.size() - 1, [](auto&&, auto&&) {}));
  packet[0] = 200;
  EXPECT_FALSE(agent::for_each_record(packet.data(), packet.size(), [](auto&&, auto&&) {}));
}

}  // namespace
}  // namespace flowtune::client
