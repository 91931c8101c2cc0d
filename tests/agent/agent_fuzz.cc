// libFuzzer target over the host agent's side of its processes
// (agent/src/agent_server.cc): a real agent server and runtime, started
// once, whose allocator is unreachable (so the runtime serves, looks and
// ends flowlets, but grants no rates). Each input is one hostile process:
// after a valid hello, its bytes are cut into packets, each a 2-byte
// little-endian length and that many bytes (the last one takes what is
// left), and sent on one SOCK_SEQPACKET connection, which is then closed.
// Checked, beyond nothing crashing or tripping a sanitizer:
//   - every packet the agent sends the process parses as whole records
//     (for_each_record), and each is a welcome, a tick, or a rate, look or
//     ended for an fd the process registered: the agent never speaks to a
//     process of another process's sockets;
//   - the agent keeps serving: after each input a second process's hello
//     is answered with a welcome within 5 s.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent_proto.h"
#include "agent_server.h"
#include "runtime.h"

namespace {

namespace proto = flowtune::client::agent;
using flowtune::agent::Server;
using flowtune::agent::ServerConfig;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "agent_fuzz: %s\n", what);
  std::abort();
}

std::string g_address;

// The agent, started on first use and left running for the process's life.
void start_agent() {
  static bool started = false;
  if (started) return;
  started = true;
  g_address = "@ft-agent-fuzz-" + std::to_string(::getpid());
  auto tenants = std::make_shared<flowtune::client::TenantNames>();
  ServerConfig sc;
  sc.listen = g_address;
  sc.allocator = "ipc:///nonexistent/ft-agent-fuzz.sock";
  sc.session.min_flowlet_bytes = 10000;
  sc.session.min_rate_bytes_per_sec = 16000;
  sc.max_sockets_per_process = 256;
  sc.log_level = 0;
  auto* server = new Server(sc, tenants);  // lives as long as the process
  if (!server->open()) fail("the agent cannot listen");
  flowtune::client::SessionConfig s;
  s.min_flowlet_bytes = sc.session.min_flowlet_bytes;
  s.min_rate_bytes_per_sec = sc.session.min_rate_bytes_per_sec;
  s.tenants = tenants;
  flowtune::client::RuntimeConfig rc;
  rc.allocator = sc.allocator;
  rc.log_level = 0;
  rc.private_fd_table = false;
  rc.nap = false;
  auto* table = new flowtune::client::SocketTable;
  auto* runtime = new flowtune::client::Runtime(rc, s, *table, server);
  server->attach(runtime);
  if (runtime->start() != FT_OK) fail("the agent's runtime did not start");
}

int connect_agent() {
  sockaddr_un a;
  unsigned len = 0;
  if (!proto::parse_address(g_address, &a, &len)) fail("bad agent address");
  const int s = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), len) != 0) fail("cannot connect to the agent");
  timeval tv{5, 0};
  (void)::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

std::vector<std::uint8_t> hello_packet() {
  proto::Record hello;
  hello.op = proto::Op::kHello;
  hello.value = proto::kProtocolVersion;
  proto::HelloBody body;
  body.min_flowlet_bytes = 10000;
  body.min_rate_bytes_per_sec = 16000;
  std::vector<std::uint8_t> packet;
  proto::append(packet, hello, std::string_view(reinterpret_cast<const char*>(&body), sizeof body));
  return packet;
}

// Sends a hello and waits for the welcome; false if the agent refused.
bool greet(int s) {
  const std::vector<std::uint8_t> hello = hello_packet();
  if (::send(s, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    fail("cannot send a hello");
  }
  std::uint8_t buf[proto::kMaxPacket];
  const ssize_t n = ::recv(s, buf, sizeof buf, 0);
  if (n <= 0) fail("the agent did not answer a hello within 5 s");
  bool welcomed = false;
  const bool ok = proto::for_each_record(buf, static_cast<std::size_t>(n),
                                         [&](const proto::Record& r, std::string_view) {
                                           if (r.op == proto::Op::kWelcome) welcomed = r.value == 1;
                                         });
  if (!ok) fail("the agent's welcome is not whole records");
  return welcomed;
}

// What the agent sent the hostile process so far: whole records, about
// its own sockets only.
void check_replies(int s, const std::set<std::int32_t>& registered) {
  std::uint8_t buf[proto::kMaxPacket];
  for (;;) {
    const ssize_t n = ::recv(s, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return;
    const bool ok = proto::for_each_record(
        buf, static_cast<std::size_t>(n), [&](const proto::Record& r, std::string_view) {
          if (r.op == proto::Op::kRate || r.op == proto::Op::kLook || r.op == proto::Op::kEnded) {
            if (registered.count(r.fd) == 0)
              fail("the agent spoke of a socket the process never registered");
          } else if (r.op != proto::Op::kTick && r.op != proto::Op::kWelcome) {
            fail("the agent sent a process-side record");
          }
        });
    if (!ok) fail("the agent sent a packet that is not whole records");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  start_agent();
  const int hostile = connect_agent();
  if (!greet(hostile)) fail("a valid hello was refused");
  std::set<std::int32_t> registered;
  std::size_t at = 0;
  while (at < size) {
    std::size_t len = size - at;
    if (size - at >= 2) {
      len = std::min<std::size_t>(data[at] | (std::size_t{data[at + 1]} << 8), size - at - 2);
      at += 2;
    }
    // The fds it registers, as the agent reads them (a malformed packet's
    // records up to the fault may still have been taken).
    (void)proto::for_each_record(data + at, len, [&](const proto::Record& r, std::string_view) {
      if (r.op == proto::Op::kRegister) registered.insert(r.fd);
    });
    if (len > 0) (void)::send(hostile, data + at, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    at += len;
    check_replies(hostile, registered);
  }
  const int probe = connect_agent();
  if (!greet(probe)) fail("the agent refused a second process after a hostile one");
  check_replies(hostile, registered);
  ::close(probe);
  ::close(hostile);
  return 0;
}
