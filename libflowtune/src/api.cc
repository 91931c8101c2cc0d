// The C API: argument checks, the fd table on the caller's thread, and
// events for the runtime thread. Nothing here blocks on the network, and
// nothing throws across the C boundary.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>

#include "agent_link.h"
#include "flowtune/flowtune.h"
#include "fork_guard.h"
#include "runtime.h"

namespace {

using flowtune::client::Event;
using flowtune::client::FlowletPolicy;
using flowtune::client::SocketRef;

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string default_endpoint_id() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "host");
  std::random_device rd;
  return std::string(host) + "-" + std::to_string(getpid()) + "-" + std::to_string(rd());
}

// The first ft_flowlet_opts had no struct_size: {float weight; uint64_t
// coflow_id;}. Its first word is a weight in [1e-6, 1e6], whose bits
// (>= 0x358637bd) are far above any struct size: so a first word below this
// is a size, and anything else is that first layout.
constexpr std::uint32_t kMaxOptsSize = 0x10000;
struct LegacyOpts {
  float weight;
  std::uint64_t coflow_id;
};

bool valid_weight(float w) {
  return w >= flowtune::wire::kMinWeight && w <= flowtune::wire::kMaxWeight;
}

// Reads a caller's options of any version into *p; FT_EINVAL for bad values.
int policy_of(const ft_flowlet_opts* o, flowtune::client::TenantNames& tenants, FlowletPolicy* p) {
  std::uint32_t size = 0;
  std::memcpy(&size, o, sizeof size);
  if (size >= kMaxOptsSize) {
    LegacyOpts legacy;
    std::memcpy(&legacy, o, sizeof legacy);
    if (!valid_weight(legacy.weight)) return FT_EINVAL;
    p->weight = legacy.weight;
    p->coflow_id = legacy.coflow_id;
    return FT_OK;
  }
  // A struct from a newer header may be longer; fields we know are read
  // only as far as the caller's struct reaches.
  ft_flowlet_opts v;
  ft_flowlet_opts_init(&v);
  if (size < offsetof(ft_flowlet_opts, coflow_id) + sizeof v.coflow_id) return FT_EINVAL;
  std::memcpy(&v, o, std::min<std::size_t>(size, sizeof v));
  if (!valid_weight(v.weight)) return FT_EINVAL;
  if (v.priority_class != FT_CLASS_DEFAULT &&
      (v.priority_class < 0 || v.priority_class >= FT_NUM_CLASSES)) {
    return FT_EINVAL;
  }
  p->weight = v.weight;
  p->coflow_id = v.coflow_id;
  p->priority_class = v.priority_class == FT_CLASS_DEFAULT
                          ? flowtune::wire::kClassUnset
                          : static_cast<std::uint8_t>(v.priority_class);
  p->deadline_ms = v.deadline_ms;
  if (v.tenant != nullptr) {
    const int t = tenants.intern(v.tenant);
    if (t < 0) return FT_EINVAL;
    p->tenant = static_cast<std::uint8_t>(t);
  }
  return FT_OK;
}

// Addresses and ports of a connected IPv4 TCP socket, host byte order.
int tuple_of(int fd, flowtune::wire::FiveTuple* t) {
  int type = 0, proto = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return FT_EBADF;
  len = sizeof proto;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0) return FT_EBADF;
  if (type != SOCK_STREAM || proto != IPPROTO_TCP) return FT_ENOTTCP;
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return FT_EBADF;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return FT_EBADF;
  auto v4 = [](const sockaddr_storage& s, std::uint32_t* ip, std::uint16_t* port) {
    if (s.ss_family == AF_INET) {
      const auto& a = reinterpret_cast<const sockaddr_in&>(s);
      *ip = ntohl(a.sin_addr.s_addr);
      *port = ntohs(a.sin_port);
      return true;
    }
    if (s.ss_family == AF_INET6) {  // IPv4-mapped IPv6 only: the wire carries IPv4
      const auto& a = reinterpret_cast<const sockaddr_in6&>(s);
      if (!IN6_IS_ADDR_V4MAPPED(&a.sin6_addr)) return false;
      std::uint32_t raw;
      std::memcpy(&raw, &a.sin6_addr.s6_addr[12], 4);
      *ip = ntohl(raw);
      *port = ntohs(a.sin6_port);
      return true;
    }
    return false;
  };
  if (!v4(local, &t->src_ip, &t->src_port) || !v4(peer, &t->dst_ip, &t->dst_port)) {
    return FT_ENOTTCP;
  }
  t->protocol = IPPROTO_TCP;
  return FT_OK;
}

}  // namespace

struct ft_client {
  flowtune::client::SocketTable table;
  std::shared_ptr<flowtune::client::TenantNames> tenants =
      std::make_shared<flowtune::client::TenantNames>();
  // The host agent's link when an agent serves this process, else its own
  // runtime (docs/agent.md).
  std::unique_ptr<flowtune::client::Backend> runtime;
  std::uint64_t fork_generation = 0;

  bool forked() const { return flowtune::client::fork_generation() != fork_generation; }
  int push(const Event& e, bool urgent = true) {
    return runtime->push(e, urgent) ? FT_OK : FT_ENOMEM;
  }
  // An event of a registered socket: queued, or, when the queue is full or
  // the socket's earlier events already went there, recorded in the
  // socket's slot, which the runtime sweeps. Never lost, so never an error.
  void deliver(const Event& e, flowtune::client::SocketTable::SpillKind kind, bool urgent = true) {
    if (!table.spilling(e.ref.fd) && runtime->push(e, urgent)) return;
    table.spill(e.ref.fd, kind, e.bytes, e.policy);
    runtime->wake();
  }
  // The registration of fd, or an error for the caller.
  int ref_of(int fd, SocketRef* ref) const {
    if (forked()) return FT_EFORKED;
    const auto r = table.lookup(fd);
    if (!r) return FT_ENOTREG;
    *ref = *r;
    return FT_OK;
  }
};

namespace {

// The host agent's link, started, if an agent serves this process
// (FLOWTUNE_AGENT: its address, "off" for none; unset: the default
// address); null if none listens or it refused this process's settings.
std::unique_ptr<flowtune::client::Backend> agent_link(const ft_config& cfg,
                                                      const flowtune::client::SessionConfig& s,
                                                      const flowtune::client::RuntimeConfig& r,
                                                      ft_client* c) {
  namespace agent = flowtune::client::agent;
  const std::string address = env_or("FLOWTUNE_AGENT", std::string(agent::kDefaultAddress).c_str());
  if (address == "off") return nullptr;
  flowtune::client::AgentLinkConfig a;
  a.address = address;
  a.log_level = r.log_level;
  a.queue_capacity = r.queue_capacity;
  a.hello.min_flowlet_bytes = s.min_flowlet_bytes;
  a.hello.max_rate_bytes_per_sec = s.max_rate_bytes_per_sec;
  a.hello.min_rate_bytes_per_sec = s.min_rate_bytes_per_sec;
  if (cfg.allocator != nullptr) a.allocator = cfg.allocator;
  a.host = s.host;
  auto link = std::make_unique<flowtune::client::AgentLink>(std::move(a), c->table, c->tenants);
  if (link->start() != FT_OK) return nullptr;
  return link;
}

}  // namespace

extern "C" {

void ft_flowlet_opts_init(ft_flowlet_opts* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->weight = 1;
  o->priority_class = FT_CLASS_DEFAULT;
}

namespace {

// A whole decimal count from the environment, or nothing: a sign (which
// strtoull would wrap), other characters or a value past 2^64 - 1 leave
// the default in place.
bool env_count(const char* name, std::uint64_t* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v < '0' || *v > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = n;
  return true;
}

}  // namespace

void ft_config_init(ft_config* cfg) {
  if (cfg == nullptr) return;
  std::memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->allocator = std::getenv("FLOWTUNE_ALLOCATOR");
  cfg->host = std::getenv("FLOWTUNE_HOST");
  cfg->min_flowlet_bytes = 65536;
  std::uint64_t n = 0;
  if (env_count("FLOWTUNE_MIN_FLOWLET_BYTES", &n)) cfg->min_flowlet_bytes = n;
  cfg->heartbeat_ms = 1000;
  cfg->log_level = 2;
  if (const char* v = std::getenv("FLOWTUNE_LOG"); v != nullptr && *v >= '0' && *v <= '4') {
    cfg->log_level = *v - '0';
  }
}

int ft_client_open(const ft_config* cfg, ft_client** out) {
  if (cfg == nullptr || out == nullptr || cfg->struct_size != sizeof(ft_config)) return FT_EINVAL;
  if (cfg->heartbeat_ms == 0 || cfg->log_level < 0) return FT_EINVAL;
  try {
    flowtune::client::SessionConfig s;
    s.endpoint_id = cfg->endpoint_id != nullptr ? cfg->endpoint_id : default_endpoint_id();
    s.host = cfg->host != nullptr ? cfg->host : env_or("FLOWTUNE_HOST", "");
    s.min_flowlet_bytes = cfg->min_flowlet_bytes;
    s.max_rate_bytes_per_sec = cfg->max_rate_bytes_per_sec;
    // A negative value would wrap to no pacing at all: digits only.
    std::uint64_t min_rate = 0;
    if (env_count("FLOWTUNE_MIN_PACING_RATE", &min_rate)) s.min_rate_bytes_per_sec = min_rate;
    s.heartbeat_us = std::uint64_t{cfg->heartbeat_ms} * 1000;
    flowtune::client::RuntimeConfig r;
    r.allocator = cfg->allocator != nullptr ? cfg->allocator
                                            : env_or("FLOWTUNE_ALLOCATOR", "tcp://127.0.0.1:5555");
    r.log_level = cfg->log_level;
    r.heartbeat_ms = cfg->heartbeat_ms;
    // Undocumented in flowtune.h on purpose: a test knob (tiny queues make
    // the overflow path run), a power of two from 2 to 2^20.
    if (const char* v = std::getenv("FLOWTUNE_EVENT_QUEUE"); v != nullptr && *v != '\0') {
      const unsigned long n = std::strtoul(v, nullptr, 10);
      if (n >= 2 && n <= (1ul << 20) && (n & (n - 1)) == 0) r.queue_capacity = n;
    }
    auto c = std::make_unique<ft_client>();
    c->fork_generation = flowtune::client::fork_generation();
    s.tenants = c->tenants;
    c->runtime = agent_link(*cfg, s, r, c.get());
    if (!c->runtime) {
      c->runtime =
          std::make_unique<flowtune::client::Runtime>(std::move(r), std::move(s), c->table);
      if (const int rc = c->runtime->start(); rc != FT_OK) return rc;
    }
    *out = c.release();
    return FT_OK;
  } catch (const std::bad_alloc&) {
    return FT_ENOMEM;
  } catch (...) {
    return FT_ERUNTIME;
  }
}

int ft_client_close(ft_client* c) {
  if (c == nullptr) return FT_EINVAL;
  if (c->forked()) {
    // The runtime thread does not exist in this process: free only memory.
    (void)c->runtime.release();  // its ZeroMQ state belongs to the parent
    delete c;
    return FT_OK;
  }
  (void)c->runtime->stop();
  c->table.release_all();  // remove caps we set
  delete c;
  return FT_OK;
}

int ft_socket_register(ft_client* c, int fd) { return ft_socket_register_opts(c, fd, nullptr); }

int ft_socket_register_opts(ft_client* c, int fd, const ft_flowlet_opts* defaults) {
  if (c == nullptr) return FT_EINVAL;
  if (c->forked()) return FT_EFORKED;
  Event e;
  e.kind = Event::kRegister;
  if (defaults != nullptr) {
    FlowletPolicy p;
    if (const int rc = policy_of(defaults, *c->tenants, &p); rc != FT_OK) return rc;
    e.policy = p;
  }
  if (const int rc = tuple_of(fd, &e.tuple); rc != FT_OK) return rc;
  int mss = 0;
  socklen_t len = sizeof mss;
  if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) == 0 && mss > 0) {
    e.mss = static_cast<std::uint32_t>(mss);
  }
  if (const int rc = c->table.claim(fd, &e.ref); rc != FT_OK) return rc;
  if (const int rc = c->push(e); rc != FT_OK) {
    (void)c->table.release(fd);
    return rc;
  }
  return FT_OK;
}

int ft_socket_unregister(ft_client* c, int fd) {
  if (c == nullptr) return FT_EINVAL;
  SocketRef ref;
  if (const int rc = c->ref_of(fd, &ref); rc != FT_OK) return rc;
  // The slot records the unregistration (and is marked for the runtime's
  // sweep): it cannot be lost to a full queue, so this never fails late.
  if (const int rc = c->table.release(fd); rc != FT_OK) return rc;
  c->runtime->wake();
  return FT_OK;
}

int ft_flowlet_begin(ft_client* c, int fd, uint64_t bytes, const ft_flowlet_opts* opts) {
  if (c == nullptr || bytes == 0) return FT_EINVAL;
  // Before the options: their tenant table's lock may have been held by a
  // thread of the parent at the fork.
  if (c->forked()) return FT_EFORKED;
  Event e;
  e.kind = Event::kBegin;
  if (opts != nullptr) {
    FlowletPolicy p;
    if (const int rc = policy_of(opts, *c->tenants, &p); rc != FT_OK) return rc;
    e.policy = p;
  }
  if (const int rc = c->ref_of(fd, &e.ref); rc != FT_OK) return rc;
  e.bytes = bytes;
  c->table.mark_begin(fd);
  c->deliver(e, flowtune::client::SocketTable::SpillKind::kBegin);
  return FT_OK;
}

int ft_flowlet_sent(ft_client* c, int fd, uint64_t bytes) {
  if (c == nullptr) return FT_EINVAL;
  Event e;
  e.kind = Event::kSent;
  if (const int rc = c->ref_of(fd, &e.ref); rc != FT_OK) return rc;
  if (bytes == 0) return FT_OK;
  e.bytes = bytes;
  c->deliver(e, flowtune::client::SocketTable::SpillKind::kSent, /*urgent=*/false);
  return FT_OK;
}

int ft_flowlet_wrote(ft_client* c, int fd, uint64_t bytes) {
  if (c == nullptr) return FT_EINVAL;
  Event e;
  e.kind = Event::kWrote;
  if (const int rc = c->ref_of(fd, &e.ref); rc != FT_OK) return rc;
  if (bytes == 0) return FT_OK;
  e.bytes = bytes;
  if (c->table.in_flowlet(fd)) {
    // Extending a flowlet in progress: the bytes gather in the socket's slot
    // and one event (which need not wake the runtime) has it collect them,
    // however many writes come before it does.
    if (c->table.add_unreported(fd, bytes) != 0) return FT_OK;
    e.bytes = 0;
    c->deliver(e, flowtune::client::SocketTable::SpillKind::kCollect, /*urgent=*/false);
    return FT_OK;
  }
  c->table.mark_begin(fd);
  c->deliver(e, flowtune::client::SocketTable::SpillKind::kWrote);
  return FT_OK;
}

int ft_flowlet_end(ft_client* c, int fd) {
  if (c == nullptr) return FT_EINVAL;
  Event e;
  e.kind = Event::kEnd;
  if (const int rc = c->ref_of(fd, &e.ref); rc != FT_OK) return rc;
  // The flowlet is closed in the slot first; the end then reaches the
  // runtime through the queue or the slot, so no retry is ever needed.
  if (!c->table.mark_end(fd)) return FT_ENOFLOWLET;
  c->deliver(e, flowtune::client::SocketTable::SpillKind::kEnd);
  return FT_OK;
}

int ft_flowlet_active(ft_client* c, int fd) {
  if (c == nullptr) return FT_EINVAL;
  SocketRef ref;
  if (const int rc = c->ref_of(fd, &ref); rc != FT_OK) return rc;
  return c->table.in_flowlet(fd) ? 1 : 0;
}

int ft_socket_writing(ft_client* c, int fd, int in_call) {
  if (c == nullptr) return FT_EINVAL;
  SocketRef ref;
  if (const int rc = c->ref_of(fd, &ref); rc != FT_OK) return rc;
  c->table.add_writing(fd, in_call ? 1 : -1);
  if (!in_call) return FT_OK;
  return c->table.in_flowlet(fd) ? 1 : 0;
}

int ft_socket_rate(ft_client* c, int fd, uint64_t* bytes_per_sec) {
  if (c == nullptr || bytes_per_sec == nullptr) return FT_EINVAL;
  SocketRef ref;
  if (const int rc = c->ref_of(fd, &ref); rc != FT_OK) return rc;
  // The kernel's value is the truth (what pacing actually applies).
  std::uint64_t v = 0;
  socklen_t len = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &v, &len) != 0) return FT_EBADF;
  if (len == sizeof(std::uint32_t)) v &= 0xffffffffu;
  *bytes_per_sec = (v == ~std::uint64_t{0} || v == 0xffffffffu) ? 0 : v;
  return FT_OK;
}

int ft_client_stats(ft_client* c, ft_stats* out) {
  if (c == nullptr || out == nullptr) return FT_EINVAL;
  if (c->forked()) return FT_EFORKED;
  *out = c->runtime->stats();
  return FT_OK;
}

const char* ft_strerror(int err) {
  switch (err) {
    case FT_OK:
      return "success";
    case FT_EINVAL:
      return "invalid argument";
    case FT_EBADF:
      return "not an open socket";
    case FT_ENOTTCP:
      return "not a connected IPv4 TCP socket";
    case FT_ENOTREG:
      return "socket not registered with this client";
    case FT_EEXIST:
      return "socket already registered";
    case FT_ENOFLOWLET:
      return "no flowlet in progress";
    case FT_ENOMEM:
      return "out of memory or event queue full";
    case FT_ECONNECT:
      return "malformed allocator endpoint";
    case FT_EFORKED:
      return "client belongs to the parent process";
    case FT_ERUNTIME:
      return "runtime thread could not start";
    default:
      return "unknown error";
  }
}

}  // extern "C"
