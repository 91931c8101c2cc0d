// flowtune-relay: routes (wire/relay.h) by hand, then libflowtune clients
// through relay processes to an allocator process: rates as if direct,
// relays stacked, and a relay's and the allocator's restarts repaired.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "../allocator/daemon/daemon_harness.h"
#include "flowtune/flowtune.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/relay.h"
#include "flowtune/wire/role.h"
#include <zmq_addon.hpp>

namespace flowtune::relay {
namespace {

using daemon::testing::Clock;
using daemon::testing::control_request;
using daemon::testing::DaemonProcess;
using daemon::testing::unique_endpoint;

constexpr double kLinkBytes = 0.1e9 / 8 * 0.99;  // the allocator's 100 Mbit/s host links, scheduled

TEST(Route, PushAndPopNestAndRefuseWhatIsNotARoute) {
  const std::string r = wire::route_push("relay2", wire::route_push("ep", {}));
  std::string_view hop, rest;
  ASSERT_TRUE(wire::route_pop(r, &hop, &rest));
  EXPECT_EQ(hop, "relay2");
  ASSERT_TRUE(wire::route_pop(rest, &hop, &rest));
  EXPECT_EQ(hop, "ep");
  EXPECT_TRUE(rest.empty());
  EXPECT_TRUE(wire::route_push("", "x").empty());
  EXPECT_TRUE(wire::route_push(std::string(256, 'a'), "").empty());
  EXPECT_TRUE(wire::route_push("a", std::string(wire::kMaxRouteBytes, 'b')).empty());
  for (std::string_view bad : {std::string_view(), std::string_view("\0", 1), std::string_view("\5abc")}) {
    EXPECT_FALSE(wire::route_pop(bad, &hop, &rest));
  }
  // The allocator's key for an endpoint behind a relay: never a connection's.
  const std::string peer = wire::relayed_peer(std::string("\0abcd", 5), wire::route_push("ep", {}));
  EXPECT_TRUE(wire::is_relayed_peer(peer));
  EXPECT_FALSE(wire::is_relayed_peer(std::string("\0Rxyz", 5)));  // a ZeroMQ routing id's size
  std::string_view relay, route;
  ASSERT_TRUE(wire::split_relayed_peer(peer, &relay, &route));
  EXPECT_EQ(relay, std::string_view("\0abcd", 5));
  EXPECT_EQ(route, wire::route_push("ep", {}));
}

// A flowtune-relay process.
class RelayProcess {
 public:
  ~RelayProcess() { kill9(); }
  void start(const std::string& listen, const std::string& upstream,
             std::vector<std::string> extra = {}) {
    listen_ = listen;
    std::vector<std::string> args = {FT_RELAY_BINARY, "--listen", listen, "--upstream", upstream,
                                      "--heartbeat-ms", "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      ::close_range(3, ~0u, 0);
      ::execv(FT_RELAY_BINARY, argv.data());
      ::_exit(127);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline && !status()) {
    }
    ASSERT_TRUE(status()) << "the relay did not answer";
  }
  std::optional<nlohmann::json> status() {
    return control_request(ctx_, listen_, keys_ ? &*keys_ : nullptr, "status", 100);
  }
  // The relay takes CURVE downstream: flowtune-ctl speaks it too.
  void set_control_keys(const curve::ClientKeys& k) { keys_ = k; }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  int stop() {
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  zmq::context_t ctx_{1};
  std::string listen_;
  std::optional<curve::ClientKeys> keys_;
  pid_t pid_ = -1;
};

// A connected loopback pair whose receiver is never read: only its rate matters here.
struct Conn {
  int send_fd = -1, recv_fd = -1;
  Conn() {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000002);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::listen(l, 1);
    ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    send_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(send_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    recv_fd = ::accept(l, nullptr, nullptr);
    ::close(l);
  }
  ~Conn() {
    ::close(send_fd);
    ::close(recv_fd);
  }
};

std::uint64_t rate(ft_client* c, int fd) {
  std::uint64_t r = 0;
  EXPECT_EQ(ft_socket_rate(c, fd, &r), FT_OK);
  return r;
}

template <class Pred>
bool eventually(Pred p, int ms = 5000) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return p();
}

bool near(std::uint64_t got, double want) {
  return static_cast<double>(got) > want * 0.97 && static_cast<double>(got) < want * 1.03;
}

ft_client* open_client(const std::string& allocator) {
  ft_config cfg;
  ft_config_init(&cfg);
  cfg.allocator = allocator.c_str();
  cfg.heartbeat_ms = 200;
  cfg.min_flowlet_bytes = 10000;
  cfg.log_level = 0;
  ft_client* c = nullptr;
  EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK);
  return c;
}

class RelayTest : public ::testing::Test {
 protected:
  void start_allocator(const char* gbps = "0.1") {
    daemon_.start(alloc_ep_, {"--host-gbps", gbps, "--lease-ms", "300", "--lease-refresh-ms", "100"});
  }
  void start_curve_allocator(const daemon::testing::CurveSetup& keys) {
    std::vector<std::string> args = {"--host-gbps", "0.1"};
    const auto curve = keys.allocator_args();
    args.insert(args.end(), curve.begin(), curve.end());
    daemon_.start(alloc_ep_, args);
  }
  ft_client* open(const std::string& allocator) { return open_client(allocator); }
  // n flowlets on c, each rated near `want` within the wait.
  bool all_near(ft_client* c, std::vector<std::unique_ptr<Conn>>& conns, double want, int ms = 5000) {
    return eventually([&] {
      for (auto& k : conns) {
        if (!near(rate(c, k->send_fd), want)) return false;
      }
      return true;
    }, ms);
  }
  std::vector<std::unique_ptr<Conn>> flowlets(ft_client* c, int n) {
    std::vector<std::unique_ptr<Conn>> v;
    for (int i = 0; i < n; ++i) {
      v.push_back(std::make_unique<Conn>());
      EXPECT_EQ(ft_socket_register(c, v.back()->send_fd), FT_OK);
      EXPECT_EQ(ft_flowlet_begin(c, v.back()->send_fd, 1ull << 30, nullptr), FT_OK);
    }
    return v;
  }
  void close(ft_client* c, std::vector<std::unique_ptr<Conn>>& conns) {
    for (auto& k : conns) ft_socket_unregister(c, k->send_fd);
    ft_client_close(c);
  }
  std::string alloc_ep_ = unique_endpoint();
  DaemonProcess daemon_;
};

TEST_F(RelayTest, ThroughARelayFlowletsGetTheRatesTheyWouldDirectly) {
  start_allocator();
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  relay.start(relay_ep, alloc_ep_);
  ft_client* c = open(relay_ep);
  auto conns = flowlets(c, 3);
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 3)) << daemon_.log();
  const auto st = daemon_.status();
  EXPECT_EQ(st["endpoints"], 1);
  EXPECT_EQ(st["flows"], 3);
  EXPECT_GE(st["counters"]["relay_batches"].get<int>(), 1);
  const auto rs = relay.status();
  ASSERT_TRUE(rs);
  EXPECT_GE((*rs)["counters"]["messages_up"].get<int>(), 1);
  EXPECT_GE((*rs)["counters"]["messages_down"].get<int>(), 1);
  EXPECT_EQ((*rs)["counters"]["bad_frames"], 0);
  // The ends go through too: the allocator holds nothing afterwards.
  close(c, conns);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 3000));
  EXPECT_EQ(relay.stop(), 0);
}

TEST_F(RelayTest, StackedRelaysCarryBothWaysAndEndpointsBesideThemShare) {
  start_allocator();
  const std::string pod = unique_endpoint(), rack = unique_endpoint();
  RelayProcess pod_relay, rack_relay;
  pod_relay.start(pod, alloc_ep_);
  rack_relay.start(rack, pod);
  // One client two relays deep, one one relay deep, one direct: all share
  // the same host link (127.0.0.1 -> 127.0.0.2), a third each.
  ft_client* deep = open(rack);
  ft_client* mid = open(pod);
  ft_client* direct = open(alloc_ep_);
  auto a = flowlets(deep, 1), b = flowlets(mid, 1), d = flowlets(direct, 1);
  EXPECT_TRUE(all_near(deep, a, kLinkBytes / 3)) << daemon_.log();
  EXPECT_TRUE(all_near(mid, b, kLinkBytes / 3));
  EXPECT_TRUE(all_near(direct, d, kLinkBytes / 3));
  EXPECT_EQ(daemon_.status()["endpoints"], 3);
  const auto rs = rack_relay.status();
  ASSERT_TRUE(rs);
  EXPECT_GE((*rs)["counters"]["messages_down"].get<int>(), 1);
  const auto ps = pod_relay.status();
  ASSERT_TRUE(ps);
  EXPECT_GE((*ps)["counters"]["batches_down"].get<int>(), 1);  // batches for the relay below
  close(deep, a);
  close(mid, b);
  close(direct, d);
}

// A relay keeps no state: after it restarts, or after the allocator does,
// the endpoints' own repair rules (notRegistered, a new epoch) resync them.
TEST_F(RelayTest, ARelayRestartAndAnAllocatorRestartAreRepairedByResync) {
  start_allocator();
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  relay.start(relay_ep, alloc_ep_);
  ft_client* c = open(relay_ep);
  auto conns = flowlets(c, 2);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes / 2)) << daemon_.log();
  // The relay killed and started again on the same endpoint.
  relay.kill9();
  relay.start(relay_ep, alloc_ep_);
  // A third flowlet after the restart is rated, and the others with it.
  auto more = flowlets(c, 1);
  conns.push_back(std::move(more[0]));
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 3)) << daemon_.log();
  EXPECT_EQ(daemon_.status()["endpoints"], 1);  // its hello through the new relay replaced the old route
  // The allocator restarted with links half as fast: the new rates reach
  // the endpoint through the relay.
  ASSERT_EQ(daemon_.stop(), 0);
  start_allocator("0.05");
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2 / 3)) << daemon_.log();
  EXPECT_EQ(daemon_.status()["flows"], 3);
  close(c, conns);
}

// A relay over a standby pair (allocator --standby-of) sends up to the
// active one; when it is killed and the standby takes over, the relay
// follows and the endpoints behind it resync there; the old primary,
// restarted, stands by and the relay stays.
TEST_F(RelayTest, OverAStandbyPairTheRelayFollowsTheTakeover) {
  const std::string eps[2] = {unique_endpoint(), unique_endpoint()};
  DaemonProcess pair[2];
  const auto start = [&](int i) {
    // The standby's links are half as fast: its rates tell who rated.
    pair[i].start(eps[i], {"--host-gbps", i == 0 ? "0.1" : "0.05", "--standby-of", eps[1 - i],
                           "--probe-ms", "50", "--takeover-ms", "300", "--lease-ms", "300",
                           "--lease-refresh-ms", "100"});
  };
  const auto role = [&](int i) {
    const auto st = pair[i].control("status", 500);
    return st && st->contains("role") ? (*st)["role"].get<std::string>() : std::string();
  };
  start(0);
  ASSERT_TRUE(eventually([&] { return role(0) == "active"; })) << pair[0].log();
  start(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // two takeover times
  ASSERT_EQ(role(1), "standby") << pair[1].log();
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  relay.start(relay_ep, eps[0] + "," + eps[1], {"--probe-ms", "50"});
  ft_client* c = open(relay_ep);
  auto conns = flowlets(c, 2);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes / 2)) << pair[0].log();
  EXPECT_EQ(pair[0].status()["flows"], 2);
  auto rs = relay.status();
  ASSERT_TRUE(rs);
  EXPECT_EQ((*rs)["upstream"], eps[0]);
  EXPECT_EQ((*rs)["counters"]["upstream_switches"], 0);

  const auto killed = Clock::now();
  pair[0].kill9();
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2 / 2, 5000)) << pair[1].log();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  std::printf("relay over a standby pair: every flowlet rated by the standby %lld ms after kill -9\n",
              static_cast<long long>(ms));
  EXPECT_EQ(role(1), "active");
  EXPECT_EQ(pair[1].status()["flows"], 2);
  rs = relay.status();
  ASSERT_TRUE(rs);
  EXPECT_EQ((*rs)["upstream"], eps[1]);
  EXPECT_EQ((*rs)["counters"]["upstream_switches"], 1);

  start(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // three takeover times
  EXPECT_EQ(role(0), "standby") << pair[0].log();
  rs = relay.status();
  ASSERT_TRUE(rs);
  EXPECT_EQ((*rs)["upstream"], eps[1]);
  EXPECT_EQ(pair[0].status()["flows"], 0);
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2 / 2));
  close(c, conns);
  EXPECT_EQ(relay.stop(), 0);
}

// Endpoints may list two relays, as they list a standby pair: when the
// one they use is killed, they move to the other (its silence, as an
// allocator's) and resync through it.
TEST_F(RelayTest, EndpointsListingTwoRelaysMoveOnWhenOneIsKilled) {
  start_allocator();
  const std::string r1 = unique_endpoint(), r2 = unique_endpoint();
  RelayProcess first, second;
  first.start(r1, alloc_ep_);
  second.start(r2, alloc_ep_);
  ft_client* c = open(r1 + "," + r2);
  auto conns = flowlets(c, 2);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes / 2)) << daemon_.log();
  auto s1 = first.status();
  ASSERT_TRUE(s1);
  EXPECT_GE((*s1)["counters"]["messages_up"].get<int>(), 1);
  const auto killed = Clock::now();
  first.kill9();
  // A third flowlet after the kill is rated through the second relay, and
  // the other two with it.
  auto more = flowlets(c, 1);
  conns.push_back(std::move(more[0]));
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 3, 10'000)) << daemon_.log();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  std::printf("two relays: every flowlet rated through the second %lld ms after kill -9 of the first\n",
              static_cast<long long>(ms));
  auto s2 = second.status();
  ASSERT_TRUE(s2);
  EXPECT_GE((*s2)["counters"]["messages_up"].get<int>(), 1);
  EXPECT_EQ(daemon_.status()["flows"], 3);
  close(c, conns);
}

// With CURVE on the allocator, a relay speaks it upstream with an endpoint
// key bound to the hosts behind it: those endpoints are scheduled, while a
// relay without a key, or whose key names other hosts, is not heard for
// them.
TEST_F(RelayTest, UnderCurveARelaySpeaksForTheHostsItsKeyNames) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  const std::string pub = keys.server.own.public_key;
  keys.endpoint("rack", R"(["127.0.0.1"])");
  keys.endpoint("elsewhere", R"(["10.9.9.9"])");
  daemon_.set_control_keys(keys.op);
  start_curve_allocator(keys);
  const auto relay_with = [&](RelayProcess& r, const std::string& ep, const char* key) {
    std::vector<std::string> extra;
    if (key != nullptr) extra = {"--curve-server", pub, "--curve-key", keys.key_file(key)};
    r.start(ep, alloc_ep_, extra);
  };
  // Keyed for 127.0.0.1, the endpoints' host: scheduled.
  const std::string good_ep = unique_endpoint();
  RelayProcess good;
  relay_with(good, good_ep, "rack");
  ft_client* c = open(good_ep);
  auto conns = flowlets(c, 2);
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2)) << daemon_.log();
  EXPECT_EQ(daemon_.status()["flows"], 2);
  const auto rs = good.status();
  ASSERT_TRUE(rs);
  EXPECT_EQ((*rs)["curve"], true);
  close(c, conns);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 3000));
  // No key, and a key for other hosts: nothing they carry is scheduled.
  for (const char* key : {static_cast<const char*>(nullptr), "elsewhere"}) {
    SCOPED_TRACE(key != nullptr ? key : "no key");
    const std::string ep = unique_endpoint();
    RelayProcess r;
    relay_with(r, ep, key);
    ft_client* d = open(ep);
    auto ds = flowlets(d, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    EXPECT_EQ(rate(d, ds[0]->send_fd), 0u);
    EXPECT_EQ(daemon_.status()["flows"], 0);
    close(d, ds);
  }
}

// With CURVE between endpoints and the relay too (--curve-secret), each
// endpoint's message goes up with its own key and the relay's (a keyed
// batch): the allocator schedules an endpoint only where both keys allow
// its host, only if the relay's key says `relay = true`, and never a key
// it does not list. Plain endpoints do not get through the relay at all.
// Each refusal is the allocator's (not_authorized counted) or the relay's
// handshake.
TEST_F(RelayTest, UnderCurveDownstreamEachEndpointSpeaksWithItsOwnKey) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  const std::string pub = keys.server.own.public_key;
  const curve::ClientKeys rack = keys.endpoint("rack", "[\"127.0.0.1\"]\nrelay = true");
  const curve::ClientKeys plain = keys.endpoint("plain-relay", R"(["127.0.0.1"])");
  const curve::ClientKeys far = keys.endpoint("far-rack", "[\"10.9.9.9\"]\nrelay = true");
  keys.endpoint("ep", R"(["127.0.0.1"])");
  keys.endpoint("elsewhere", R"(["10.9.9.9"])");
  daemon::testing::make_key(keys.dir.path(), "stranger", {}, "", "");
  daemon_.set_control_keys(keys.op);
  start_curve_allocator(keys);
  // Two relays, each serving CURVE with its own pair: one whose key may
  // vouch, one whose key may not.
  const auto start_relay = [&](RelayProcess& r, const std::string& ep, const char* key,
                               const curve::ClientKeys& own) {
    curve::ClientKeys ctl = keys.op;
    ctl.server_public = own.own.public_key;
    r.set_control_keys(ctl);
    r.start(ep, alloc_ep_, {"--curve-server", pub, "--curve-key", keys.key_file(key), "--curve-secret", keys.key_file(key)});
  };
  const std::string good_ep = unique_endpoint(), plain_ep = unique_endpoint(), far_ep = unique_endpoint();
  RelayProcess good, no_vouch, far_relay;
  start_relay(good, good_ep, "rack", rack);
  start_relay(no_vouch, plain_ep, "plain-relay", plain);
  start_relay(far_relay, far_ep, "far-rack", far);
  EXPECT_EQ((*good.status())["curve_downstream"], true);
  // An endpoint's client, with the relay's public key and its own pair
  // (none: plain).
  const auto open_as = [&](const std::string& ep, const std::string& relay_pub, const char* key) {
    if (key != nullptr) {
      ::setenv("FLOWTUNE_CURVE_SERVER", relay_pub.c_str(), 1);
      ::setenv("FLOWTUNE_CURVE_KEY", keys.key_file(key).c_str(), 1);
    }
    ft_client* c = open(ep);
    ::unsetenv("FLOWTUNE_CURVE_SERVER");
    ::unsetenv("FLOWTUNE_CURVE_KEY");
    return c;
  };
  {
    // The endpoint's key and the relay's both allow 127.0.0.1: scheduled,
    // registered under the endpoint's own key.
    ft_client* c = open_as(good_ep, rack.own.public_key, "ep");
    auto conns = flowlets(c, 2);
    EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2)) << daemon_.log();
    EXPECT_EQ(daemon_.status()["flows"], 2);
    const auto eps = daemon_.control("endpoints");
    ASSERT_TRUE(eps) << daemon_.log();
    ASSERT_EQ((*eps)["endpoints"].size(), 1u) << eps->dump();
    EXPECT_EQ((*eps)["endpoints"][0]["key"], "ep");
    EXPECT_EQ((*eps)["endpoints"][0]["vouched_by_relays"], 1);
    close(c, conns);
    EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 3000));
  }
  struct Refused {
    const char* why;
    const std::string* ep;
    const std::string* relay_pub;
    const char* key;
  } cases[] = {
      {"a key for another host", &good_ep, &rack.own.public_key, "elsewhere"},
      {"a key in no list", &good_ep, &rack.own.public_key, "stranger"},
      {"no key at all", &good_ep, &rack.own.public_key, nullptr},
      {"a relay whose key may not vouch", &plain_ep, &plain.own.public_key, "ep"},
      {"a relay whose key names other hosts", &far_ep, &far.own.public_key, "ep"},
  };
  const auto refusals = [&] { return daemon_.status()["counters"]["errors"]["not_authorized"].get<int>(); };
  for (const Refused& k : cases) {
    SCOPED_TRACE(k.why);
    const int before = refusals();
    ft_client* d = open_as(*k.ep, *k.relay_pub, k.key);
    auto ds = flowlets(d, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    EXPECT_EQ(rate(d, ds[0]->send_fd), 0u);
    EXPECT_EQ(daemon_.status()["flows"], 0);
    // Keyed endpoints reach the allocator and are refused there; a plain
    // one fails the relay's handshake and reaches nothing.
    if (k.key != nullptr) EXPECT_GT(refusals(), before);
    else EXPECT_EQ(refusals(), before);
    close(d, ds);
  }
  // A reload that takes `relay = true` from the relay's key drops the
  // endpoints it vouched for, and hears them no more.
  ft_client* c = open_as(good_ep, rack.own.public_key, "ep");
  auto conns = flowlets(c, 1);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes)) << daemon_.log();
  daemon::testing::write_file(keys.clients + "/rack.pub",
                              "public-key = \"" + rack.own.public_key + "\"\nhosts = [\"127.0.0.1\"]\n");
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  EXPECT_TRUE(eventually([&] { return daemon_.log().find("1 endpoints dropped") != std::string::npos; }, 3000))
      << daemon_.log();
  EXPECT_EQ(daemon_.status()["flows"], 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // its hello and resync come back
  EXPECT_EQ(daemon_.status()["flows"], 0);
  close(c, conns);
}

// Stacked relays under CURVE downstream: the rack relay vouches for its
// endpoint to the pod relay, which vouches for both to the allocator. Each
// relay key of the chain must say `relay = true`.
TEST_F(RelayTest, UnderCurveDownstreamStackedRelaysVouchInTurn) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  const std::string pub = keys.server.own.public_key;
  const curve::ClientKeys pod = keys.endpoint("pod", "[\"127.0.0.1\"]\nrelay = true");
  const curve::ClientKeys rack = keys.endpoint("rack", "[\"127.0.0.1\"]\nrelay = true");
  keys.endpoint("rack-not-relay", R"(["127.0.0.1"])");
  keys.endpoint("ep", R"(["127.0.0.1"])");
  daemon_.set_control_keys(keys.op);
  start_curve_allocator(keys);
  const std::string pod_ep = unique_endpoint();
  RelayProcess upper;
  curve::ClientKeys ctl = keys.op;
  ctl.server_public = pod.own.public_key;
  upper.set_control_keys(ctl);
  upper.start(pod_ep, alloc_ep_, {"--curve-server", pub, "--curve-key", keys.key_file("pod"), "--curve-secret", keys.key_file("pod")});
  for (const char* lower_key : {"rack", "rack-not-relay"}) {
    SCOPED_TRACE(lower_key);
    const bool vouches = std::string(lower_key) == "rack";
    const std::string rack_ep = unique_endpoint();
    RelayProcess lower;
    const Result<curve::KeyPair> own = curve::load_key_file(keys.key_file(lower_key), true);
    ASSERT_TRUE(own.ok()) << own.error().message;
    ctl.server_public = own->public_key;
    lower.set_control_keys(ctl);
    lower.start(rack_ep, pod_ep, {"--curve-server", pod.own.public_key, "--curve-key", keys.key_file(lower_key),
                                  "--curve-secret", keys.key_file(lower_key)});
    ::setenv("FLOWTUNE_CURVE_SERVER", own->public_key.c_str(), 1);
    ::setenv("FLOWTUNE_CURVE_KEY", keys.key_file("ep").c_str(), 1);
    ft_client* c = open(rack_ep);
    ::unsetenv("FLOWTUNE_CURVE_SERVER");
    ::unsetenv("FLOWTUNE_CURVE_KEY");
    auto conns = flowlets(c, 1);
    if (vouches) {
      EXPECT_TRUE(all_near(c, conns, kLinkBytes)) << daemon_.log();
      const auto eps = daemon_.control("endpoints");
      ASSERT_TRUE(eps);
      ASSERT_EQ((*eps)["endpoints"].size(), 1u) << eps->dump();
      EXPECT_EQ((*eps)["endpoints"][0]["key"], "ep");
      EXPECT_EQ((*eps)["endpoints"][0]["vouched_by_relays"], 2);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      EXPECT_EQ(rate(c, conns[0]->send_fd), 0u);
      EXPECT_EQ(daemon_.status()["flows"], 0);
    }
    close(c, conns);
    EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 3000));
  }
}

// A relay with an allow-list of its own (--curve-clients, --curve-ctl)
// refuses the keys it does not list at its handshake, so their messages
// never reach the allocator's budget; a SIGHUP re-reads the list, a key it
// removed is heard no more on the connection it still holds, and a list
// that does not load leaves the one in force.
TEST_F(RelayTest, UnderCurveDownstreamARelaysAllowListKeepsStrangersAtItsDoor) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  const std::string pub = keys.server.own.public_key;
  const curve::ClientKeys rack = keys.endpoint("rack", "[\"127.0.0.1\"]\nrelay = true");
  keys.endpoint("ep", R"(["127.0.0.1"])");
  keys.endpoint("other", R"(["127.0.0.1"])");  // the allocator lists it, the relay does not
  daemon::testing::make_key(keys.dir.path(), "stranger", {}, "", "");
  daemon_.set_control_keys(keys.op);
  start_curve_allocator(keys);
  const std::string list = keys.dir.path() + "/relay-clients";
  std::filesystem::create_directory(list);
  std::filesystem::copy_file(keys.clients + "/ep.pub", list + "/ep.pub");
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  curve::ClientKeys ctl = keys.op;
  ctl.server_public = rack.own.public_key;
  relay.set_control_keys(ctl);
  relay.start(relay_ep, alloc_ep_, {"--curve-server", pub, "--curve-key", keys.key_file("rack"), "--curve-secret",
                                    keys.key_file("rack"), "--curve-clients", list, "--curve-ctl", keys.ctl});
  const auto st = relay.status();
  ASSERT_TRUE(st);
  EXPECT_EQ((*st)["allow_list"]["keys"], 2) << st->dump();  // ep, and op to ask this
  const auto counter = [&](const char* name) { return (*relay.status())["counters"][name].get<int>(); };
  const auto open_as = [&](const char* key) {
    ::setenv("FLOWTUNE_CURVE_SERVER", rack.own.public_key.c_str(), 1);
    ::setenv("FLOWTUNE_CURVE_KEY", keys.key_file(key).c_str(), 1);
    ft_client* c = open(relay_ep);
    ::unsetenv("FLOWTUNE_CURVE_SERVER");
    ::unsetenv("FLOWTUNE_CURVE_KEY");
    return c;
  };
  ft_client* c = open_as("ep");
  auto conns = flowlets(c, 1);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes)) << daemon_.log();
  // Strangers to the relay, listed by the allocator or not: refused at the
  // relay's door, nothing for the allocator to refuse.
  const auto refusals = [&] { return daemon_.status()["counters"]["errors"]["not_authorized"].get<int>(); };
  for (const char* key : {"stranger", "other"}) {
    SCOPED_TRACE(key);
    const int before = refusals(), refused = counter("refused");
    ft_client* d = open_as(key);
    auto ds = flowlets(d, 1);
    EXPECT_TRUE(eventually([&] { return counter("refused") > refused; }, 3000));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(rate(d, ds[0]->send_fd), 0u);
    EXPECT_EQ(refusals(), before);
    EXPECT_EQ(daemon_.status()["flows"], 1);
    close(d, ds);
  }
  // A list that does not load: the one in force stays.
  daemon::testing::write_file(list + "/broken.pub", "public-key = 12\n");
  ASSERT_EQ(::kill(relay.pid(), SIGHUP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(counter("reloads"), 0);
  EXPECT_EQ((*relay.status())["allow_list"]["keys"], 2);
  // ep taken off the list: its connection lives, its messages go nowhere.
  std::filesystem::remove(list + "/broken.pub");
  std::filesystem::remove(list + "/ep.pub");
  ASSERT_EQ(::kill(relay.pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return counter("reloads") == 1; }, 3000));
  EXPECT_EQ((*relay.status())["allow_list"]["keys"], 1);
  auto late = flowlets(c, 1);
  EXPECT_TRUE(eventually([&] { return counter("not_listed") > 0; }, 3000));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(rate(c, late[0]->send_fd), 0u);
  // Listed again: heard again, the late flowlet rated.
  std::filesystem::copy_file(keys.clients + "/ep.pub", list + "/ep.pub");
  ASSERT_EQ(::kill(relay.pid(), SIGHUP), 0);
  ASSERT_TRUE(eventually([&] { return counter("reloads") == 2; }, 3000));
  conns.push_back(std::move(late[0]));
  EXPECT_TRUE(eventually([&] { return rate(c, conns.back()->send_fd) > 0; }, 5000)) << daemon_.log();
  close(c, conns);
}

// Stacked, the upper relay's allow-list judges each batch: from a lower
// relay's key with `relay = true` only, and every key of its chains listed.
TEST_F(RelayTest, UnderCurveDownstreamARelaysAllowListJudgesTheChainsOfBatches) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  const std::string pub = keys.server.own.public_key;
  const curve::ClientKeys pod = keys.endpoint("pod", "[\"127.0.0.1\"]\nrelay = true");
  keys.endpoint("rack", "[\"127.0.0.1\"]\nrelay = true");
  keys.endpoint("ep", R"(["127.0.0.1"])");
  daemon_.set_control_keys(keys.op);
  start_curve_allocator(keys);
  const std::string pod_list = keys.dir.path() + "/pod-clients";
  std::filesystem::create_directory(pod_list);
  const std::string pod_ep = unique_endpoint();
  RelayProcess upper;
  curve::ClientKeys ctl = keys.op;
  ctl.server_public = pod.own.public_key;
  upper.set_control_keys(ctl);
  const Result<curve::KeyPair> rack_read = curve::load_key_file(keys.key_file("rack"), true);
  ASSERT_TRUE(rack_read.ok()) << rack_read.error().message;
  const curve::KeyPair& rack_own = *rack_read;
  struct Case {
    const char* why;
    std::string rack_pub;  // the pod's entry for the rack relay ("": none)
    bool list_ep;
    bool rated;
  } cases[] = {
      {"the whole chain listed", "public-key = \"" + rack_own.public_key + "\"\nhosts = [\"127.0.0.1\"]\nrelay = true\n", true, true},
      {"the endpoint's key not listed at the pod", "public-key = \"" + rack_own.public_key + "\"\nhosts = [\"127.0.0.1\"]\nrelay = true\n", false, false},
      {"the rack relay's key without relay = true", "public-key = \"" + rack_own.public_key + "\"\nhosts = [\"127.0.0.1\"]\n", true, false},
  };
  bool started = false;
  for (const Case& k : cases) {
    SCOPED_TRACE(k.why);
    daemon::testing::write_file(pod_list + "/rack.pub", k.rack_pub);
    if (k.list_ep) {
      std::filesystem::copy_file(keys.clients + "/ep.pub", pod_list + "/ep.pub",
                                 std::filesystem::copy_options::overwrite_existing);
    } else {
      std::filesystem::remove(pod_list + "/ep.pub");
    }
    if (!started) {
      upper.start(pod_ep, alloc_ep_, {"--curve-server", pub, "--curve-key", keys.key_file("pod"), "--curve-secret",
                                      keys.key_file("pod"), "--curve-clients", pod_list, "--curve-ctl", keys.ctl});
      started = true;
    } else {
      const int reloads = (*upper.status())["counters"]["reloads"].get<int>();
      ASSERT_EQ(::kill(upper.pid(), SIGHUP), 0);
      ASSERT_TRUE(eventually([&] { return (*upper.status())["counters"]["reloads"] == reloads + 1; }, 3000));
    }
    const int dropped = (*upper.status())["counters"]["not_listed"].get<int>();
    const std::string rack_ep = unique_endpoint();
    RelayProcess lower;
    ctl.server_public = rack_own.public_key;
    lower.set_control_keys(ctl);
    lower.start(rack_ep, pod_ep, {"--curve-server", pod.own.public_key, "--curve-key", keys.key_file("rack"),
                                  "--curve-secret", keys.key_file("rack")});
    ::setenv("FLOWTUNE_CURVE_SERVER", rack_own.public_key.c_str(), 1);
    ::setenv("FLOWTUNE_CURVE_KEY", keys.key_file("ep").c_str(), 1);
    ft_client* c = open(rack_ep);
    ::unsetenv("FLOWTUNE_CURVE_SERVER");
    ::unsetenv("FLOWTUNE_CURVE_KEY");
    auto conns = flowlets(c, 1);
    if (k.rated) {
      EXPECT_TRUE(all_near(c, conns, kLinkBytes)) << daemon_.log();
    } else {
      EXPECT_TRUE(eventually([&] { return (*upper.status())["counters"]["not_listed"] > dropped; }, 3000));
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      EXPECT_EQ(rate(c, conns[0]->send_fd), 0u);
      EXPECT_EQ(daemon_.status()["flows"], 0);
    }
    close(c, conns);
    EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 3000));
  }
}

// The allocator's key rotates (docs/security.md): a relay that names it by
// its file follows the file once upstream falls silent, and the flowlets
// behind it keep their rates and new ones get theirs.
TEST_F(RelayTest, UnderCurveARelayFollowsTheAllocatorsKeyFile) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  keys.endpoint("rack", R"(["127.0.0.1"])");
  auto op = keys.op;
  daemon_.set_control_keys(op);
  keys.write_public(keys.server.own);
  start_curve_allocator(keys);
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  relay.start(relay_ep, alloc_ep_, {"--curve-server", keys.public_file(), "--curve-key", keys.key_file("rack")});
  ft_client* c = open(relay_ep);
  auto conns = flowlets(c, 1);
  ASSERT_TRUE(all_near(c, conns, kLinkBytes)) << daemon_.log();
  // When: the new key goes to the relay's file, then the allocator's.
  const curve::KeyPair next = curve::generate();
  keys.write_public(next);
  keys.write_secret(next);
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  op.server_public = next.public_key;
  daemon_.set_control_keys(op);
  // Expect: the relay follows, and two flowlets share the link.
  EXPECT_TRUE(eventually([&] {
    const auto st = relay.status();
    return st && (*st)["counters"]["key_changes"] == 1;
  })) << relay.status().value_or(nlohmann::json{});
  auto more = flowlets(c, 1);
  conns.push_back(std::move(more[0]));
  EXPECT_TRUE(all_near(c, conns, kLinkBytes / 2)) << daemon_.log();
  EXPECT_EQ(daemon_.status()["auth"]["key_rotations"], 1);
  close(c, conns);
}

// Bad upstream lists and probe periods are refused with the reason and
// status 2, before anything listens.
TEST(RelayCli, BadUpstreamListsAndProbePeriodsAreRefused) {
  const auto run = [](const std::string& args, std::string* out) {
    const auto r = daemon::testing::run_command(std::string(FT_RELAY_BINARY) + " --listen tcp://127.0.0.1:0 " + args);
    *out = r.output;
    return r.status;
  };
  std::string out;
  EXPECT_EQ(run("--upstream tcp://127.0.0.1:5555,,tcp://127.0.0.1:5556", &out), 2);
  EXPECT_NE(out.find("--upstream: an empty endpoint"), std::string::npos) << out;
  EXPECT_EQ(run("--upstream tcp://127.0.0.1:5555,tcp://127.0.0.1:99999", &out), 2);
  EXPECT_NE(out.find("99999"), std::string::npos) << out;
  EXPECT_EQ(run("--upstream tcp://127.0.0.1:5555,tcp://127.0.0.1:5556 --probe-ms 0", &out), 2);
  EXPECT_NE(out.find("--probe-ms"), std::string::npos) << out;
  EXPECT_EQ(run("--curve-secret /no/such/key", &out), 2);
  EXPECT_NE(out.find("--curve-secret: "), std::string::npos) << out;
  daemon::testing::TempDir dir;
  daemon::testing::make_key(dir.path(), "r", {}, "", "");
  ::unsetenv("FLOWTUNE_CURVE_SERVER");
  EXPECT_EQ(run("--curve-secret " + dir.path() + "/r.key", &out), 2);
  EXPECT_NE(out.find("give --curve-server too"), std::string::npos) << out;
  // An allow-list judges CURVE keys: without --curve-secret it is refused,
  // and one that does not load stops the relay with the file named.
  EXPECT_EQ(run("--curve-clients " + dir.path(), &out), 2);
  EXPECT_NE(out.find("--curve-clients: an allow-list judges CURVE keys"), std::string::npos) << out;
  EXPECT_EQ(run("--curve-ctl " + dir.path(), &out), 2);
  EXPECT_NE(out.find("--curve-ctl: an allow-list judges CURVE keys"), std::string::npos) << out;
  const std::string list = dir.path() + "/list";
  std::filesystem::create_directory(list);
  daemon::testing::write_file(list + "/bad.pub", "public-key = \"short\"\n");
  const curve::KeyPair server = curve::generate();
  EXPECT_EQ(run("--curve-server '" + server.public_key + "' --curve-key " + dir.path() + "/r.key --curve-secret " +
                    dir.path() + "/r.key --curve-clients " + list,
                &out),
            2);
  EXPECT_NE(out.find("bad.pub"), std::string::npos) << out;
  EXPECT_EQ(run("--curve-server '" + server.public_key + "' --curve-key " + dir.path() + "/r.key --curve-secret " +
                    dir.path() + "/r.key --curve-clients /no/such/dir",
                &out),
            2);
  EXPECT_NE(out.find("/no/such/dir: cannot open the key directory"), std::string::npos) << out;
}

// A stand-in for one allocator of a pair: a ROUTER that answers the relay's
// role probes with `answer` (none while empty) and keeps the batches it gets.
struct FakeUpstream {
  explicit FakeUpstream(zmq::context_t& ctx) : sock(ctx, zmq::socket_type::router) {
    sock.set(zmq::sockopt::linger, 0);
    sock.bind("tcp://127.0.0.1:0");
    endpoint = sock.get(zmq::sockopt::last_endpoint);
  }
  void serve(const std::string& answer) {
    std::vector<zmq::message_t> f;
    while (zmq::recv_multipart(sock, std::back_inserter(f), zmq::recv_flags::dontwait)) {
      if (f.size() == 3 && f[1].to_string_view() == daemon::kControlTag) {
        ++probes;
        if (!answer.empty()) {
          sock.send(f[0], zmq::send_flags::sndmore);
          sock.send(zmq::buffer(std::string_view(daemon::kControlTag)), zmq::send_flags::sndmore);
          sock.send(zmq::buffer(answer), zmq::send_flags::none);
        }
      } else if (f.size() >= 2 && f[1].to_string_view() == wire::kRelayTag) {
        ++batches;
      }
      f.clear();
    }
  }
  zmq::socket_t sock;
  std::string endpoint;
  int probes = 0, batches = 0;
};

// Over a pair, what endpoints say before either upstream has answered a
// probe waits for the active one: the first-listed may be the standby, which
// would turn them away.
TEST(RelayPair, TheFirstBatchWaitsForAnActiveAnswer) {
  zmq::context_t ctx(1);
  FakeUpstream standby(ctx), active(ctx);
  const std::string relay_ep = unique_endpoint();
  RelayProcess relay;
  relay.start(relay_ep, standby.endpoint + "," + active.endpoint, {"--probe-ms", "20"});
  zmq::socket_t ep(ctx, zmq::socket_type::dealer);
  ep.set(zmq::sockopt::linger, 0);
  ep.connect(relay_ep);
  ep.send(zmq::buffer(std::string_view("an endpoint's frame")), zmq::send_flags::none);
  // The standby answers at once; the active one stays silent for 300 ms.
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < std::chrono::milliseconds(300)) {
    standby.serve(wire::role_answer(wire::PairRole::kStandby, 0, 5));
    active.serve("");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_GT(standby.probes, 3);
  EXPECT_GT(active.probes, 3);
  EXPECT_EQ(standby.batches, 0) << "the batch went to an upstream that never said it was active";
  EXPECT_EQ(active.batches, 0);
  EXPECT_TRUE(eventually([&] {
    standby.serve(wire::role_answer(wire::PairRole::kStandby, 0, 5));
    active.serve(wire::role_answer(wire::PairRole::kActive, 1, 7));
    return active.batches == 1;
  }, 2000));
  EXPECT_EQ(standby.batches, 0);
  // A rate limit is not a change of role: the relay stays where it is, and
  // what comes next goes there too.
  ep.send(zmq::buffer(std::string_view("the next frame")), zmq::send_flags::none);
  EXPECT_TRUE(eventually([&] {
    standby.serve(wire::role_answer(wire::PairRole::kStandby, 0, 5));
    active.serve(R"({"error":"too many role probes; try again shortly","retry_ms":10})");
    return active.batches == 2;
  }, 2000));
  EXPECT_EQ(standby.batches, 0);
  EXPECT_EQ(relay.status().value()["counters"]["upstream_switches"], 1);
}

// Relays carry the address quotas of every endpoint behind them: over TCP
// only the addresses the operator named may send batches.
TEST(RelayTrust, BatchesFromAnAddressNotInRelayFromAreRefused) {
  for (const bool allowed : {false, true}) {
    DaemonProcess d;
    std::vector<std::string> args = {"--host-gbps", "0.1"};
    if (allowed) args.insert(args.end(), {"--relay-from", "10.0.0.0/8,127.0.0.1"});
    const std::string alloc_ep = d.start_on_tcp(args);
    ASSERT_FALSE(alloc_ep.empty());
    const std::string relay_ep = unique_endpoint();
    RelayProcess relay;
    relay.start(relay_ep, alloc_ep);
    ft_client* c = open_client(relay_ep);
    ASSERT_NE(c, nullptr);
    Conn k;
    ASSERT_EQ(ft_socket_register(c, k.send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, k.send_fd, 1ull << 30, nullptr), FT_OK);
    const bool rated = eventually([&] { return rate(c, k.send_fd) > 0; }, allowed ? 5000 : 1000);
    EXPECT_EQ(rated, allowed) << d.log();
    const auto st = d.status();
    EXPECT_EQ(st["endpoints"], allowed ? 1 : 0);
    if (!allowed) {
      EXPECT_GE(st["counters"]["errors"]["not_authorized"].get<int>(), 1) << st;
      EXPECT_NE(d.log().find("not in --relay-from"), std::string::npos) << d.log();
    }
    ft_socket_unregister(c, k.send_fd);
    ft_client_close(c);
  }
}

// A direct connection whose chosen routing id looks like a relayed
// endpoint's key is not taken for that endpoint: dropped unanswered.
TEST(RelayTrust, ARoutingIdShapedLikeARelayedPeerIsDropped) {
  const std::string ep = unique_endpoint();
  DaemonProcess d;
  d.start(ep, {"--host-gbps", "0.1"});
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  const std::string id = wire::relayed_peer(std::string("\0abcd", 5), wire::route_push("ep", {}));
  s.set(zmq::sockopt::routing_id, zmq::buffer(id));
  s.connect(ep);
  wire::EndpointMessage m;
  m.events.emplace_back(wire::Hello{"spoof", "h1"});
  const auto bytes = wire::encode(m);
  s.send(zmq::buffer(bytes), zmq::send_flags::none);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(500));
  EXPECT_EQ(item.revents & ZMQ_POLLIN, 0) << "answered";
  const auto st = d.status();
  EXPECT_EQ(st["endpoints"], 0);
  EXPECT_GE(st["counters"]["errors"]["not_authorized"].get<int>(), 1) << st;
}

}  // namespace
}  // namespace flowtune::relay
