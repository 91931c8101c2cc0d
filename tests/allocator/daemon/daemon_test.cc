// Loopback integration tests: the real flowtune-allocator process, real
// ZeroMQ clients, and flowtune-ctl. Rates are checked against closed forms
// on a big switch of 1 Gbit/s hosts (n equal flows into one host get
// (1 - threshold) * 1 Gbit/s / n each).
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon_harness.h"

namespace flowtune::daemon::testing {
namespace {

using nlohmann::json;

constexpr double kLinkBytes = 1e9 / 8;
constexpr int kWaitMs = 3000;

double share(double n, double threshold = 0.01) { return kLinkBytes * (1 - threshold) / n; }

std::vector<std::string> big_switch_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"--hosts", "8", "--host-gbps", "1", "--log-level", "debug"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

class DaemonTest : public ::testing::Test {
 protected:
  std::string listen_ = unique_endpoint();
  DaemonProcess daemon_;
};

TEST_F(DaemonTest, StartEndAndRateUpdatesRoundTrip) {
  daemon_.start(listen_, big_switch_args());
  Endpoint a(listen_), b(listen_);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 2)});
  ASSERT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs))
      << daemon_.log();
  // A second flow into h2 halves both.
  b.send({wire::Hello{"ep-b", "h1"}, host_flow(9, 1, 2)});
  EXPECT_TRUE(b.wait_for_rate(9, [](auto r) { return near(r, share(2)); }, kWaitMs));
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(2)); }, kWaitMs));
  // b's end gives a the whole link again.
  b.send({wire::FlowletEnd{9}});
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs));
  const json s = daemon_.status();
  EXPECT_EQ(s["flows"], 1);
  EXPECT_EQ(s["endpoints"], 2);
  EXPECT_EQ(s["counters"]["starts"], 2);
  EXPECT_EQ(s["counters"]["ends"], 1);
  EXPECT_EQ(daemon_.stop(), 0);
  EXPECT_NE(daemon_.log().find("stopping on SIGTERM"), std::string::npos) << daemon_.log();
}

TEST_F(DaemonTest, WorksOverTcpToo) {
  const std::string ep = daemon_.start_on_tcp(big_switch_args());
  ASSERT_FALSE(ep.empty());
  Endpoint a(ep);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 1)});
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs));
}

TEST_F(DaemonTest, TomlTopologyMapsAddressesToHostsAndPaths) {
  // examples/topologies/explicit.toml: a->b crosses core1 and core2, c->d
  // core2 only (1 Gbit/s each); pairs without a route are unreachable.
  daemon_.start(listen_, {"--topology", std::string(FT_SOURCE_DIR) +
                                            "/examples/topologies/explicit.toml"});
  Endpoint a(listen_), c(listen_);
  auto tuple_flow = [](std::uint64_t key, std::uint32_t src, std::uint32_t dst) {
    wire::FlowletStart s;
    s.flow_key = key;
    s.endpoints = wire::FiveTuple{src, dst, 40000, 5201, 6};
    return s;
  };
  a.send({wire::Hello{"ep-a", "a"}, tuple_flow(1, 0x0a000001, 0x0a000002)});
  c.send({wire::Hello{"ep-c", "10.0.0.3"}, tuple_flow(1, 0x0a000003, 0x0a000004)});
  // core2 is shared: half of its scheduled 0.99 Gbit/s each.
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(2)); }, kWaitMs));
  EXPECT_TRUE(c.wait_for_rate(1, [](auto r) { return near(r, share(2)); }, kWaitMs));
  // An address outside the topology, and a pair without a route, are refused.
  a.send({tuple_flow(2, 0x0a000001, 0x0a000009), tuple_flow(3, 0x0a000001, 0x0a000004)});
  std::vector<wire::ErrorReport> errors;
  a.wait_for([&](const wire::AllocatorMessage& m) {
    errors.insert(errors.end(), m.errors.begin(), m.errors.end());
    return errors.size() >= 2;
  }, kWaitMs);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].code, wire::ErrorCode::kUnknownHost);
  EXPECT_NE(errors[0].text.find("10.0.0.9"), std::string::npos) << errors[0].text;
  EXPECT_NE(errors[1].text.find("no route from a to d"), std::string::npos) << errors[1].text;
  // An unknown host identity is refused with the topology's default policy.
  Endpoint x(listen_);
  x.send({wire::Hello{"ep-x", "elsewhere"}});
  EXPECT_TRUE(x.wait_for([](const wire::AllocatorMessage& m) {
    return !m.errors.empty() && m.errors[0].code == wire::ErrorCode::kUnknownHost;
  }, kWaitMs));
}

TEST_F(DaemonTest, MovesUnderTheThresholdAreNotSent) {
  daemon_.start(listen_, big_switch_args({"--threshold", "0.05"}));
  Endpoint a(listen_);
  std::vector<wire::EndpointEvent> ev{wire::Hello{"ep-a", "h0"}};
  for (std::uint32_t k = 0; k < 30; ++k) ev.push_back(host_flow(100 + k, 0, 1 + k % 7));
  a.send(ev);
  ASSERT_TRUE(a.wait_for_rate(129, [](auto r) { return near(r, share(30, 0.05), 0.05); }, kWaitMs));
  // Let the allocator settle, then add a 31st flow: every share moves 3.2%.
  ASSERT_TRUE(a.wait_for([](auto&) { return false; }, 200) || true);
  a.clear_history();
  a.send({host_flow(30, 0, 1)});
  ASSERT_TRUE(a.wait_for_rate(30, [](auto r) { return r > 0; }, kWaitMs));
  a.wait_for([](auto&) { return false; }, 300);  // whatever else would come
  for (const auto& m : a.history()) {
    for (const auto& r : m.rates) EXPECT_EQ(r.flow_key, 30u) << "an update under the threshold";
  }
}

// The coflow policy, its share and its aging are what status says.
TEST_F(DaemonTest, StatusShowsTheCoflowPolicyAndItsGuards) {
  daemon_.start(listen_, big_switch_args({"--coflow-policy", "sebf", "--coflow-share", "1",
                                          "--coflow-aging-s", "30"}));
  const json c = daemon_.status()["config"];
  EXPECT_EQ(c["coflow_policy"], "sebf");
  EXPECT_EQ(c["coflow_share"], 1.0);
  EXPECT_EQ(c["coflow_aging_s"], 30.0);
  DaemonProcess d;
  const std::string listen = unique_endpoint();
  d.start(listen, big_switch_args());
  const json off = d.status()["config"];
  EXPECT_EQ(off["coflow_policy"], "none");
  EXPECT_EQ(off["coflow_aging_s"], 0.0);
}

// The daemon answers a start before its iteration (--early-rates on, the
// default) and says so in status; off, only iterations rate starts.
TEST_F(DaemonTest, StartsAreToldEarlyRatesUnlessTurnedOff) {
  for (const char* mode : {"on", "off"}) {
    SCOPED_TRACE(mode);
    DaemonProcess d;
    const std::string listen = unique_endpoint();
    d.start(listen, big_switch_args({"--early-rates", mode}));
    Endpoint a(listen);
    a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 2)});
    ASSERT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs)) << d.log();
    a.send({host_flow(2, 0, 3)});
    ASSERT_TRUE(a.wait_for_rate(2, [](auto r) { return near(r, share(2), 0.05); }, kWaitMs));
    const json s = d.status();
    EXPECT_EQ(s["config"]["early_rates"], std::string(mode) == "on");
    if (std::string(mode) == "on") {
      EXPECT_EQ(s["counters"]["early_rates"], 2) << s["counters"];
      EXPECT_GE(s["counters"]["early_answer_ns"]["count"], 1);
    } else {
      EXPECT_EQ(s["counters"]["early_rates"], 0);
    }
  }
}

TEST_F(DaemonTest, SilentEndpointExpiresAndLeasesAreRefreshedForLiveOnes) {
  daemon_.start(listen_, big_switch_args({"--lease-ms", "100", "--lease-refresh-ms", "40",
                                          "--endpoint-timeout-ms", "300"}));
  Endpoint a(listen_), b(listen_);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 2)});
  b.send({wire::Hello{"ep-b", "h1"}, host_flow(1, 1, 2)});
  ASSERT_TRUE(b.wait_for_rate(1, [](auto r) { return near(r, share(2)); }, kWaitMs));
  // b heartbeats, a falls silent: within the timeout b gets the whole link.
  bool refreshed = false;
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && !(b.rate(1) && near(*b.rate(1), share(1)))) {
    b.send({wire::Heartbeat{}});
    b.wait_for([&](const wire::AllocatorMessage& m) {
      refreshed = refreshed || m.lease_refresh_us == 100'000;
      return false;
    }, 50);
  }
  EXPECT_TRUE(near(b.rate(1).value_or(0), share(1))) << daemon_.log();
  EXPECT_TRUE(refreshed) << "no lease refresh reached a live endpoint";
  const json s = daemon_.status();
  EXPECT_EQ(s["counters"]["endpoints_timed_out"], 1);
  EXPECT_EQ(s["counters"]["flows_expired"], 1);
  EXPECT_EQ(s["endpoints"], 1);
}

TEST_F(DaemonTest, AfterARestartTheEndpointLearnsTheNewEpochAndResyncs) {
  daemon_.start(listen_, big_switch_args());
  Endpoint a(listen_);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 2), host_flow(2, 0, 3)});
  ASSERT_TRUE(a.wait_for_rate(2, [](auto r) { return near(r, share(2)); }, kWaitMs));
  const std::uint64_t epoch1 = a.history().back().epoch;
  ASSERT_EQ(daemon_.stop(), 0);
  daemon_.start(listen_, big_switch_args());
  // The endpoint's socket reconnects by itself; its next message is refused
  // with the new epoch, which is its cue to send state, not history.
  std::uint64_t epoch2 = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && epoch2 == 0) {
    a.send({wire::Heartbeat{}});
    a.wait_for([&](const wire::AllocatorMessage& m) {
      if (!m.errors.empty() && m.errors[0].code == wire::ErrorCode::kNotRegistered) {
        epoch2 = m.epoch;
      }
      return epoch2 != 0;
    }, 100);
  }
  ASSERT_NE(epoch2, 0u) << daemon_.log();
  EXPECT_NE(epoch2, epoch1);
  a.send({wire::Hello{"ep-a", "h0"}, wire::Resync{{host_flow(1, 0, 2)}}});
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs));
  EXPECT_EQ(daemon_.status()["flows"], 1);
}

TEST_F(DaemonTest, MalformedFramesAreAnsweredAndDoNotDisturbOthers) {
  daemon_.start(listen_, big_switch_args());
  Endpoint bad(listen_), good(listen_);
  bad.send_raw({0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(bad.wait_for([](const wire::AllocatorMessage& m) {
    return !m.errors.empty() && m.errors[0].code == wire::ErrorCode::kMalformed;
  }, kWaitMs));
  bad.send_frames({"a", "b", "c"});
  bad.send_raw({});
  std::string big(wire::kMaxMessageBytes + 1, 'x');  // over the socket's size limit
  bad.send_frames({big});
  good.send({wire::Hello{"ep-g", "h0"}, host_flow(1, 0, 1)});
  EXPECT_TRUE(good.wait_for_rate(1, [](auto r) { return near(r, share(1)); }, kWaitMs));
  const json e = daemon_.status()["counters"]["errors"];
  EXPECT_EQ(e["malformed"], 1);
  EXPECT_EQ(e["bad_frames"], 1);
  EXPECT_EQ(e["truncated"], 1);
  EXPECT_NE(daemon_.log().find("refused (malformed)"), std::string::npos);
}

TEST_F(DaemonTest, IdleDaemonUsesNoCpu) {
  daemon_.start(listen_, big_switch_args());
  Endpoint a(listen_);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 1)});
  ASSERT_TRUE(a.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs));
  auto cpu_ticks = [&] {
    std::ifstream f("/proc/" + std::to_string(daemon_.pid()) + "/stat");
    std::string tok;
    std::uint64_t t = 0;
    for (int i = 1; i <= 15 && f >> tok; ++i) {
      if (i == 14 || i == 15) t += std::stoull(tok);  // utime + stime
    }
    return t;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let it converge
  const std::uint64_t before = cpu_ticks();
  // One live flow with lease refreshes due, and still: 1 s of wall time.
  a.wait_for([](auto&) { return false; }, 1000);
  const std::uint64_t used = cpu_ticks() - before;
  const long hz = ::sysconf(_SC_CLK_TCK);
  EXPECT_LE(static_cast<double>(used) / static_cast<double>(hz), 0.03)
      << "the daemon burned CPU while idle";
}

// ---- command lines ----

CmdResult run(const std::string& cmd) { return run_command(cmd); }

// The running daemon re-reads --policy on SIGHUP: live flows take the new
// tenant weights, none is dropped; a file that does not load is refused with
// its reason in the log and the old policy stays.
TEST_F(DaemonTest, SighupReloadsThePolicyWithoutDroppingFlows) {
  const std::string path = "/tmp/ft-test-policy-" + std::to_string(::getpid()) + ".toml";
  const auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write("[tenants.a]\nweight = 1\n[tenants.b]\nweight = 1\n");
  daemon_.start(listen_, big_switch_args({"--policy", path}));
  Endpoint a(listen_), b(listen_);
  wire::FlowletStart fa = host_flow(1, 0, 2);
  fa.tenant = "a";
  a.send({wire::Hello{"ep-a", "h0"}, fa});
  std::vector<wire::EndpointEvent> bs = {wire::Hello{"ep-b", "h1"}};
  for (std::uint64_t k = 1; k <= 4; ++k) {
    wire::FlowletStart f = host_flow(10 + k, 1, 2);
    f.tenant = "b";
    bs.push_back(f);
  }
  b.send(bs);
  // Equal tenants: a's one flow gets half of h2's link, b's four the rest.
  ASSERT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(2)); }, kWaitMs)) << daemon_.log();

  write("[tenants.a]\nweight = 1\n[tenants.b]\nweight = 3\n");
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  EXPECT_TRUE(a.wait_for_rate(1, [](auto r) { return near(r, share(4)); }, kWaitMs)) << daemon_.log();
  json s = daemon_.status();
  EXPECT_EQ(s["flows"], 5);
  EXPECT_EQ(s["endpoints"], 2);
  EXPECT_EQ(s["policy"]["tenants"]["b"]["weight"], 3);
  EXPECT_NE(daemon_.log().find("SIGHUP: policy re-read"), std::string::npos) << daemon_.log();

  write("[tenants.b]\nweight = -1\n");
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  bool refused = false;
  for (int i = 0; i < kWaitMs / 10 && !refused; ++i) {
    refused = daemon_.log().find("SIGHUP: policy refused") != std::string::npos;
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(refused) << daemon_.log();
  EXPECT_NE(daemon_.log().find(path), std::string::npos) << "the refusal names the file";
  s = daemon_.status();
  EXPECT_EQ(s["flows"], 5);
  EXPECT_EQ(s["policy"]["tenants"]["b"]["weight"], 3);
  EXPECT_EQ(daemon_.stop(), 0);
  std::remove(path.c_str());
}

// flowtune-ctl keygen: a secret file only its owner reads and a public one,
// never over existing files (neither is left when one cannot be made),
// names checked; the pair it makes serves as the allocator's key and as a
// flowtune-ctl key.
TEST(CtlKeygen, WritesAPrivatePairOnceAndItsKeysServe) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "CURVE under ThreadSanitizer: libzmq and libsodium are not instrumented";
#endif
  const std::string ctl = FT_CTL_BINARY;
  TempDir dir;
  const std::string d = dir.path();
  const auto read = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const auto mode = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
  };
  CmdResult r = run(ctl + " keygen h0 --hosts h0,10.0.0.7 --out " + d);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(mode(d + "/h0.key"), 0600);
  EXPECT_EQ(mode(d + "/h0.pub"), 0644);
  const std::string secret = read(d + "/h0.key"), pub = read(d + "/h0.pub");
  const std::size_t at = pub.find("public-key = \"");
  ASSERT_NE(at, std::string::npos) << pub;
  const std::string public_key = pub.substr(at + 14, 40);
  EXPECT_NE(secret.find("public-key = \"" + public_key + "\""), std::string::npos) << secret;
  EXPECT_NE(secret.find("secret-key = \""), std::string::npos);
  EXPECT_EQ(secret.find("hosts"), std::string::npos);
  EXPECT_NE(pub.find("hosts = [\"h0\", \"10.0.0.7\"]"), std::string::npos) << pub;
  EXPECT_EQ(pub.find("secret"), std::string::npos) << pub;
  // Again: refused, the files as they were.
  r = run(ctl + " keygen h0 --out " + d);
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("h0.key: File exists"), std::string::npos) << r.output;
  EXPECT_EQ(read(d + "/h0.key"), secret);
  EXPECT_EQ(read(d + "/h0.pub"), pub);
  // Only the public file is there: refused, and no secret is left behind.
  { std::ofstream(d + "/h1.pub") << "keep\n"; }
  r = run(ctl + " keygen h1 --out " + d);
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_FALSE(std::filesystem::exists(d + "/h1.key"));
  EXPECT_EQ(read(d + "/h1.pub"), "keep\n");
  r = run(ctl + " keygen x --out " + d + "/no-such-dir");
  EXPECT_EQ(r.status, 3) << r.output;
  for (const char* bad : {"keygen", "keygen .hidden", "keygen a/b", "keygen 'a b'", "keygen x --hosts 'a\"b'"}) {
    r = run(ctl + " " + bad + " --out " + d);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.output;
  }
  r = run(ctl + " keygen " + std::string(201, 'k') + " --out " + d);
  EXPECT_EQ(r.status, 2) << r.output;
  // The allocator's pair and an operator's, both from keygen: the operator
  // reads status; without its key no reply comes.
  std::filesystem::create_directory(d + "/ctl");
  std::filesystem::create_directory(d + "/clients");
  ASSERT_EQ(run(ctl + " keygen allocator --out " + d).status, 0);
  ASSERT_EQ(run(ctl + " keygen ops --out " + d + "/ctl").status, 0);
  const std::string listen = unique_endpoint();
  const auto ops_curve = curve::client_keys(d + "/allocator.pub", d + "/ctl/ops.key");
  ASSERT_TRUE(ops_curve.ok()) << ops_curve.error().message;
  ASSERT_TRUE(ops_curve->on);
  const curve::ClientKeys& ops = ops_curve->keys;
  DaemonProcess daemon;
  daemon.set_control_keys(ops);  // how the harness sees it come up
  daemon.start(listen, {"--hosts", "4", "--curve-secret", d + "/allocator.key", "--curve-clients",
                        d + "/clients", "--curve-ctl", d + "/ctl"});
  r = run(ctl + " --allocator " + listen + " --curve-server " + d + "/allocator.pub --curve-key " + d +
          "/ctl/ops.key --json status");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(json::parse(r.output)["auth"]["mode"], "curve");
  r = run(ctl + " --allocator " + listen + " --curve-server " + d + "/allocator.pub --curve-key " + d +
          "/h0.key --timeout-ms 300 status");
  EXPECT_NE(r.status, 0) << r.output;  // an endpoint's key in no list
  r = run(ctl + " --allocator " + listen + " --timeout-ms 300 status");
  EXPECT_EQ(r.status, 1) << r.output;  // no CURVE: no reply at all
}

TEST(AllocatorCli, HelpAndConfigErrors) {
  const std::string bin = FT_ALLOCATOR_BINARY;
  CmdResult r = run(bin + " --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("--threshold"), std::string::npos);
  r = run(bin + " --threads");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("missing value"), std::string::npos) << r.output;
  r = run(bin + " --schedule sometimes");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--schedule expects persistent, team or tbb"), std::string::npos)
      << r.output;
  for (const char* schedule : {"persistent", "team", "tbb"}) {
    r = run(bin + " --hosts 4 --threads 2 --schedule " + schedule + " --check-config");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("2 thread(s) (") + schedule + ")"), std::string::npos)
        << r.output;
  }
  r = run(bin + " --norm sometimes");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--norm expects"), std::string::npos) << r.output;
  r = run(bin + " --topology /nonexistent.toml");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("/nonexistent.toml"), std::string::npos) << r.output;
  r = run(bin + " --threshold 0.9 --check-config");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("threshold"), std::string::npos) << r.output;
  r = run(bin + " --listen bogus://x --hosts 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("cannot listen on bogus://x"), std::string::npos) << r.output;
  // Values that used to be taken and misread (issue 17's list): a port past
  // 65535 (libzmq kept its low 16 bits), hexadecimal, a divergent step, an
  // interval that overflowed its conversion, a device for a topology.
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--listen tcp://127.0.0.1:99999", "port '99999' is not 0-65535"},
           {"--listen tcp://127.0.0.1", "names no port"},
           {"--host-gbps 0x10", "--host-gbps expects a number, got '0x10'"},
           {"--gamma 1e9", "--gamma expects a number from 0 to 1"},
           {"--gamma 0", "gamma must be within (0, 1]"},
           {"--log-interval-s 1e300", "--log-interval-s expects a number from 0 to 86400"},
           {"--topology /dev/zero", "/dev/zero: not a regular file"},
           {"--coflow-aging-s -1", "coflow aging must be within [0, 1e9) seconds"},
           {"--mpi-exchange neighbors", "--mpi-exchange needs --mpi"},
           {"--mpi-gather-threshold 0.01", "--mpi-gather-threshold needs --mpi"},
           {"--mpi --mpi-gather-threshold 0.9", "--mpi-gather-threshold expects a number from 0 to 0.5"},
           {"--mpi --mpi-exchange ring", "--mpi-exchange expects link-owners, neighbors, allreduce or diagonal"},
           {"--coflow-aging-s 1e9", "coflow aging must be within [0, 1e9) seconds"}}) {
    r = run(bin + " --hosts 4 " + args + " --check-config");
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << ": " << r.output;
  }
  // flowtune-ctl: the endpoint from the flag or the environment alike.
  const std::string ctl = FT_CTL_BINARY;
  r = run("FLOWTUNE_ALLOCATOR=tcp://127.0.0.1:99999 " + ctl + " status");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("port '99999' is not 0-65535"), std::string::npos) << r.output;
  r = run(ctl + " --watch 1e300 status");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--watch expects a number from 0.001 to 86400"), std::string::npos)
      << r.output;
  r = run(bin + " --hosts 4 --listen tcp://127.0.0.1:65535 --gamma 1 --check-config");
  EXPECT_EQ(r.status, 0) << r.output;
  r = run(bin + " --hosts 4 --check-config");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("configuration ok"), std::string::npos);
  r = run(bin + " --hosts 4 --coflow-policy sebf --coflow-aging-s 30 --check-config");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("coflows: sebf, share 0.700000, aging 30.000000 s"), std::string::npos)
      << r.output;
}

TEST_F(DaemonTest, CtlShowsFlowsLinksAndCounters) {
  daemon_.start(listen_, big_switch_args());
  Endpoint a(listen_);
  a.send({wire::Hello{"ep-a", "h0"}, host_flow(1, 0, 2), host_flow(2, 0, 3)});
  ASSERT_TRUE(a.wait_for_rate(2, [](auto r) { return near(r, share(2)); }, kWaitMs));
  const std::string ctl = std::string(FT_CTL_BINARY) + " --allocator " + listen_;
  CmdResult r = run(ctl + " --json flows");
  ASSERT_EQ(r.status, 0) << r.output;
  const json flows = json::parse(r.output);
  ASSERT_EQ(flows["flows"].size(), 2u);
  EXPECT_EQ(flows["flows"][0]["src"], "h0");
  EXPECT_EQ(flows["flows"][0]["path"].size(), 2u);
  EXPECT_EQ(flows["flows"][0]["holders"], 1);
  r = run(ctl + " --json links");
  ASSERT_EQ(r.status, 0) << r.output;
  const json links = json::parse(r.output);
  ASSERT_EQ(links.size(), 3u);  // h0 up, h2 down, h3 down
  for (const json& l : links) {
    EXPECT_LE(l["utilization"].get<double>(), 1.0);
    if (l["flows"] == 2) {
      EXPECT_NEAR(l["utilization"].get<double>(), 0.99, 0.01);
    }
  }
  r = run(ctl);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("2 flows"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MiB in use"), std::string::npos) << r.output;
  r = run(ctl + " endpoints");
  EXPECT_NE(r.output.find("ep-a"), std::string::npos) << r.output;
  r = run(ctl + " --json tenants");
  ASSERT_EQ(r.status, 0) << r.output;
  const json tenants = json::parse(r.output);
  EXPECT_TRUE(tenants["tenants"].empty()) << tenants;
  EXPECT_EQ(tenants["no_tenant"]["flows"], 2) << tenants;
  r = run(ctl + " tenants");
  EXPECT_NE(r.output.find("(none)"), std::string::npos) << r.output;
  // A peer's tenant name reaches the terminal without its control
  // characters (an escape sequence shown as '?'), cut at a character.
  wire::FlowletStart odd = host_flow(3, 0, 2);
  odd.tenant = "\x1b[2J\xc3\xa9" + std::string(30, 'x');
  a.send({odd});
  ASSERT_TRUE(a.wait_for_rate(3, [](auto r) { return r > 0; }, kWaitMs));
  r = run(ctl + " tenants");
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("?[2J\xc3\xa9xxxxxxxxxxxxxxxxx~"), std::string::npos) << r.output;
  r = run(ctl + " status");
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(none): 2 flows"), std::string::npos) << r.output;
  r = run(ctl + " nonsense");
  EXPECT_EQ(r.status, 2);
  r = run(std::string(FT_CTL_BINARY) + " --allocator " + unique_endpoint() + " --timeout-ms 100");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no reply"), std::string::npos) << r.output;
}

// Role probes have a bucket of their own: a flood of them is answered, then
// refused with a retry (which a prober reads as life), and flowtune-ctl's
// own requests still get through.
TEST_F(DaemonTest, ARoleProbeFloodIsRateLimitedApartFromCtl) {
  // A limit the probes outrun however fast the daemon is (a sanitizer
  // build answered 30,000 in 1.7 s: under the default's refill).
  daemon_.start(listen_, big_switch_args({"--role-probes-per-sec", "1000"}));
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.connect(listen_);
  constexpr int kProbes = 30'000;  // 30 s worth at the refill rate, sent in far less
  for (int i = 0; i < kProbes; ++i) {
    s.send(zmq::buffer(std::string_view(kControlTag)), zmq::send_flags::sndmore);
    s.send(zmq::buffer(std::string_view("role")), zmq::send_flags::none);
  }
  int roles = 0, refused = 0;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  while (roles + refused < kProbes && zmq::poll(&item, 1, std::chrono::milliseconds(kWaitMs)) > 0) {
    zmq::message_t tag, body;
    ASSERT_TRUE(s.recv(tag));
    ASSERT_TRUE(tag.more());
    ASSERT_TRUE(s.recv(body));
    const json j = json::parse(body.to_string_view());
    if (j.contains("role")) ++roles;
    else if (j.contains("retry_ms")) ++refused;
  }
  EXPECT_EQ(roles + refused, kProbes) << "every probe gets an answer";
  EXPECT_GE(roles, 100) << "a burst of probes is answered";
  EXPECT_GE(refused, kProbes / 2) << "past the burst, probes are refused";
  const json st = daemon_.status();
  ASSERT_TRUE(st.contains("counters")) << "flowtune-ctl is not starved by the probes";
  EXPECT_EQ(st["counters"]["errors"]["rate_limited"].get<int>(), refused) << st;
}

// A flows reply is at most a page (500), however many are asked for, so no
// request stalls the loop for long (100,000 in one reply took 2.3 s);
// flowtune-ctl pages through them.
TEST_F(DaemonTest, FlowsComeInPagesAndCtlReadsThemAll) {
  // The endpoint sends nothing more: under a sanitizer the test outlasts
  // the default 3 s endpoint timeout.
  daemon_.start(listen_, big_switch_args({"--log-level", "warn", "--endpoint-timeout-ms", "600000"}));
  Endpoint a(listen_);
  std::vector<wire::EndpointEvent> events = {wire::Hello{"ep-a", "h0"}};
  constexpr std::uint64_t kFlows = 1300;
  for (std::uint64_t k = 1; k <= kFlows; ++k) events.push_back(host_flow(k, 0, static_cast<std::uint32_t>(1 + k % 7)));
  a.send(events);
  bool all_in = false;
  for (int i = 0; i < 400 && !all_in; ++i) {
    all_in = daemon_.status()["flows"] == kFlows;
    if (!all_in) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(all_in) << daemon_.status().dump();
  const json page = daemon_.control("flows 100000").value();
  EXPECT_EQ(page["flows"].size(), 500u);
  EXPECT_EQ(page["total"], kFlows);
  ASSERT_TRUE(page["next"].is_number());
  // The next page starts where the first ended; the last says there is no more.
  std::set<std::uint64_t> keys;
  for (const json& f : page["flows"]) keys.insert(f["key"].get<std::uint64_t>());
  json rest = daemon_.control("flows 1000 " + std::to_string(page["next"].get<std::uint64_t>())).value();
  EXPECT_EQ(rest["flows"].size(), 500u);
  for (const json& f : rest["flows"]) keys.insert(f["key"].get<std::uint64_t>());
  EXPECT_EQ(keys.size(), 1000u);  // no flow twice
  EXPECT_EQ(daemon_.control("flows 10 x").value()["error"], "bad limit or start in request");
  // flowtune-ctl: every flow, in pages.
  const std::string ctl = std::string(FT_CTL_BINARY) + " --allocator " + listen_;
  for (int i = 0; i < 3; ++i) {
    const CmdResult r = run(ctl + " --json --limit 100000 flows");
    ASSERT_EQ(r.status, 0) << r.output.substr(0, 500);
    const json all = json::parse(r.output);
    EXPECT_EQ(all["flows"].size(), kFlows);
    EXPECT_EQ(all["total"], kFlows);
  }
  const CmdResult some = run(ctl + " --json --limit 700 flows");
  EXPECT_EQ(json::parse(some.output)["flows"].size(), 700u);
}

// Each endpoint holds a connection, so the daemon raises its descriptor
// limit to the hard limit (the usual soft 1,024 would refuse endpoints long
// before --max-endpoints), and warns when even the hard limit is short.
TEST(DaemonLimits, TheDescriptorLimitIsRaisedToTheHardLimitAndAShortOneIsLogged) {
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  if (old.rlim_max == RLIM_INFINITY || old.rlim_max < 1024 || old.rlim_max > (1u << 23)) {
    GTEST_SKIP() << "hard descriptor limit " << old.rlim_max << ": outside what this test can check";
  }
  rlimit low = old;
  low.rlim_cur = 256;  // the daemon inherits it
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  DaemonProcess d;
  const bool up = d.try_start(unique_endpoint(), {"--max-endpoints", std::to_string(old.rlim_max + 1)});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(up) << d.log();
  std::ifstream limits("/proc/" + std::to_string(d.pid()) + "/limits");
  std::string line, soft;
  while (std::getline(limits, line)) {
    if (line.rfind("Max open files", 0) == 0) {
      std::istringstream words(line.substr(14));
      words >> soft;
    }
  }
  EXPECT_EQ(soft, std::to_string(old.rlim_max));
  EXPECT_NE(d.log().find("file descriptors (ulimit -n)"), std::string::npos) << d.log();
}

// Resident memory of a process, MB.
double rss_mb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return 0;
}

// After a connection storm (1,500 peers, each saying hello, then gone), the
// memory libzmq and the allocator freed goes back to the system: glibc would
// keep it (this storm left the previous daemon at its 49 MB peak), so the
// loop weighs what it holds free every 5 s and trims past 8 MiB.
TEST(DaemonMemory, WhatAConnectionStormFreedIsHandedBack) {
#ifdef FT_SANITIZED
  GTEST_SKIP() << "sanitizer build: the sanitizer's allocator, not glibc's, holds the daemon's heap";
#endif
  constexpr int kPeers = 1500;
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 4 * kPeers) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4 * kPeers);
    (void)::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < 4 * kPeers) GTEST_SKIP() << "needs " << 4 * kPeers << " descriptors (ulimit -n)";
  DaemonProcess d;
  const std::string ep = unique_endpoint();
  d.start(ep, {"--hosts", "8", "--host-gbps", "1", "--lease-ms", "300", "--lease-refresh-ms", "100",
               "--endpoint-timeout-ms", "1000"});
  ASSERT_GT(d.pid(), 0);
  const double idle = rss_mb(d.pid());
  double peak = 0;
  {
    zmq::context_t ctx(1);
    ctx.set(zmq::ctxopt::max_sockets, 4 * kPeers);
    std::vector<zmq::socket_t> peers;
    for (int i = 0; i < kPeers; ++i) {
      peers.emplace_back(ctx, zmq::socket_type::dealer);
      peers.back().set(zmq::sockopt::linger, 0);
      peers.back().connect(ep);
      wire::EndpointMessage hello;
      hello.events.emplace_back(wire::Hello{"storm-" + std::to_string(i), "h" + std::to_string(i % 8)});
      peers.back().send(zmq::buffer(wire::encode(hello)), zmq::send_flags::none);
    }
    const auto t0 = Clock::now();
    while (d.status()["endpoints"] != kPeers && Clock::now() - t0 < std::chrono::seconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(d.status()["endpoints"], kPeers) << d.log().substr(0, 3000);
    peak = rss_mb(d.pid());
  }
  ASSERT_GT(peak - idle, 16) << "the storm should cost the daemon memory: idle " << idle << " MB, peak "
                             << peak << " MB";
  // Gone: the endpoints time out (1 s), and within a memory check's period
  // (5 s) the memory is handed back.
  bool back = false;
  json s;
  for (int i = 0; i < 200 && !back; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = d.status();
    back = s["endpoints"] == 0 && s["counters"]["memory_trims"].get<int>() >= 1 &&
           rss_mb(d.pid()) - idle < (peak - idle) / 2;
  }
  ASSERT_TRUE(back) << "rss idle " << idle << " MB, peak " << peak << " MB, now " << rss_mb(d.pid())
                    << " MB; " << s["heap"].dump();
  // The ticks that timed them out are timed, each call of their scans.
  EXPECT_GE(s["counters"]["timer_ns"]["count"].get<int>(), 1);
  // One more check's period, for anything freed after the first trim; then
  // the counts to compare against.
  std::this_thread::sleep_for(std::chrono::milliseconds(6000));
  s = d.status();
  const int trims = s["counters"]["memory_trims"].get<int>();
  const int checks = s["counters"]["memory_check_ns"]["count"].get<int>();
  // Idle with nothing newly freed: the next checks weigh, but do not trim.
  std::this_thread::sleep_for(std::chrono::milliseconds(11000));
  const json later = d.status();
  EXPECT_GE(later["counters"]["memory_check_ns"]["count"].get<int>(), checks + 2);
  EXPECT_EQ(later["counters"]["memory_trims"].get<int>(), trims);
}

}  // namespace
}  // namespace flowtune::daemon::testing
