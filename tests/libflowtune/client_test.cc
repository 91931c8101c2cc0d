// libflowtune against a real flowtune-allocator over loopback, with real TCP
// sockets: rates reach the kernel (SO_MAX_PACING_RATE), links are shared as
// allocated, leases lapse when the allocator dies, state comes back after a
// restart, and the application's bytes always arrive intact.
//
// Loopback hosts: the sender binds 127.0.0.1 and the receiver listens on
// 127.0.0.2 (all of 127/8 is loopback), so the allocator (big switch, hosts
// added on first sight) sees two hosts and 100 Mbit/s links.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "../allocator/daemon/daemon_harness.h"
#include "../sanitizers.h"
#include "client_harness.h"
#include "flowtune/flowtune.h"
#include "flowtune/flowtune.hpp"

namespace flowtune::client {
namespace {

using daemon::testing::Clock;
using daemon::testing::DaemonProcess;
using daemon::testing::unique_endpoint;

constexpr double kLinkBytes = 0.1e9 / 8 * 0.99;  // scheduled 100 Mbit/s host link

// ft_flowlet_opts as the first version of flowtune.h declared it (no
// struct_size): binaries built then still pass this.
struct LegacyOpts {
  float weight;
  std::uint64_t coflow_id;
};

// A flowlet of `bytes` on a new connection, sent by a client the allocator
// never rates: it must arrive whole and unpaced.
void expect_unpaced_and_intact(ft_client* c, std::uint64_t bytes) {
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, bytes, nullptr), FT_OK);
  const std::uint64_t sum = t.send_all(bytes, c);
  t.finish();
  EXPECT_EQ(t.received(), bytes);
  EXPECT_EQ(t.checksum(), sum);
  EXPECT_EQ(rate(c, t.send_fd), 0u);
  EXPECT_EQ(ft_socket_unregister(c, t.send_fd), FT_OK);
}

class ClientTest : public ::testing::Test {
 protected:
  void start_allocator(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--host-gbps", "0.1", "--log-level", "debug"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_.start(listen_, args);
  }
  // Leases of 300 ms renewed every 100 ms: lapses show within a test's time.
  void start_with_short_leases(const char* endpoint_timeout_ms) {
    start_allocator({"--lease-ms", "300", "--lease-refresh-ms", "100", "--endpoint-timeout-ms",
                     endpoint_timeout_ms});
  }
  ft_client* open(std::uint32_t heartbeat_ms = 1000) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = listen_.c_str();
    cfg.host = nullptr;  // the first socket's local address: 127.0.0.1
    cfg.heartbeat_ms = heartbeat_ms;
    cfg.min_flowlet_bytes = 10000;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK);
    return c;
  }
  std::string listen_ = unique_endpoint();
  DaemonProcess daemon_;
};

TEST_F(ClientTest, FlowletsGetRatesTheKernelAppliesAndShareTheLink) {
  start_allocator();
  ft_client* c = open();
  Transfer a, b;
  ASSERT_EQ(ft_socket_register(c, a.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(c, b.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, a.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] { return near(rate(c, a.send_fd), kLinkBytes); }))
      << rate(c, a.send_fd) << "\n"
      << daemon_.log();
  // A second flowlet into the same host halves both.
  ASSERT_EQ(ft_flowlet_begin(c, b.send_fd, 100 << 20, nullptr), FT_OK);
  EXPECT_TRUE(eventually([&] {
    return near(rate(c, a.send_fd), kLinkBytes / 2) && near(rate(c, b.send_fd), kLinkBytes / 2);
  })) << rate(c, a.send_fd)
      << " " << rate(c, b.send_fd);
  // Ending one gives the other the link again, and removes the ended one's cap.
  ASSERT_EQ(ft_flowlet_end(c, b.send_fd), FT_OK);
  EXPECT_TRUE(eventually([&] { return near(rate(c, a.send_fd), kLinkBytes); }));
  EXPECT_EQ(rate(c, b.send_fd), 0u);
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c, &st), FT_OK);
  EXPECT_EQ(st.flowlets_started, 2u);
  EXPECT_EQ(st.connected, 1);
  EXPECT_GE(st.rates_applied, 3u);
  EXPECT_EQ(ft_socket_unregister(c, a.send_fd), FT_OK);
  EXPECT_EQ(ft_socket_unregister(c, b.send_fd), FT_OK);
  EXPECT_EQ(ft_client_close(c), FT_OK);
  // The allocator heard every end.
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }));
}

// Advance end: the end should leave about one control round trip before the
// socket's last byte does. Measured here against the kernel: the test polls
// the socket's unsent bytes (SIOCOUTQNSD) every 100 us and notes when they
// reach 0, and when the client's end count moves. Paced TCP drains in
// bursts of two segments (128 kB on loopback, 10 ms at this rate), which
// bounds how exactly the drain can be predicted.
TEST_F(ClientTest, PacedTransfersEndNearTheirLastByteAndDeliverEveryByte) {
  start_allocator();
  ft_client* c = open();
  std::vector<double> lead_ms;  // drain time - end time: > 0 means in advance
  for (int run = 0; run < 5; ++run) {
    Transfer t;
    ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
    constexpr std::uint64_t kBytes = 2 << 20;  // about 0.17 s at 12.4 MB/s
    ft_stats before{};
    ft_client_stats(c, &before);
    ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, kBytes, nullptr), FT_OK);
    ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) > 0; }));
    const auto t0 = Clock::now();
    const std::uint64_t sum = t.send_all(kBytes, c);
    Clock::time_point drained{}, ended{};
    while ((drained == Clock::time_point{} || ended == Clock::time_point{}) &&
           Clock::now() - t0 < std::chrono::seconds(3)) {
      int unsent = -1;
      ::ioctl(t.send_fd, SIOCOUTQNSD, &unsent);
      ft_stats st{};
      ft_client_stats(c, &st);
      const auto now = Clock::now();
      if (unsent == 0 && drained == Clock::time_point{}) drained = now;
      if (st.flowlets_ended > before.flowlets_ended && ended == Clock::time_point{}) ended = now;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    ASSERT_NE(drained, Clock::time_point{});
    ASSERT_NE(ended, Clock::time_point{});
    lead_ms.push_back(std::chrono::duration<double, std::milli>(drained - ended).count());
    const double secs = std::chrono::duration<double>(drained - t0).count();
    t.finish();
    EXPECT_EQ(t.received(), kBytes);
    EXPECT_EQ(t.checksum(), sum);
    // Pacing held the transfer to its rate, but for the first 10 segments,
    // which TCP never paces: 640 kB of the 2 MB at loopback's 64 kB MSS.
    EXPECT_GT(secs, 0.5 * static_cast<double>(kBytes) / kLinkBytes);
    ASSERT_EQ(ft_socket_unregister(c, t.send_fd), FT_OK);
  }
  for (double l : lead_ms) std::printf("advance end: %.2f ms before the last byte left\n", l);
#ifndef FT_SANITIZED
  // Never long after the drain (an idle timer would be 10s of ms late),
  // never more than about one burst early. The median is checked: on a
  // loaded 2-core machine (ctest -j with process-spawning suites beside it)
  // one run in a few can see the runtime's thread descheduled for longer
  // than the bound, which says nothing about the design. Sanitizer builds
  // run the runtime several times slower, so their timing is not checked.
  std::vector<double> sorted = lead_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  EXPECT_GT(median, -5.0);
  EXPECT_LT(median, 25.0);
#endif
  // Whether each end went out by prediction (ends_in_advance) or on seeing
  // the queue empty depends on the machine's timer jitter under load; the
  // bound above is what matters, and session_test checks the logic exactly.
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }));
  ft_client_close(c);
}

TEST_F(ClientTest, WhenTheAllocatorDiesCapsLapseAndBytesArriveIntact) {
  start_with_short_leases("1000");
  ft_client* c = open(100);
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  constexpr std::uint64_t kBytes = 8 << 20;
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, kBytes, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) > 0; }));
  std::uint64_t sum = 0;
  std::thread sender([&] { sum = t.send_all(kBytes, c); });
  // When: the allocator is killed mid-transfer.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(daemon_.pid(), SIGKILL);
  // Expect: within a lease the cap is gone (plain TCP again) ...
  EXPECT_TRUE(eventually([&] { return rate(c, t.send_fd) == 0; }, 1500));
  sender.join();
  t.finish();
  // ... and every byte arrived.
  EXPECT_EQ(t.received(), kBytes);
  EXPECT_EQ(t.checksum(), sum);
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

TEST_F(ClientTest, AfterAnAllocatorRestartTheClientResyncsItsFlowlets) {
  start_allocator();
  ft_client* c = open(100);
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) > 0; }));
  ASSERT_EQ(daemon_.stop(), 0);
  daemon_.start(listen_, {"--host-gbps", "0.05"});  // a new allocator, half the link
  EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes / 2); }, 5000))
      << rate(c, t.send_fd);
  EXPECT_EQ(daemon_.status()["flows"], 1);
  ft_stats st{};
  ft_client_stats(c, &st);
  EXPECT_GE(st.resyncs, 1u);
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

// The fault-injection probe of issue 12: a flowlet that lives through an
// allocator stall longer than its lease. Its cap lapses (fail-open), and must
// come back once the allocator runs again, although its rate did not move.
TEST_F(ClientTest, AfterAStallLongerThanTheLeaseTheCapComesBackWithinARoundTrip) {
  start_with_short_leases("5000");
  ft_client* c = open(100);
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  // Declared but not yet written: the flowlet lives as long as the test.
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 1ull << 30, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) > 0; }));
  const std::uint64_t before = rate(c, t.send_fd);
  // When: the allocator stops for 1 s (> the 300 ms lease), then runs again.
  ASSERT_EQ(::kill(daemon_.pid(), SIGSTOP), 0);
  EXPECT_TRUE(eventually([&] { return rate(c, t.send_fd) == 0; }, 1000));  // fail-open
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const auto woke = Clock::now();
  ASSERT_EQ(::kill(daemon_.pid(), SIGCONT), 0);
  // Expect: the same cap again, within a control round trip of waking
  // (bounded here by 200 ms for a loaded 2-vCPU machine).
  ASSERT_TRUE(eventually([&] { return rate(c, t.send_fd) > 0; }, 3000))
      << "the cap never came back";
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - woke).count();
  std::printf("stall recovery: cap back %lld us after SIGCONT\n", static_cast<long long>(us));
  RecordProperty("stall_recovery_us", std::to_string(us));
  EXPECT_LT(us, 200'000);
  EXPECT_EQ(rate(c, t.send_fd), before);
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

// Messages the allocator drops for its rate limit are repaired (resync with
// backoff), so every flowlet gets a rate and every end reaches it.
TEST_F(ClientTest, MessagesDroppedByTheRateLimitAreRepaired) {
  start_allocator({"--max-msg-rate", "10"});
  ft_client* c = open(200);
  std::vector<std::unique_ptr<Transfer>> ts;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(std::make_unique<Transfer>());
    ASSERT_EQ(ft_socket_register(c, ts.back()->send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, ts.back()->send_fd, 1ull << 30, nullptr), FT_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(eventually(
      [&] {
        for (const auto& t : ts) {
          if (rate(c, t->send_fd) == 0) return false;
        }
        return daemon_.status()["flows"] == 6;
      },
      8000));
  for (const auto& t : ts) EXPECT_GT(rate(c, t->send_fd), 0u);
  EXPECT_GT(daemon_.status()["counters"]["errors"]["rate_limited"].get<int>(), 0);
  for (const auto& t : ts) ASSERT_EQ(ft_flowlet_end(c, t->send_fd), FT_OK);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }, 8000))
      << daemon_.status()["flows"];
  for (const auto& t : ts) ft_socket_unregister(c, t->send_fd);
  ft_client_close(c);
}

// A host the allocator does not know: hellos back off exponentially instead
// of a storm, and the bytes still flow.
TEST_F(ClientTest, ARefusedHelloIsRetriedWithBackoff) {
  start_allocator({"--hosts", "2", "--unknown-hosts", "reject"});
  ft_config cfg;
  ft_config_init(&cfg);
  cfg.allocator = listen_.c_str();
  cfg.host = "no-such-host";
  cfg.log_level = 0;
  ft_client* c = nullptr;
  ASSERT_EQ(ft_client_open(&cfg, &c), FT_OK);
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 1 << 20, nullptr), FT_OK);
  const std::uint64_t sum = t.send_all(1 << 20, c);
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const int hellos = daemon_.status()["counters"]["hellos"].get<int>();
  std::printf("refused endpoint: %d hellos in 2 s\n", hellos);
  EXPECT_GE(hellos, 3);   // it does retry ...
  EXPECT_LE(hellos, 12);  // ... 10 ms doubling, not thousands
  t.finish();
  EXPECT_EQ(t.received(), 1u << 20);
  EXPECT_EQ(t.checksum(), sum);
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

TEST_F(ClientTest, WithoutAnAllocatorEverythingStillWorks) {
  // Nobody listens on listen_: the client connects in the background forever.
  ft_client* c = open();
  expect_unpaced_and_intact(c, 1 << 20);
  ft_stats st{};
  ft_client_stats(c, &st);
  EXPECT_EQ(st.connected, 0);
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(ClientTest, BadUseGetsErrorCodes) {
  ft_client* c = open();
  Transfer t;
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, nullptr), FT_ENOTREG);
  EXPECT_EQ(ft_flowlet_sent(c, t.send_fd, 100), FT_ENOTREG);
  EXPECT_EQ(ft_flowlet_end(c, 12345), FT_ENOTREG);
  EXPECT_EQ(ft_socket_unregister(c, t.send_fd), FT_ENOTREG);
  EXPECT_EQ(ft_socket_register(c, -1), FT_EBADF);
  EXPECT_EQ(ft_socket_register(c, 1 << 22), FT_EBADF);
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  ::close(closed);
  EXPECT_EQ(ft_socket_register(c, closed), FT_EBADF);
  const int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
  EXPECT_EQ(ft_socket_register(c, udp), FT_ENOTTCP);
  ::close(udp);
  const int unconnected = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(ft_socket_register(c, unconnected), FT_EBADF);
  ::close(unconnected);
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  EXPECT_EQ(ft_socket_register(c, t.send_fd), FT_EEXIST);
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 0, nullptr), FT_EINVAL);
  ft_flowlet_opts bad;
  ft_flowlet_opts_init(&bad);
  bad.weight = -1;
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, &bad), FT_EINVAL);
  ft_flowlet_opts_init(&bad);
  bad.priority_class = FT_NUM_CLASSES;
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, &bad), FT_EINVAL);
  EXPECT_EQ(ft_socket_register_opts(c, t.send_fd, &bad), FT_EINVAL);
  ft_flowlet_opts_init(&bad);
  bad.priority_class = -2;
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, &bad), FT_EINVAL);
  ft_flowlet_opts_init(&bad);
  const std::string long_tenant(300, 't');
  bad.tenant = long_tenant.c_str();
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, &bad), FT_EINVAL);
  ft_flowlet_opts_init(&bad);
  bad.struct_size = 8;  // too short to hold even the first version's fields
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, &bad), FT_EINVAL);
  const LegacyOpts legacy_bad{0.0f, 0};
  EXPECT_EQ(
      ft_flowlet_begin(c, t.send_fd, 100, reinterpret_cast<const ft_flowlet_opts*>(&legacy_bad)),
      FT_EINVAL);
  EXPECT_EQ(ft_flowlet_end(c, t.send_fd), FT_ENOFLOWLET);
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, nullptr), FT_OK);
  EXPECT_EQ(ft_flowlet_end(c, t.send_fd), FT_OK);
  EXPECT_EQ(ft_flowlet_end(c, t.send_fd), FT_ENOFLOWLET);
  EXPECT_EQ(ft_flowlet_begin(nullptr, t.send_fd, 100, nullptr), FT_EINVAL);
  EXPECT_EQ(ft_client_stats(c, nullptr), FT_EINVAL);
  EXPECT_EQ(ft_client_close(nullptr), FT_EINVAL);
  EXPECT_EQ(ft_client_open(nullptr, &c), FT_EINVAL);
  ft_config cfg;
  ft_config_init(&cfg);
  cfg.allocator = "not an endpoint";
  ft_client* bad_client = nullptr;
  EXPECT_EQ(ft_client_open(&cfg, &bad_client), FT_ECONNECT);
  for (int e = 0; e >= -10; --e) EXPECT_STRNE(ft_strerror(e), "unknown error") << e;
  EXPECT_EQ(ft_socket_unregister(c, t.send_fd), FT_OK);
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

// Options of every version reach the allocator: a socket's defaults (class
// 0, a tenant), a flowlet's own, and the first struct layout (weight 3).
TEST_F(ClientTest, ClassesWeightsAndTenantsReachTheAllocatorFromEveryOptionsVersion) {
  start_allocator();
  ft_client* c = open();
  Transfer urgent, heavy, light;
  ft_flowlet_opts first;
  ft_flowlet_opts_init(&first);
  first.priority_class = 0;
  first.tenant = "interactive";
  ASSERT_EQ(ft_socket_register_opts(c, urgent.send_fd, &first), FT_OK);
  ASSERT_EQ(ft_socket_register(c, heavy.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(c, light.send_fd), FT_OK);
  // Given: two default-class flowlets, weights 3 (old layout) and 1 (new).
  const LegacyOpts legacy{3.0f, 5};
  ASSERT_EQ(ft_flowlet_begin(c, heavy.send_fd, 100 << 20,
                             reinterpret_cast<const ft_flowlet_opts*>(&legacy)),
            FT_OK);
  ft_flowlet_opts own;
  ft_flowlet_opts_init(&own);
  own.tenant = "bulk";
  // Far enough away that its floor (what it needs: 100 MiB in an hour,
  // docs/policy.md) stays within the tolerance of the shares below.
  own.deadline_ms = 3'600'000;
  ASSERT_EQ(ft_flowlet_begin(c, light.send_fd, 100 << 20, &own), FT_OK);
  auto shares = [&](double heavy_share, double light_share) {
    return near(rate(c, heavy.send_fd), kLinkBytes * heavy_share, 0.05) &&
           near(rate(c, light.send_fd), kLinkBytes * light_share, 0.05);
  };
  EXPECT_TRUE(eventually([&] { return shares(0.75, 0.25); }))
      << rate(c, heavy.send_fd) << " " << rate(c, light.send_fd);
  // When: a flowlet begins on the class-0 socket with no options of its own.
  ASSERT_EQ(ft_flowlet_begin(c, urgent.send_fd, 100 << 20, nullptr), FT_OK);
  // Expect: it takes the link; the default class keeps only crumbs.
  EXPECT_TRUE(eventually([&] {
    return near(rate(c, urgent.send_fd), kLinkBytes, 0.05) &&
           static_cast<double>(rate(c, heavy.send_fd)) < kLinkBytes * 0.05 &&
           static_cast<double>(rate(c, light.send_fd)) < kLinkBytes * 0.05;
  })) << rate(c, urgent.send_fd)
      << " " << rate(c, heavy.send_fd) << " " << rate(c, light.send_fd);
  // The allocator holds each flow with what the endpoint asked.
  const nlohmann::json flows = daemon_.control("flows 10").value_or(nlohmann::json{});
  ASSERT_EQ(flows["flows"].size(), 3u) << flows.dump();
  for (const auto& f : flows["flows"]) {
    const double w = f["weight"].get<double>();
    if (f["class"] == 0) {
      EXPECT_EQ(f["tenant"], "interactive");
      EXPECT_EQ(w, 1.0);
    } else if (w == 3.0) {
      EXPECT_EQ(f["class"], 4);
      EXPECT_EQ(f["coflow"], 5);
      EXPECT_EQ(f["tenant"], "");
    } else {
      EXPECT_EQ(f["tenant"], "bulk");
      EXPECT_GT(f["deadline_left_ms"].get<double>(), 3'000'000);
      EXPECT_EQ(f["deadline_state"], "reserved");
      EXPECT_GT(f["floor_bps"].get<double>(), 0);
    }
  }
  const nlohmann::json policy = daemon_.status()["policy"];
  EXPECT_EQ(policy["classes"]["0"]["flows"], 1) << policy.dump();
  EXPECT_EQ(policy["classes"]["4"]["flows"], 2) << policy.dump();
  EXPECT_EQ(policy["tenants"]["bulk"]["flows"], 1) << policy.dump();
  // When it ends, the default class gets the link back, 3:1.
  ASSERT_EQ(ft_flowlet_end(c, urgent.send_fd), FT_OK);
  EXPECT_TRUE(eventually([&] { return shares(0.75, 0.25); }))
      << rate(c, heavy.send_fd) << " " << rate(c, light.send_fd);
  ASSERT_EQ(ft_flowlet_end(c, light.send_fd), FT_OK);  // before its deadline
  EXPECT_TRUE(eventually([&] { return daemon_.status()["counters"]["deadlines_met"] == 1; }));
  EXPECT_EQ(daemon_.status()["counters"]["deadlines_missed"], 0);
  for (const Transfer* t : {&urgent, &heavy, &light}) {
    EXPECT_EQ(ft_socket_unregister(c, t->send_fd), FT_OK);
  }
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

TEST_F(ClientTest, MiceBypassTheAllocatorAndBackToBackBeginsCoalesce) {
  start_allocator();
  ft_client* c = open();  // min_flowlet_bytes = 10,000
  Transfer mouse, bulk;
  ASSERT_EQ(ft_socket_register(c, mouse.send_fd), FT_OK);
  ASSERT_EQ(ft_socket_register(c, bulk.send_fd), FT_OK);
  // A mouse is never reported: no rate, no flow at the allocator.
  ASSERT_EQ(ft_flowlet_begin(c, mouse.send_fd, 5000, nullptr), FT_OK);
  const std::uint64_t mouse_sum = mouse.send_all(5000, c);
  // Two back-to-back begins on one socket are one flowlet.
  ASSERT_EQ(ft_flowlet_begin(c, bulk.send_fd, 50 << 20, nullptr), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, bulk.send_fd, 50 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return rate(c, bulk.send_fd) > 0; }));
  EXPECT_EQ(daemon_.status()["flows"], 1);
  EXPECT_EQ(rate(c, mouse.send_fd), 0u);
  ft_stats st{};
  ft_client_stats(c, &st);
  EXPECT_EQ(st.mice, 1u);
  EXPECT_EQ(st.flowlets_coalesced, 1u);
  EXPECT_EQ(st.flowlets_started, 1u);
  mouse.finish();
  EXPECT_EQ(mouse.received(), 5000u);
  EXPECT_EQ(mouse.checksum(), mouse_sum);
  ft_socket_unregister(c, mouse.send_fd);
  ft_socket_unregister(c, bulk.send_fd);
  ft_client_close(c);
}

TEST_F(ClientTest, AReusedFdIsNeverPacedByMistake) {
  start_allocator();
  ft_client* c = open();
  auto t = std::make_unique<Transfer>();
  const int fd = t->send_fd;
  ASSERT_EQ(ft_socket_register(c, fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, fd, 100 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return rate(c, fd) > 0; }));
  // Misuse: the application puts a new socket on the fd number (dup2 closes
  // the old one) without unregistering.
  const int fresh = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::dup2(fresh, fd), fd);
  ::close(fresh);
  t->send_fd = -1;
  const int reused = fd;
  // The allocator's later rates for the old flowlet (lease refreshes, a
  // second flowlet changing its share) must not reach the new socket.
  Transfer other;
  ASSERT_EQ(ft_socket_register(c, other.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, other.send_fd, 100 << 20, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return near(rate(c, other.send_fd), kLinkBytes / 2); }));
  std::uint64_t v = 0;
  socklen_t len = sizeof v;
  ASSERT_EQ(getsockopt(reused, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len), 0);
  EXPECT_EQ(v, ~std::uint64_t{0}) << "the reused fd got a cap";
  ::close(reused);
  ft_socket_unregister(c, other.send_fd);
  ft_client_close(c);
}

TEST_F(ClientTest, AForkedChildDoesNotShareTheClient) {
  ft_client* c = open();
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const bool ok =
        ft_flowlet_begin(c, t.send_fd, 100, nullptr) == FT_EFORKED && ft_client_close(c) == FT_OK;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ft_flowlet_begin(c, t.send_fd, 100, nullptr), FT_OK);  // the parent's still works
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

// What the application's descriptors name: each number and its /proc link.
std::map<int, std::string> app_fds(const std::vector<int>& fds) {
  std::map<int, std::string> t;
  for (int fd : fds) {
    char path[64], target[256] = {};
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    const ssize_t n = ::readlink(path, target, sizeof target - 1);
    t[fd] = n > 0 ? std::string(target, static_cast<std::size_t>(n)) : "closed";
  }
  return t;
}

// Forks; the child checks that `fds` name what they named in the parent
// just before, then opens a client of its own and uses it (not under
// TSan, see below). True if the child did all that and exited within 10 s.
bool child_keeps_fds_and_runs(const std::vector<int>& fds, const std::string& allocator) {
  const auto before = app_fds(fds);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that died
    if (app_fds(fds) != before) ::_exit(2);
#if defined(FT_TEST_ASAN) || defined(FT_TEST_TSAN)  // tests/sanitizers.h
    // TSan cannot start threads in the child of a multithreaded process
    // ("dup thread with used id"), and ASan's allocator may be held by a
    // thread that does not exist here: the descriptors are what such a
    // child can check.
    ::_exit(0);
#endif
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = allocator.c_str();
    ft_client* mine = nullptr;
    if (ft_client_open(&cfg, &mine) != FT_OK) ::_exit(3);
    Transfer t;
    const bool ok = ft_socket_register(mine, t.send_fd) == FT_OK &&
                    ft_flowlet_begin(mine, t.send_fd, 100000, nullptr) == FT_OK;
    ft_client_close(mine);
    ::_exit(ok ? 0 : 4);
  }
  for (int waited = 0; waited < 10000; waited += 5) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    ::usleep(5000);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

// libuv, which the runtime used to run on, re-created its signal pipe in
// every forked child; the pipe's numbers were the runtime's private table's,
// so the child lost two of the application's descriptors (13 and 14 here)
// to a new pipe. Forty files cover every number the runtime uses.
TEST_F(ClientTest, AForkedChildsDescriptorsAreExactlyItsParentsAtEveryPoint) {
  std::vector<int> fds = {0, 1, 2};
  for (int i = 0; i < 40; ++i) fds.push_back(::open("/dev/null", O_RDONLY));
  EXPECT_TRUE(child_keeps_fds_and_runs(fds, listen_)) << "before any client, allocator down";
  start_allocator();
  EXPECT_TRUE(child_keeps_fds_and_runs(fds, listen_)) << "before any client";
  ft_client* c = open();
  Transfer t;
  fds.push_back(t.send_fd);
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 1 << 20, nullptr), FT_OK);
  EXPECT_TRUE(child_keeps_fds_and_runs(fds, listen_)) << "while a flowlet is in progress";
  daemon_.stop();
  EXPECT_TRUE(child_keeps_fds_and_runs(fds, listen_)) << "while the allocator is down";
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
  for (std::size_t i = 3; i < 43; ++i) ::close(fds[i]);
}

// Clients open and close on other threads while the main thread forks:
// a child forked while a runtime was making its ZeroMQ context (libzmq's
// and libsodium's process-wide locks held) would hang at its own client.
TEST_F(ClientTest, ChildrenForkedWhileClientsOpenNeverBlock) {
#if defined(FT_TEST_ASAN) || defined(FT_TEST_TSAN)  // tests/sanitizers.h
  GTEST_SKIP() << "under this sanitizer a forked child of a multithreaded process cannot open "
                  "a client (TSan: no new threads; ASan: no allocator lock around fork): run in "
                  "the release preset";
#endif
  start_allocator();
  std::atomic<bool> stop{false};
  std::vector<std::thread> openers;
  for (int i = 0; i < 2; ++i) {
    openers.emplace_back([&] {
      while (!stop.load()) {
        ft_client* c = open();
        if (c != nullptr) ft_client_close(c);
      }
    });
  }
  int good = 0;
  for (int i = 0; i < 20; ++i) good += child_keeps_fds_and_runs({0, 1, 2}, listen_) ? 1 : 0;
  stop.store(true);
  for (auto& t : openers) t.join();
  EXPECT_EQ(good, 20);
}

TEST_F(ClientTest, ManyApplicationThreadsShareOneClient) {
  start_allocator();
  ft_client* c = open();
  constexpr int kThreads = 4;
  constexpr int kFlowlets = 200;
  std::vector<std::unique_ptr<Transfer>> conns;
  for (int i = 0; i < kThreads; ++i) conns.push_back(std::make_unique<Transfer>());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const int fd = conns[static_cast<std::size_t>(i)]->send_fd;
      if (ft_socket_register(c, fd) != FT_OK) ++errors;
      for (int f = 0; f < kFlowlets; ++f) {
        // Each call may race the others and the runtime thread.
        if (ft_flowlet_begin(c, fd, 20000, nullptr) != FT_OK) ++errors;
        if (ft_flowlet_sent(c, fd, 20000) != FT_OK) ++errors;
        std::uint64_t r = 0;
        if (ft_socket_rate(c, fd, &r) != FT_OK) ++errors;
        ft_stats st{};
        if (ft_client_stats(c, &st) != FT_OK) ++errors;
      }
      if (ft_socket_unregister(c, fd) != FT_OK) ++errors;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // Every begin was seen once: reported, or coalesced into the one before
  // (the runtime may still be working through the queue).
  ft_stats st{};
  EXPECT_TRUE(eventually([&] {
    ft_client_stats(c, &st);
    return st.flowlets_started + st.flowlets_coalesced ==
           static_cast<std::uint64_t>(kThreads * kFlowlets);
  })) << st.flowlets_started
      << " + " << st.flowlets_coalesced;
  EXPECT_EQ(st.queue_overflows, 0u);
  // Every reported flowlet ended (in advance or at unregister).
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }));
  ft_client_close(c);
}

// FLOWTUNE_MIN_FLOWLET_BYTES takes a whole decimal count; anything else
// (a sign strtoull would wrap, a value past 2^64 - 1, trailing text) keeps
// the default instead of becoming a huge threshold that schedules nothing.
// The library takes CURVE keys from FLOWTUNE_CURVE_*: with them it is
// scheduled by an allocator that demands CURVE; without them it is not
// heard and its bytes go unpaced; keys that do not load stop the open.
TEST_F(ClientTest, UnderCurveTheLibraryUsesTheKeysTheEnvironmentNames) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  keys.endpoint("host", R"(["127.0.0.1"])");
  const auto& server = keys.server;
  daemon_.set_control_keys(keys.op);
  start_allocator(keys.allocator_args());
  struct Env {
    Env(const std::string& server_key, const std::string& key_file) {
      ::setenv("FLOWTUNE_CURVE_SERVER", server_key.c_str(), 1);
      ::setenv("FLOWTUNE_CURVE_KEY", key_file.c_str(), 1);
    }
    ~Env() {
      ::unsetenv("FLOWTUNE_CURVE_SERVER");
      ::unsetenv("FLOWTUNE_CURVE_KEY");
    }
  };
  {
    // Given the host's key: scheduled.
    Env env(server.own.public_key, keys.key_file("host"));
    ft_client* c = open();
    Transfer t;
    ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
    EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); }))
        << rate(c, t.send_fd) << "\n"
        << daemon_.log();
    EXPECT_EQ(ft_client_close(c), FT_OK);
  }
  {
    // A key file that is not there: the open fails and says why.
    Env env(server.own.public_key, keys.key_file("missing"));
    ft_client* c = nullptr;
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = listen_.c_str();
    cfg.log_level = 0;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_ECONNECT);
  }
  // No key at all: never heard, never paced, every byte arrives.
  ft_client* c = open();
  expect_unpaced_and_intact(c, 4 << 20);
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c, &st), FT_OK);
  EXPECT_EQ(st.connected, 0);
  EXPECT_EQ(ft_client_close(c), FT_OK);
  const auto status = daemon_.status();
  EXPECT_EQ(status["counters"]["hellos"], 1) << status;  // the keyed client's only
  EXPECT_GE(
      status["auth"]["unauthenticated"].get<int>() + status["auth"]["bad_handshakes"].get<int>(),
      1);
}

// The allocator's key rotates without a restart (docs/security.md): on a
// reload that finds a new --curve-secret it listens again with it; a client
// that names the allocator's key by its file follows the file when its
// connection fails, and keeps its flowlets; a client given the old key
// itself is not heard. Both orders: the clients' file first, and the
// allocator first (the clients then follow once the file changes).
TEST_F(ClientTest, UnderCurveTheAllocatorsKeyRotatesWithoutARestart) {
  FT_SKIP_CURVE_UNDER_TSAN();
  daemon::testing::CurveSetup keys;
  keys.endpoint("host", R"(["127.0.0.1"])");
  auto op = keys.op;
  daemon_.set_control_keys(op);
  const std::string server_pub = keys.public_file();
  const auto install = [&](const curve::KeyPair& k, bool secret) {
    if (secret)
      keys.write_secret(k);
    else
      keys.write_public(k);
  };
  install(keys.server.own, false);
  start_allocator(keys.allocator_args());
  const auto keyed = [&](const std::string& server_key) {
    ::setenv("FLOWTUNE_CURVE_SERVER", server_key.c_str(), 1);
    ::setenv("FLOWTUNE_CURVE_KEY", keys.key_file("host").c_str(), 1);
    ft_client* c = open(200);
    ::unsetenv("FLOWTUNE_CURVE_SERVER");
    ::unsetenv("FLOWTUNE_CURVE_KEY");
    return c;
  };
  const auto rotations = [&] {
    const auto st = daemon_.status();
    return st.contains("auth") ? st["auth"]["key_rotations"].get<int>() : -1;
  };
  ft_client* c = keyed(server_pub);
  std::vector<std::unique_ptr<Transfer>> flowlets;
  const auto begin_one = [&] {
    flowlets.push_back(std::make_unique<Transfer>());
    ASSERT_EQ(ft_socket_register(c, flowlets.back()->send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, flowlets.back()->send_fd, 100 << 20, nullptr), FT_OK);
  };
  const auto all_share = [&] {
    return eventually([&] {
      for (auto& f : flowlets) {
        if (!near(rate(c, f->send_fd), kLinkBytes / static_cast<double>(flowlets.size())))
          return false;
      }
      return true;
    });
  };
  begin_one();
  ASSERT_TRUE(all_share()) << daemon_.log();

  // When: a new key goes where the client reads it, then into the
  // allocator's file, and the allocator reloads.
  const curve::KeyPair second = curve::generate();
  install(second, false);
  install(second, true);
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  op.server_public = second.public_key;
  daemon_.set_control_keys(op);
  // Expect: the allocator speaks the new key, and the client, following it,
  // keeps its flowlet and gets a rate for a new one.
  ASSERT_TRUE(eventually([&] { return rotations() == 1; })) << daemon_.log();
  EXPECT_EQ(daemon_.status()["auth"]["public_key"], second.public_key);
  begin_one();
  EXPECT_TRUE(all_share()) << rate(c, flowlets[0]->send_fd) << " " << rate(c, flowlets[1]->send_fd)
                           << "\n"
                           << daemon_.log();

  // When: the allocator rotates first, the clients' file a moment later.
  const curve::KeyPair third = curve::generate();
  install(third, true);
  ASSERT_EQ(::kill(daemon_.pid(), SIGHUP), 0);
  op.server_public = third.public_key;
  daemon_.set_control_keys(op);
  ASSERT_TRUE(eventually([&] { return rotations() == 2; })) << daemon_.log();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  install(third, false);
  // Expect: the client follows once the file names the key.
  begin_one();
  EXPECT_TRUE(all_share()) << daemon_.log();
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c, &st), FT_OK);
  EXPECT_EQ(st.connected, 1);

  // A client holding the old key itself is never heard, and its bytes
  // arrive unpaced.
  ft_client* stale = keyed(second.public_key);
  expect_unpaced_and_intact(stale, 1 << 20);
  EXPECT_EQ(ft_client_close(stale), FT_OK);
  for (auto& f : flowlets) ft_socket_unregister(c, f->send_fd);
  EXPECT_EQ(ft_client_close(c), FT_OK);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; })) << daemon_.status();
}

TEST(ClientConfig, MinFlowletBytesFromTheEnvironmentOnlyWhenWhole) {
  const auto with = [](const char* v) {
    ::setenv("FLOWTUNE_MIN_FLOWLET_BYTES", v, 1);
    ft_config cfg;
    ft_config_init(&cfg);
    ::unsetenv("FLOWTUNE_MIN_FLOWLET_BYTES");
    return cfg.min_flowlet_bytes;
  };
  EXPECT_EQ(with("123"), 123u);
  EXPECT_EQ(with("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"18446744073709551616", "-1", "+5", "12x", "", " 7"}) {
    EXPECT_EQ(with(bad), 65536u) << "'" << bad << "'";
  }
}

// A queue of two events overflows at once under many flowlets: begins,
// bytes and ends that find it full go through their socket's slot instead.
// No end may be lost (ft_flowlet_end never fails for want of room, and
// unregister never needs the queue): the allocator must end with no flows.
TEST_F(ClientTest, ATinyEventQueueLosesNoEndAndNoUnregister) {
  start_allocator();
  ::setenv("FLOWTUNE_EVENT_QUEUE", "2", 1);
  ft_client* c = open();
  ::unsetenv("FLOWTUNE_EVENT_QUEUE");
  ASSERT_NE(c, nullptr);
  constexpr int kSockets = 4;
  constexpr int kFlowlets = 300;
  std::vector<std::unique_ptr<Transfer>> conns;
  for (int i = 0; i < kSockets; ++i) conns.push_back(std::make_unique<Transfer>());
  for (auto& t : conns) {
    // Registration still needs the queue (FT_ENOMEM when full: the caller
    // knows); retry until it has room.
    int rc = FT_ENOMEM;
    for (int i = 0; i < 100000 && rc == FT_ENOMEM; ++i) {
      rc = ft_socket_register(c, t->send_fd);
      if (rc == FT_ENOMEM) std::this_thread::yield();
    }
    ASSERT_EQ(rc, FT_OK);
  }
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSockets; ++i) {
    threads.emplace_back([&, i] {
      const int fd = conns[static_cast<std::size_t>(i)]->send_fd;
      for (int f = 0; f < kFlowlets; ++f) {
        if (ft_flowlet_begin(c, fd, 1 << 20, nullptr) != FT_OK) ++errors;
        if (ft_flowlet_sent(c, fd, 1000) != FT_OK) ++errors;
        if (ft_flowlet_end(c, fd) != FT_OK) ++errors;
      }
      // The last flowlet stays open: unregister must end it.
      if (ft_flowlet_begin(c, fd, 1 << 20, nullptr) != FT_OK) ++errors;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  ft_stats st{};
  ASSERT_EQ(ft_client_stats(c, &st), FT_OK);
  EXPECT_GT(st.queue_overflows, 0u);  // the overflow path did run
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] > 0; })) << daemon_.log();
  for (auto& t : conns) EXPECT_EQ(ft_socket_unregister(c, t->send_fd), FT_OK);
  EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }))
      << daemon_.status().dump();
  EXPECT_TRUE(eventually([&] {
    ft_client_stats(c, &st);
    return st.flowlets_ended == st.flowlets_started;
  })) << st.flowlets_started
      << " started, " << st.flowlets_ended << " ended";
  EXPECT_EQ(ft_client_close(c), FT_OK);
}

// Closing right after a begin: the turn that sees the stop must send the
// final ends before it closes anything, every time.
TEST_F(ClientTest, CloseRightAfterABeginStillEndsTheFlowlet) {
  start_allocator();
  for (int i = 0; i < 5; ++i) {
    ft_client* c = open();
    Transfer t;
    ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 100 << 20, nullptr), FT_OK);
    ASSERT_TRUE(eventually([&] { return daemon_.status()["flows"] == 1; })) << daemon_.log();
    EXPECT_EQ(ft_client_close(c), FT_OK);
    EXPECT_TRUE(eventually([&] { return daemon_.status()["flows"] == 0; }));
  }
}

TEST(ClientCpp, RaiiWrapperRegistersAndCloses) {
  ft_config cfg = Client::default_config();
  const std::string ep = unique_endpoint();
  cfg.allocator = ep.c_str();
  Client client(cfg);
  Transfer t;
  {
    Registration r(client, t.send_fd);
    ASSERT_EQ(r.status(), FT_OK);
    EXPECT_EQ(client.begin(t.send_fd, 1000), FT_OK);
    EXPECT_EQ(client.end(t.send_fd), FT_OK);
  }
  EXPECT_EQ(client.end(t.send_fd), FT_ENOTREG);  // unregistered by the Registration
}

// ---- hot standby: two allocators, each --standby-of the other ----
//
// The client lists both. Allocator 0's host links run at 0.1 Gbit/s and
// allocator 1's at 0.05, so a flowlet's rate says which one set it.
class StandbyPairTest : public ::testing::Test {
 protected:
  void start(int i) {
    daemons_[i].start(
        eps_[i], {"--host-gbps", i == 0 ? "0.1" : "0.05", "--standby-of", eps_[1 - i], "--probe-ms",
                  "50", "--takeover-ms", "300", "--log-level", "debug"});
  }
  std::string role(int i) {
    const auto s = daemons_[i].control("status", 500);
    return s && s->contains("role") ? (*s)["role"].get<std::string>() : "";
  }
  int flows(int i) { return daemons_[i].status().value("flows", -1); }
  // Allocator 0 active, 1 standing by (it heard 0 and stays).
  void start_pair() {
    start(0);
    ASSERT_TRUE(eventually([&] { return role(0) == "active"; })) << daemons_[0].log();
    start(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // two takeover times
    ASSERT_EQ(role(1), "standby") << daemons_[1].log();
    ASSERT_EQ(role(0), "active");
  }
  ft_client* open(std::uint32_t heartbeat_ms) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = list_.c_str();
    cfg.heartbeat_ms = heartbeat_ms;
    cfg.min_flowlet_bytes = 10000;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK);
    return c;
  }
  std::string eps_[2] = {unique_endpoint(), unique_endpoint()};
  std::string list_ = eps_[0] + "," + eps_[1];
  DaemonProcess daemons_[2];
};

TEST_F(StandbyPairTest, StartedTogetherExactlyOneServes) {
  start(0);
  start(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const std::string a = role(0), b = role(1);
  EXPECT_TRUE((a == "active" && b == "standby") || (a == "standby" && b == "active"))
      << a << " " << b << "\n"
      << daemons_[0].log() << daemons_[1].log();
}

// A pair shares one CURVE key. Rotated in the active one first (the new
// key already in both files), the standby's probes follow the file, so the
// standby keeps hearing its peer and does not take over; then it reloads
// too, and still one serves.
TEST_F(StandbyPairTest, UnderCurveARotationOneAtATimeKeepsOneActive) {
  FT_SKIP_CURVE_UNDER_TSAN();
  using daemon::testing::write_file;
  // The pair's key is a known (ctl) key too: its probes are answered.
  daemon::testing::CurveSetup keys(/*server_known=*/true);
  keys.endpoint("host", R"(["127.0.0.1"])");
  auto op = keys.op;
  for (int i = 0; i < 2; ++i) {
    daemons_[i].set_control_keys(op);
    daemons_[i].start(
        eps_[i], {"--host-gbps", "0.1", "--standby-of", eps_[1 - i], "--probe-ms", "50",
                  "--takeover-ms", "300", "--log-level", "debug", "--curve-secret",
                  keys.secret_file(), "--curve-clients", keys.clients, "--curve-ctl", keys.ctl});
    if (i == 0) {
      ASSERT_TRUE(eventually([&] { return role(0) == "active"; })) << daemons_[0].log();
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_EQ(role(1), "standby") << daemons_[1].log();
  const curve::KeyPair next = curve::generate();
  write_file(keys.ctl + "/next.pub", "public-key = \"" + next.public_key + "\"\n");
  keys.write_secret(next);
  op.server_public = next.public_key;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(::kill(daemons_[i].pid(), SIGHUP), 0);
    daemons_[i].set_control_keys(op);
    ASSERT_TRUE(eventually([&] {
      const auto st = daemons_[i].control("status", 500);
      return st && (*st)["auth"]["key_rotations"] == 1;
    })) << daemons_[i].log();
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // three takeover times
    EXPECT_EQ(role(0), "active") << daemons_[0].log();
    EXPECT_EQ(role(1), "standby") << "after " << i + 1 << " reloads\n" << daemons_[1].log();
  }
}

// The issue's goal: after kill -9 of the primary, every flowlet has a rate
// from the standby within two heartbeats; the bytes in flight arrive whole;
// and the old primary, restarted as it was, stands by.
TEST_F(StandbyPairTest, AfterThePrimaryIsKilledTheStandbyRatesEveryFlowletWithinTwoHeartbeats) {
  start_pair();
  constexpr std::uint32_t kHeartbeatMs = 1000;  // the library's default
  ft_client* c = open(kHeartbeatMs);
  std::vector<std::unique_ptr<Transfer>> ts;
  for (int i = 0; i < 3; ++i) {
    ts.push_back(std::make_unique<Transfer>());
    ASSERT_EQ(ft_socket_register(c, ts.back()->send_fd), FT_OK);
    ASSERT_EQ(ft_flowlet_begin(c, ts.back()->send_fd, 1ull << 30, nullptr), FT_OK);
  }
  const auto all_near = [&](double want) {
    for (auto& t : ts) {
      if (!near(rate(c, t->send_fd), want)) return false;
    }
    return true;
  };
  ASSERT_TRUE(eventually([&] { return all_near(kLinkBytes / 3); })) << daemons_[0].log();
  // Bytes in flight across the failover, paced all along.
  std::uint64_t sum = 0;
  constexpr std::uint64_t kBytes = 3 << 20;
  std::thread writer([&] { sum = ts[0]->send_all(kBytes, c); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // When: the primary is killed.
  const auto killed = Clock::now();
  daemons_[0].kill9();
  // Expect: the standby's rates (its links are half as fast) within two heartbeats.
  const bool moved = eventually([&] { return all_near(kLinkBytes / 2 / 3); }, 10'000);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  std::printf("standby takeover: every flowlet rated by the standby %lld ms after kill -9\n",
              static_cast<long long>(ms));
  RecordProperty("takeover_ms", std::to_string(ms));
  ASSERT_TRUE(moved) << daemons_[1].log();
  EXPECT_LE(ms, 2 * kHeartbeatMs);
  EXPECT_EQ(role(1), "active");
  EXPECT_EQ(flows(1), 3);
  writer.join();
  ts[0]->finish();
  EXPECT_EQ(ts[0]->received(), kBytes);
  EXPECT_EQ(ts[0]->checksum(), sum);
  // And: the old primary, restarted as it was, finds its peer active and
  // stands by; the client stays where it is.
  start(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // three takeover times
  EXPECT_EQ(role(0), "standby") << daemons_[0].log();
  EXPECT_EQ(role(1), "active");
  EXPECT_EQ(flows(0), 0);
  EXPECT_EQ(flows(1), 3);
  EXPECT_TRUE(all_near(kLinkBytes / 2 / 3));
  for (auto& t : ts) ft_socket_unregister(c, t->send_fd);
  ft_client_close(c);
}

// A primary that hangs (SIGSTOP) is left: the standby takes over and the
// client moves. When it wakes it hears a newer term and stands down, so the
// two never serve at once for longer than a probe.
TEST_F(StandbyPairTest, AHungPrimaryIsLeftAndStandsDownWhenItWakes) {
  start_pair();
  ft_client* c = open(200);
  Transfer t;
  ASSERT_EQ(ft_socket_register(c, t.send_fd), FT_OK);
  ASSERT_EQ(ft_flowlet_begin(c, t.send_fd, 1ull << 30, nullptr), FT_OK);
  ASSERT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes); }))
      << daemons_[0].log();
  ASSERT_EQ(::kill(daemons_[0].pid(), SIGSTOP), 0);
  const auto stopped = Clock::now();
  EXPECT_TRUE(eventually([&] { return near(rate(c, t.send_fd), kLinkBytes / 2); }, 5000))
      << rate(c, t.send_fd) << "\n"
      << daemons_[1].log();
  std::printf(
      "hung primary: the standby's rate %lld ms after SIGSTOP\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stopped).count()));
  EXPECT_EQ(flows(1), 1);
  ASSERT_EQ(::kill(daemons_[0].pid(), SIGCONT), 0);
  EXPECT_TRUE(eventually([&] { return role(0) == "standby"; }, 2000)) << daemons_[0].log();
  EXPECT_NE(daemons_[0].log().find("standing down"), std::string::npos) << daemons_[0].log();
  EXPECT_EQ(flows(0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(role(1), "active");
  EXPECT_EQ(flows(1), 1);
  EXPECT_TRUE(near(rate(c, t.send_fd), kLinkBytes / 2)) << rate(c, t.send_fd);
  ft_socket_unregister(c, t.send_fd);
  ft_client_close(c);
}

// A list with a bad endpoint is refused at open, as a single bad one is; a
// comma inside an ipc path is part of the path.
TEST(ClientConfig, AnAllocatorListWithABadEndpointIsRefused) {
  for (const char* ok :
       {"ipc:///tmp/flowtune,test.sock", "tcp://127.0.0.1:5555, tcp://127.0.0.1:5556,"}) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = ok;
    cfg.log_level = 0;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_OK) << ok;
    if (c != nullptr) ft_client_close(c);
  }
  for (const char* list :
       {"tcp://127.0.0.1:5555,tcp://127.0.0.1:99999", " , ", "tcp://127.0.0.1:5555,nope://x"}) {
    ft_config cfg;
    ft_config_init(&cfg);
    cfg.allocator = list;
    cfg.log_level = 0;
    ft_client* c = nullptr;
    EXPECT_EQ(ft_client_open(&cfg, &c), FT_ECONNECT) << list;
    if (c != nullptr) ft_client_close(c);
  }
}

// A control path that drops packets (a partition: the allocator is alive
// but unreachable) for longer than TCP's first retransmissions. Once the path
// heals, the flowlet's cap must come back within about two heartbeats.
// Before the runtime set ZMTP heartbeats and a connect timeout, the
// connection sat in TCP's exponential backoff: 2-3 s after a 4 s partition
// here, 10 s after a 15 s one (bench/chaos/run control_drop). Packets are
// dropped by nftables in a private network namespace, in a child process (a
// namespace is per thread, and the test process has threads): root and
// nft only, skipped otherwise.
constexpr int kPartitionSkip = 77;
constexpr std::uint32_t kPartitionHeartbeatMs = 200;

int partition_child() {
  if (::unshare(CLONE_NEWNET) != 0 || std::system("ip link set lo up") != 0) return kPartitionSkip;
  const std::string ep = "tcp://127.0.0.1:5555";  // the namespace is ours alone
  DaemonProcess d;
  if (!d.try_start(ep, {"--host-gbps", "0.1", "--lease-ms", "300", "--lease-refresh-ms", "100",
                        "--endpoint-timeout-ms", "1000"})) {
    std::fprintf(stderr, "partition: the allocator did not start:\n%s\n", d.log().c_str());
    return 2;
  }
  ft_config cfg;
  ft_config_init(&cfg);
  cfg.allocator = ep.c_str();
  cfg.heartbeat_ms = kPartitionHeartbeatMs;
  cfg.min_flowlet_bytes = 10000;
  ft_client* c = nullptr;
  if (ft_client_open(&cfg, &c) != FT_OK) return 3;
  std::fprintf(stderr, "partition: allocator up, client open\n");
  int rc = 0;
  {
    Transfer t;
    ft_socket_register(c, t.send_fd);
    ft_flowlet_begin(c, t.send_fd, 1ull << 30, nullptr);  // lives as long as the test
    const auto capped = [&] {
      std::uint64_t r = 0;
      return ft_socket_rate(c, t.send_fd, &r) == FT_OK && r > 0;
    };
    if (!eventually(capped)) {
      std::fprintf(stderr, "partition: no rate before the partition\n");
      rc = 4;
    }
    // When: the allocator's port is dropped both ways for 4 s.
    const auto cut = Clock::now();
    if (rc == 0 &&
        std::system("nft add table inet ftpart && "
                    "nft add chain inet ftpart in '{ type filter hook input priority 0; }' && "
                    "nft add chain inet ftpart out '{ type filter hook output priority 0; }' && "
                    "nft add rule inet ftpart in tcp dport 5555 drop && "
                    "nft add rule inet ftpart out tcp sport 5555 drop") != 0) {
      rc = kPartitionSkip;
    }
    // Expect: fail-open within the 300 ms lease ...
    if (rc == 0 && !eventually([&] { return !capped(); }, 1000)) {
      std::fprintf(stderr, "partition: the cap outlived the lease\n");
      rc = 5;
    }
    if (rc == 0) {
      std::this_thread::sleep_until(cut + std::chrono::seconds(4));
      if (std::system("nft delete table inet ftpart") != 0) rc = 6;
    }
    // ... and the cap back within two heartbeats of the path healing (plus
    // 600 ms for a loaded 2-vCPU machine; 1.4 s under sanitizers).
    if (rc == 0) {
      const auto healed = Clock::now();
      const bool back = eventually(capped, 8000);
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - healed).count();
      std::printf("partition recovery: cap back %lld ms after the path healed\n",
                  static_cast<long long>(ms));
#ifdef FT_SANITIZED
      constexpr long long kSlackMs = 1400;
#else
      constexpr long long kSlackMs = 600;
#endif
      if (!back || ms > 2 * kPartitionHeartbeatMs + kSlackMs) {
        std::fprintf(stderr, "partition: cap %s %lld ms after the path healed (limit %lld ms)\n",
                     back ? "back only" : "not back", static_cast<long long>(ms),
                     2 * kPartitionHeartbeatMs + kSlackMs);
        rc = 7;
      }
    }
    (void)std::system("nft delete table inet ftpart 2> /dev/null");
    ft_socket_unregister(c, t.send_fd);
    std::fprintf(stderr, "partition: measured (rc %d), closing the transfer\n", rc);
  }
  std::fprintf(stderr, "partition: closing the client\n");
  ft_client_close(c);
  std::fprintf(stderr, "partition: client closed, stopping the allocator\n");
  return rc;
}

// A child that has not finished in time: every thread's stack (gdb, where
// installed) and kernel wait channel, so a hang says where it is, then the
// child and its allocator are killed.
void report_and_kill(pid_t pid) {
  std::fprintf(stderr, "partition: the child (pid %d) did not finish; its threads:\n", pid);
  const std::string p = std::to_string(pid);
  (void)std::system(("for t in /proc/" + p +
                     "/task/*; do echo \"$t $(cat $t/comm) $(cat $t/wchan)\"; "
                     "cat $t/stack 2> /dev/null; done >&2")
                        .c_str());
  (void)std::system(("command -v gdb > /dev/null && gdb -p " + p +
                     " -batch -ex 'thread apply all bt' < /dev/null >&2 2>&1")
                        .c_str());
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
}

TEST(ClientPartition, AfterTheControlPathHealsTheCapComesBackWithinTwoHeartbeats) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a private network namespace)";
  if (std::system("command -v nft > /dev/null 2>&1") != 0) GTEST_SKIP() << "nft is not installed";
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    (void)::setpgid(0, 0);  // its allocator too can be killed as one group
    const int rc = partition_child();
    std::fflush(stdout);
    ::_exit(rc);
  }
  // The child needs about 5 s; a hang fails here with its stacks, well
  // before ctest's timeout (which would say nothing about where).
  int status = 0;
  pid_t done = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    report_and_kill(pid);
    (void)::waitpid(pid, &status, 0);
    FAIL() << "the partition child hung; its stacks are above";
  }
  ASSERT_EQ(done, pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died: status " << status;
  if (WEXITSTATUS(status) == kPartitionSkip)
    GTEST_SKIP() << "no network namespace or nftables here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's lines above say why";
}

}  // namespace
}  // namespace flowtune::client
