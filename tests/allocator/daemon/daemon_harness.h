// Loopback integration harness: runs the real flowtune-allocator binary as a
// child process and talks to it with real ZeroMQ DEALER sockets. Every wait
// is bounded; the child is killed when the test ends.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/prctl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/daemon/server.h"
#include "flowtune/wire/codec.h"

namespace flowtune::daemon::testing {

using Clock = std::chrono::steady_clock;

// A fresh ipc:// endpoint per call: tests never share a socket path or port.
inline std::string unique_endpoint() {
  static int n = 0;
  return "ipc:///tmp/ft-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".sock";
}

// A command line's exit status (-1 if it did not exit) and its output,
// stderr joined to stdout.
struct CmdResult {
  int status;
  std::string output;
};

inline CmdResult run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// One flowtune-ctl request to `listen` (speaking CURVE with `keys` if not
// null); nullopt when no reply came within the timeout.
inline std::optional<nlohmann::json> control_request(zmq::context_t& ctx, const std::string& listen,
                                                     const curve::ClientKeys* keys,
                                                     const std::string& request,
                                                     int timeout_ms = 1000) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (keys != nullptr) {
    EXPECT_EQ(curve::apply_client(s.handle(), *keys), 0);
  }
  s.connect(listen);
  s.send(zmq::buffer(std::string_view(kControlTag)), zmq::send_flags::sndmore);
  s.send(zmq::buffer(request), zmq::send_flags::none);
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
  zmq::message_t tag, body;
  if ((item.revents & ZMQ_POLLIN) == 0 || !s.recv(tag) || !s.recv(body)) return std::nullopt;
  return nlohmann::json::parse(body.to_string_view());
}

// Forks and execs args[0] with its stderr in log_path (opened with
// `mode`); the child dies with the test, however it ends (a crash would
// leave it running), and inherits none of the test's descriptors (it would
// keep their connections open after the test closes them). The pid, or -1.
inline pid_t spawn_daemon(std::vector<std::string> args, const std::string& log_path,
                          const char* mode) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::FILE* f = std::freopen(log_path.c_str(), mode, stderr);
  (void)f;
  ::close_range(3, ~0u, 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

class DaemonProcess {
 public:
  DaemonProcess() = default;
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;
  ~DaemonProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  // Starts the daemon and waits (bounded) until it answers flowtune-ctl.
  void start(const std::string& listen, std::vector<std::string> args) {
    ASSERT_TRUE(try_start(listen, std::move(args)))
        << "allocator did not come up; its stderr:\n" << log();
  }

  // As start(), but false (no test failure) when the daemon exits or does
  // not answer within 10 s; its log says why.
  bool try_start(const std::string& listen, std::vector<std::string> args) {
    listen_ = listen;
    stderr_path_ = "/tmp/ft-test-daemon-" + std::to_string(::getpid()) + "-" +
                   std::to_string(starts_++) + ".log";
    args.insert(args.begin(), {FT_ALLOCATOR_BINARY, "--listen", listen});
    pid_ = spawn_daemon(std::move(args), stderr_path_, "w");
    if (pid_ < 0) return false;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      if (control("status", 100)) return true;
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // it exited: no use waiting
        pid_ = -1;
        return false;
      }
    }
    ::kill(pid_, SIGKILL);  // up but silent: not a daemon to test against
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return false;
  }

  // Starts the daemon on a loopback TCP port the kernel chose and returns
  // its endpoint ("" when it did not come up; its log says why). The port is found by binding and releasing it; another
  // process (a test running beside this one) may take it before the daemon
  // binds, so a start refused with "Address already in use" takes another.
  std::string start_on_tcp(const std::vector<std::string>& args) {
    zmq::context_t ctx;
    std::string ep;
    for (int attempt = 0; attempt < 5; ++attempt) {
      zmq::socket_t probe(ctx, zmq::socket_type::router);
      probe.bind("tcp://127.0.0.1:*");
      ep = probe.get(zmq::sockopt::last_endpoint);
      probe.close();
      if (try_start(ep, args)) return ep;
      if (log().find("Address already in use") == std::string::npos) break;
    }
    ADD_FAILURE() << "allocator did not come up on " << ep << "; its stderr:\n" << log();
    return "";
  }

  // SIGTERM, then the exit status (or -1 if it had to be killed).
  int stop() {
    ::kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }

  // kill -9, and reaped.
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // With CURVE on, control() speaks it with these keys.
  void set_control_keys(const curve::ClientKeys& k) { control_keys_ = k; }

  std::optional<nlohmann::json> control(const std::string& request, int timeout_ms = 1000) {
    return control_request(ctx_, listen_, control_keys_ ? &*control_keys_ : nullptr, request,
                           timeout_ms);
  }
  nlohmann::json status() { return control("status").value_or(nlohmann::json{}); }

  std::string log() const {
    std::ifstream f(stderr_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  pid_t pid() const { return pid_; }

 private:
  zmq::context_t ctx_{1};
  std::optional<curve::ClientKeys> control_keys_;
  std::string listen_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

// One endpoint: a DEALER socket speaking the wire protocol.
class Endpoint {
 public:
  // keys: speak CURVE with them (null: no authentication).
  explicit Endpoint(const std::string& allocator, const curve::ClientKeys* keys = nullptr)
      : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    // A DEALER with no pipe blocks a send forever: a peer whose handshake
    // the allocator refused (no CURVE, an unknown key) can lose its pipe
    // before the test sends, and CI's ASan run hung there. Such a message is
    // never heard anyway; bounded, the test goes on and checks that.
    socket_.set(zmq::sockopt::sndtimeo, 5000);
    if (keys != nullptr) {
      EXPECT_EQ(curve::apply_client(socket_.handle(), *keys), 0);
    }
    socket_.connect(allocator);
  }
  void send(std::vector<wire::EndpointEvent> events) {
    wire::EndpointMessage m;
    m.seq = ++seq_;
    m.events = std::move(events);
    send_raw(wire::encode(m));
  }
  void send_raw(const std::vector<std::uint8_t>& bytes) {
    socket_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }
  void send_frames(const std::vector<std::string>& frames) {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      socket_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // The next message, or nullopt after timeout_ms.
  std::optional<wire::AllocatorMessage> receive(int timeout_ms) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms));
    zmq::message_t msg;
    if ((item.revents & ZMQ_POLLIN) == 0 || !socket_.recv(msg, zmq::recv_flags::dontwait)) {
      return std::nullopt;
    }
    wire::AllocatorMessage m;
    const auto st = wire::decode({msg.data<std::uint8_t>(), msg.size()}, &m);
    EXPECT_TRUE(st.ok()) << st.detail;
    return m;
  }
  // Receives until `pred(message)` holds or the deadline passes; every
  // message seen is kept in history().
  template <class Pred>
  bool wait_for(Pred pred, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto m = receive(static_cast<int>(left.count()) + 1);
      if (!m) continue;
      for (const auto& r : m->rates) rates_[r.flow_key] = r.bytes_per_sec;
      history_.push_back(*m);
      if (pred(*m)) return true;
    }
    return false;
  }
  // Waits until the last rate told for `key` satisfies pred.
  template <class Pred>
  bool wait_for_rate(std::uint64_t key, Pred pred, int timeout_ms) {
    if (rates_.contains(key) && pred(rates_[key])) return true;
    return wait_for(
        [&](const wire::AllocatorMessage&) { return rates_.contains(key) && pred(rates_[key]); },
        timeout_ms);
  }
  std::optional<std::uint64_t> rate(std::uint64_t key) const {
    auto it = rates_.find(key);
    return it == rates_.end() ? std::nullopt : std::optional(it->second);
  }
  const std::vector<wire::AllocatorMessage>& history() const { return history_; }
  void clear_history() { history_.clear(); }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
  std::uint64_t seq_ = 0;
  std::map<std::uint64_t, std::uint64_t> rates_;
  std::vector<wire::AllocatorMessage> history_;
};

// A scratch directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ft-auth-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
}

// A new key pair: DIR/NAME.key (secret) and the public entry written to
// each of `lists` (with `hosts`, a TOML array, when not empty).
inline curve::ClientKeys make_key(const std::string& dir, const std::string& name,
                           const std::vector<std::string>& lists, const std::string& hosts,
                           const std::string& server_public) {
  const curve::KeyPair k = curve::generate();
  write_file(dir + "/" + name + ".key",
             "public-key = \"" + k.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n", 0600);
  for (const std::string& list : lists) {
    std::string pub = "# " + name + "\npublic-key = \"" + k.public_key + "\"\n";
    if (!hosts.empty()) pub += "hosts = " + hosts + "\n";
    write_file(list + "/" + name + ".pub", pub);
  }
  return {server_public, k, {}};
}

// libzmq decrypts CURVE messages with libsodium in its I/O thread; neither
// is instrumented, so under ThreadSanitizer every read of a received message
// looks like a race (and a run did not finish within ctest's 600 s). The
// release and ASan builds run the CURVE tests.
#if defined(__SANITIZE_THREAD__)
#define FT_SKIP_CURVE_UNDER_TSAN() \
  GTEST_SKIP() << "CURVE under ThreadSanitizer: libzmq and libsodium are not instrumented"
#else
#define FT_SKIP_CURVE_UNDER_TSAN() static_cast<void>(0)
#endif

// An allocator's CURVE keys in a temporary directory: its pair (also in the
// ctl list when `server_known`, so a standby pair's probes are answered),
// the endpoint allow-list `clients`, the flowtune-ctl list `ctl` with an
// operator key `op`, and the files a rotation writes.
struct CurveSetup {
  explicit CurveSetup(bool server_known = false) {
    std::filesystem::create_directory(clients);
    std::filesystem::create_directory(ctl);
    server = make_key(dir.path(), "server", server_known ? std::vector<std::string>{ctl} : std::vector<std::string>{},
                      "", "");
    op = make_key(dir.path(), "op", {ctl}, "", server.own.public_key);
  }
  // An endpoint key NAME for `hosts` (a TOML array), in the clients list.
  curve::ClientKeys endpoint(const std::string& name, const std::string& hosts) const {
    return make_key(dir.path(), name, {clients}, hosts, server.own.public_key);
  }
  std::string key_file(const std::string& name) const { return dir.path() + "/" + name + ".key"; }
  std::string secret_file() const { return key_file("server"); }
  // The allocator's public key as clients read it from a file.
  std::string public_file() const { return dir.path() + "/allocator.pub"; }
  std::vector<std::string> allocator_args() const {
    return {"--curve-secret", secret_file(), "--curve-clients", clients, "--curve-ctl", ctl};
  }
  void write_public(const curve::KeyPair& k) const {
    write_file(public_file(), "public-key = \"" + k.public_key + "\"\n");
  }
  void write_secret(const curve::KeyPair& k) const {
    write_file(secret_file(), "public-key = \"" + k.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n",
               0600);
  }

  TempDir dir;
  std::string clients = dir.path() + "/clients";
  std::string ctl = dir.path() + "/ctl";
  curve::ClientKeys server, op;
};

inline wire::FlowletStart host_flow(std::uint64_t key, std::uint32_t src, std::uint32_t dst) {
  wire::FlowletStart s;
  s.flow_key = key;
  s.endpoints = wire::HostPair{src, dst};
  s.bytes = 10 << 20;
  return s;
}

// Fraction-of-share helpers: rates on a 1 Gbit/s host link with threshold 0.01.
inline bool near(std::uint64_t got, double want, double tol = 0.02) {
  return static_cast<double>(got) > want * (1 - tol) && static_cast<double>(got) < want * (1 + tol);
}

}  // namespace flowtune::daemon::testing
