// libflowtune-preload.so: Flowtune for unmodified binaries. It wraps the
// libc calls that push bytes into TCP sockets; each wrapper calls the real
// function first, then (errno saved and restored) tells libflowtune how many
// bytes the kernel took on a managed socket. Flowlets follow from that: a
// write past the mice gate (mice_gate.h) on a socket with no flowlet in
// progress begins one, more writes extend it, and the library ends it as
// the queue drains (advance end). Writes the gate holds back are mice:
// never scheduled, and they cost the gate's arithmetic alone.
//
// What a wrapper costs on a fd it does not manage: one table lookup. A fd is
// classified once (TCP over IPv4, connected, not the allocator's own
// connection) and the class cached until the application closes or dup2s
// over it; fds that name one socket form one group (SO_COOKIE) with one
// bucket and one registration. A socket is registered, and the client
// opened, only when a write first passes the gate, so a program that never
// uses TCP, or sends only mice, never connects to the allocator. After
// fork() the child forgets the parent's client and groups and opens its own
// client when it needs one (docs/preload.md, "Processes").
// Nothing here changes what the application sees: return values, errno,
// partial writes, blocking behaviour and signals are those of the real call.
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/sendfile.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "flowtune/flowtune.h"
#include "mice_gate.h"
#include "socket_policy.h"

namespace flowtune::client {
bool runtime_shares_fd_table();  // libflowtune/src/runtime.h
}  // namespace flowtune::client

#define FT_SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---- the real functions ----

struct Real {
  ssize_t (*send)(int, const void*, size_t, int);
  ssize_t (*sendto)(int, const void*, size_t, int, const sockaddr*, socklen_t);
  ssize_t (*sendmsg)(int, const msghdr*, int);
  int (*sendmmsg)(int, mmsghdr*, unsigned, int);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*writev)(int, const iovec*, int);
  ssize_t (*sendfile)(int, int, off_t*, size_t);
  ssize_t (*sendfile64)(int, int, off64_t*, size_t);
  ssize_t (*splice)(int, loff_t*, int, loff_t*, size_t, unsigned);
  int (*close)(int);
  int (*close_range)(unsigned, unsigned, int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  void (*closefrom)(int);
  int (*socket)(int, int, int);
  int (*accept)(int, sockaddr*, socklen_t*);
  int (*accept4)(int, sockaddr*, socklen_t*, int);
  int (*pthread_create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  int (*eventfd)(unsigned, int);
  int (*epoll_create)(int);
  int (*epoll_create1)(int);
  int (*timerfd_create)(int, int);
  int (*signalfd)(int, const sigset_t*, int);
  int (*pipe)(int*);
  int (*pipe2)(int*, int);
  int (*socketpair)(int, int, int, int*);
};
Real real;
std::atomic<bool> g_resolved{false};

template <typename F>
void resolve_one(F* slot, const char* name, void* ours) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == ours) {
    std::fprintf(stderr, "flowtune-preload: dlsym(%s) returned the shim itself; giving up\n", name);
    std::abort();
  }
  *slot = reinterpret_cast<F>(p);
}

extern "C" ssize_t send(int, const void*, size_t, int);
extern "C" ssize_t sendto(int, const void*, size_t, int, const sockaddr*, socklen_t);
extern "C" ssize_t sendmsg(int, const msghdr*, int);
extern "C" int sendmmsg(int, mmsghdr*, unsigned, int);
extern "C" ssize_t write(int, const void*, size_t);
extern "C" ssize_t writev(int, const iovec*, int);
extern "C" ssize_t sendfile(int, int, off_t*, size_t);
extern "C" ssize_t sendfile64(int, int, off64_t*, size_t);
extern "C" ssize_t splice(int, loff_t*, int, loff_t*, size_t, unsigned);
extern "C" int close(int);
extern "C" int close_range(unsigned, unsigned, int);
extern "C" int dup2(int, int);
extern "C" int dup3(int, int, int);
extern "C" void closefrom(int);
extern "C" int socket(int, int, int);
extern "C" int accept(int, sockaddr*, socklen_t*);
extern "C" int accept4(int, sockaddr*, socklen_t*, int);
extern "C" int pthread_create(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
extern "C" int eventfd(unsigned, int);
extern "C" int epoll_create(int);
extern "C" int epoll_create1(int);
extern "C" int timerfd_create(int, int);
extern "C" int signalfd(int, const sigset_t*, int);
extern "C" int pipe(int*);
extern "C" int pipe2(int*, int);
extern "C" int socketpair(int, int, int, int*);

// Resolved in the constructor; a wrapper called before it (another
// library's constructor) resolves on the spot. dlsym does not write to
// sockets, so this cannot recurse into a wrapper.
void resolve() {
  if (g_resolved.load(std::memory_order_acquire)) return;
  resolve_one(&real.send, "send", reinterpret_cast<void*>(&send));
  resolve_one(&real.sendto, "sendto", reinterpret_cast<void*>(&sendto));
  resolve_one(&real.sendmsg, "sendmsg", reinterpret_cast<void*>(&sendmsg));
  resolve_one(&real.sendmmsg, "sendmmsg", reinterpret_cast<void*>(&sendmmsg));
  resolve_one(&real.write, "write", reinterpret_cast<void*>(&write));
  resolve_one(&real.writev, "writev", reinterpret_cast<void*>(&writev));
  resolve_one(&real.sendfile, "sendfile", reinterpret_cast<void*>(&sendfile));
  resolve_one(&real.sendfile64, "sendfile64", reinterpret_cast<void*>(&sendfile64));
  resolve_one(&real.splice, "splice", reinterpret_cast<void*>(&splice));
  resolve_one(&real.close, "close", reinterpret_cast<void*>(&close));
  resolve_one(&real.close_range, "close_range", reinterpret_cast<void*>(&close_range));
  resolve_one(&real.dup2, "dup2", reinterpret_cast<void*>(&dup2));
  resolve_one(&real.dup3, "dup3", reinterpret_cast<void*>(&dup3));
  resolve_one(&real.closefrom, "closefrom", reinterpret_cast<void*>(&closefrom));
  resolve_one(&real.socket, "socket", reinterpret_cast<void*>(&socket));
  resolve_one(&real.accept, "accept", reinterpret_cast<void*>(&accept));
  resolve_one(&real.accept4, "accept4", reinterpret_cast<void*>(&accept4));
  resolve_one(&real.pthread_create, "pthread_create", reinterpret_cast<void*>(&pthread_create));
  resolve_one(&real.eventfd, "eventfd", reinterpret_cast<void*>(&eventfd));
  resolve_one(&real.epoll_create, "epoll_create", reinterpret_cast<void*>(&epoll_create));
  resolve_one(&real.epoll_create1, "epoll_create1", reinterpret_cast<void*>(&epoll_create1));
  resolve_one(&real.timerfd_create, "timerfd_create", reinterpret_cast<void*>(&timerfd_create));
  resolve_one(&real.signalfd, "signalfd", reinterpret_cast<void*>(&signalfd));
  resolve_one(&real.pipe, "pipe", reinterpret_cast<void*>(&pipe));
  resolve_one(&real.pipe2, "pipe2", reinterpret_cast<void*>(&pipe2));
  resolve_one(&real.socketpair, "socketpair", reinterpret_cast<void*>(&socketpair));
  g_resolved.store(true, std::memory_order_release);
}

// ---- fd classes ----

// kMouse: a socket the shim would manage, not registered with the library
// (and so no client opened for it) while its writes stay mice (the gate
// below); its first write past the gate registers it.
enum : std::uint8_t { kUnknown = 0, kIgnored = 1, kManaged = 2, kAlias = 3, kMouse = 4 };
constexpr int kMaxFd = 1 << 20;  // as libflowtune's table
std::atomic<std::uint8_t> g_class[kMaxFd];
// For a kAlias fd: the managed fd of the same socket.
std::atomic<int> g_owner[kMaxFd];

// ---- the mice gate (mice_gate.h) ----
//
// A mouse costs a clock read (vDSO) and two relaxed loads and stores here:
// no event, no wake-up, no syscall. The buckets are shared racily by
// threads writing one fd: a lost update misjudges one write, never bytes.
std::atomic<std::uint64_t> g_mouse_level[kMaxFd];  // bytes
std::atomic<std::uint64_t> g_mouse_ns[kMaxFd];     // CLOCK_MONOTONIC
std::uint64_t g_min_flowlet_bytes = 65536;
std::uint64_t g_mice_bytes_per_sec = 100'000'000 / 8;  // FLOWTUNE_MICE_MBPS

inline std::uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// 0: a mouse. Otherwise the bytes the flowlet that begins now declares.
inline std::uint64_t mouse_gate(int fd, std::size_t len) {
  flowtune::preload::MiceBucket b{g_mouse_level[fd].load(std::memory_order_relaxed),
                                  g_mouse_ns[fd].load(std::memory_order_relaxed)};
  const std::uint64_t gated =
      flowtune::preload::mice_gate_add(b, mono_ns(), len, g_min_flowlet_bytes, g_mice_bytes_per_sec);
  g_mouse_level[fd].store(b.level, std::memory_order_relaxed);
  g_mouse_ns[fd].store(b.at_ns, std::memory_order_relaxed);
  return gated;
}

// The highest fd ever classified: bounds close_range's scan.
std::atomic<int> g_max_fd{-1};

// The library's own descriptors, recorded only where its runtime shares the
// application's fd table (pidfd_getfd refused; see docs/preload.md): the
// wrappers of the calls that create descriptors mark what internal threads
// create, and close, close_range and closefrom leave those alone. With the
// private table (the rule) nothing is marked and nothing is skipped.
std::atomic<bool> g_ours[kMaxFd];
std::atomic<int> g_max_ours{-1};

// Set while the shim itself runs: calls it makes reach the real functions.
// initial-exec: the shim is loaded at start-up (LD_PRELOAD), so its TLS is
// static and a lookup is one load, not a __tls_get_addr call.
// Set for good in the library's own threads (internal threads): the
// runtime thread and ZeroMQ's I/O threads work in a private fd table, whose
// numbers mean nothing in g_class; a thread created while t_inside is set
// (the client opens under Inside, and ZeroMQ's threads are created by the
// runtime thread) starts with it set, see the pthread_create wrapper.
__attribute__((tls_model("initial-exec"))) thread_local bool t_inside = false;

struct Inside {
  bool was = t_inside;
  int saved_errno = errno;
  Inside() { t_inside = true; }
  ~Inside() {
    t_inside = was;
    errno = saved_errno;
  }
};

// ---- the client ----

std::atomic<ft_client*> g_client{nullptr};
std::atomic<bool> g_disabled{false};
// Held while a client opens. A fork while another thread holds it leaves
// the child's copy locked with no thread to unlock it: the child makes it
// anew (after_fork_in_child), as it does every lock of the shim.
pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
// This process's pid: set at load and in every child fork() makes. A child
// of vfork(), posix_spawn or a raw clone() runs no fork handler, shares or
// copies this memory and still sees the parent's pid here: the shim leaves
// the parent's state alone there (see this_process()).
pid_t g_pid = 0;

// False in a child that no fork handler told of (vfork, posix_spawn, raw
// clone): it must not open a client, nor change what the parent's memory
// says of descriptors, which under vfork it shares. One getpid() syscall:
// called only where a registration or a managed socket's close happens.
inline bool this_process() { return getpid() == g_pid; }
// The allocator's tcp:// address, excluded: set when the client opens,
// read by every thread that classifies a fd.
std::atomic<std::uint32_t> g_allocator_ip{0};
std::atomic<std::uint16_t> g_allocator_port{0};

void parse_allocator(const char* ep) {
  // tcp://A.B.C.D:PORT; anything else (ipc://) needs no exclusion.
  if (ep == nullptr || std::strncmp(ep, "tcp://", 6) != 0) return;
  std::string s(ep + 6);
  const auto colon = s.rfind(':');
  if (colon == std::string::npos) return;
  in_addr a{};
  if (inet_pton(AF_INET, s.substr(0, colon).c_str(), &a) != 1) return;
  g_allocator_ip.store(ntohl(a.s_addr), std::memory_order_relaxed);
  g_allocator_port.store(static_cast<std::uint16_t>(std::atoi(s.c_str() + colon + 1)),
                         std::memory_order_relaxed);
}

pid_t g_client_pid = 0;

// At exit the client's final ends go out (ZeroMQ lingers only if the
// allocator answered, so an absent allocator does not delay the exit).
void close_client_at_exit() {
  ft_client* c = g_client.exchange(nullptr);
  if (c != nullptr && g_client_pid == getpid()) {
    Inside guard;
    ft_client_close(c);
  }
}

// The configuration as the environment held it when the shim was loaded:
// some programs (nginx) replace their environment before their first send.
// Plain arrays, so nothing depends on the order of static initializers.
ft_config g_startup_cfg;
bool g_have_startup_cfg = false;
char g_startup_allocator[1024];
char g_startup_host[256];

bool copy_env(const char* v, char* buf, std::size_t size) {
  if (v == nullptr) return true;
  const std::size_t n = std::strlen(v);
  if (n >= size) return false;
  std::memcpy(buf, v, n + 1);
  return true;
}

// Per-socket policy (socket_policy.h), read with the configuration; null:
// none set (or a bad one, said once), sockets register without options.
const flowtune::preload::PolicyConfig* g_policy = nullptr;

void snapshot_policy(int log_level) {
  std::string error;
  auto p = flowtune::preload::parse_policy(flowtune::preload::PolicyEnv::from_environment(), &error);
  if (!p) {
    if (log_level >= 1) {
      std::fprintf(stderr, "flowtune-preload: %s; sockets get the allocator's default policy\n",
                   error.c_str());
    }
    return;
  }
  if (!p->empty()) g_policy = new flowtune::preload::PolicyConfig(std::move(*p));
}

// FLOWTUNE_MICE_MBPS: whole megabits a second, 1 to 10^6 (1 Tbit/s).
void snapshot_mice_rate(int log_level) {
  const char* v = std::getenv("FLOWTUNE_MICE_MBPS");
  if (v == nullptr || *v == '\0') return;
  char* end = nullptr;
  const unsigned long long mbps = std::strtoull(v, &end, 10);
  if (*v < '0' || *v > '9' || *end != '\0' || mbps == 0 || mbps > 1'000'000) {
    if (log_level >= 1) {
      std::fprintf(stderr,
                   "flowtune-preload: FLOWTUNE_MICE_MBPS=%s is not a whole number of Mbit/s "
                   "from 1 to 1000000; using 100\n",
                   v);
    }
    return;
  }
  g_mice_bytes_per_sec = mbps * 1'000'000 / 8;
}

void snapshot_config() {
  ft_config cfg;
  ft_config_init(&cfg);
  snapshot_policy(cfg.log_level);
  snapshot_mice_rate(cfg.log_level);
  g_min_flowlet_bytes = cfg.min_flowlet_bytes;
  if (!copy_env(cfg.allocator, g_startup_allocator, sizeof g_startup_allocator) ||
      !copy_env(cfg.host, g_startup_host, sizeof g_startup_host)) {
    return;  // too long to keep: read the environment when the client opens
  }
  if (cfg.allocator != nullptr) cfg.allocator = g_startup_allocator;
  if (cfg.host != nullptr) cfg.host = g_startup_host;
  g_startup_cfg = cfg;
  g_have_startup_cfg = true;
}

ft_client* client() {
  ft_client* c = g_client.load(std::memory_order_acquire);
  if (c != nullptr || g_disabled.load(std::memory_order_relaxed)) return c;
  if (!this_process()) return nullptr;
  pthread_mutex_lock(&g_open_lock);
  c = g_client.load(std::memory_order_relaxed);
  if (c == nullptr && !g_disabled.load(std::memory_order_relaxed)) {
    ft_config cfg;
    if (g_have_startup_cfg) {
      cfg = g_startup_cfg;
    } else {
      ft_config_init(&cfg);
    }
    parse_allocator(cfg.allocator != nullptr ? cfg.allocator : "tcp://127.0.0.1:5555");
    if (const int rc = ft_client_open(&cfg, &c); rc != FT_OK) {
      if (cfg.log_level >= 1) {
        std::fprintf(stderr, "flowtune-preload: running without Flowtune: %s\n", ft_strerror(rc));
      }
      g_disabled.store(true);
      c = nullptr;
    } else {
      g_client_pid = getpid();
      g_client.store(c, std::memory_order_release);
      static bool registered = false;
      if (!registered) {
        registered = true;
        std::atexit(close_client_at_exit);
      }
    }
  }
  pthread_mutex_unlock(&g_open_lock);
  return c;
}

// A connected IPv4 TCP socket that is not our own allocator connection.
bool manageable(int fd) {
  int type = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return false;
  sockaddr_storage peer{};
  socklen_t pl = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
  if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) return false;
  const std::uint16_t port = g_allocator_port.load(std::memory_order_relaxed);
  if (peer.ss_family == AF_INET && port != 0) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(peer);
    if (ntohl(a.sin_addr.s_addr) == g_allocator_ip.load(std::memory_order_relaxed) &&
        ntohs(a.sin_port) == port) {
      return false;
    }
  }
  return true;
}

// A socket reached through several fds (dup, dup2, F_DUPFD, SCM_RIGHTS) is
// one group, keyed by SO_COOKIE (which names the socket itself): its fds
// share one mice bucket, the owner's, and once the socket is registered
// (by whichever fd first wrote past the gate, which becomes the owner) one
// registration, so the socket has one flowlet and one pacing rate. Every
// member's g_owner names the owner; the owner's class is kMouse or
// kManaged, the others' kMouse or kAlias. Classes of grouped fds change
// only under g_sockets_lock. Maps are made lazily (no static constructors
// to order) and dropped, not freed, in a forked child.
struct SocketFds {
  int owner;
  bool registered = false;
  std::vector<int> others;
};
pthread_mutex_t g_sockets_lock = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<std::uint64_t, SocketFds>* g_by_cookie = nullptr;
std::unordered_map<int, std::uint64_t>* g_cookie_of = nullptr;

struct SocketsLock {
  SocketsLock() {
    pthread_mutex_lock(&g_sockets_lock);
    if (g_by_cookie == nullptr) {
      g_by_cookie = new std::unordered_map<std::uint64_t, SocketFds>();
      g_cookie_of = new std::unordered_map<int, std::uint64_t>();
    }
  }
  ~SocketsLock() { pthread_mutex_unlock(&g_sockets_lock); }
};

// fd's group, or null (no cookie, or none recorded). Under SocketsLock.
SocketFds* group_of(int fd) {
  const auto c = g_cookie_of->find(fd);
  if (c == g_cookie_of->end()) return nullptr;
  const auto it = g_by_cookie->find(c->second);
  return it == g_by_cookie->end() ? nullptr : &it->second;
}

int register_with_policy(ft_client* c, int fd) {
  if (g_policy == nullptr) return ft_socket_register(c, fd);
  flowtune::preload::SocketEnds ends;
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) == 0 &&
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) == 0) {
    if (local.ss_family == AF_INET && peer.ss_family == AF_INET) {
      const auto& l = reinterpret_cast<const sockaddr_in&>(local);
      const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
      ends = {true, ntohl(l.sin_addr.s_addr), ntohl(p.sin_addr.s_addr), ntohs(l.sin_port),
              ntohs(p.sin_port)};
    } else if (local.ss_family == AF_INET6 && peer.ss_family == AF_INET6) {
      ends.sport = ntohs(reinterpret_cast<const sockaddr_in6&>(local).sin6_port);
      ends.dport = ntohs(reinterpret_cast<const sockaddr_in6&>(peer).sin6_port);
    }
  }
  const flowtune::preload::SocketPolicy p = g_policy->for_socket(ends);
  ft_flowlet_opts opts;
  ft_flowlet_opts_init(&opts);
  opts.priority_class = p.priority_class;
  opts.weight = p.weight;
  opts.deadline_ms = p.deadline_ms;
  opts.coflow_id = p.coflow_id;
  opts.tenant = p.tenant.empty() ? nullptr : p.tenant.c_str();
  return ft_socket_register_opts(c, fd, &opts);
}

// Registers fd's socket with fd as its owner, unless a concurrent close
// forgot fd or another of its fds registered it first (then fd's class, as
// set by that thread, stands). Under SocketsLock: two fds of one socket
// cannot both register, and a close cannot slip between the registration
// and the classes it sets.
std::uint8_t register_socket(ft_client* c, int fd) {
  SocketsLock lock;
  const std::uint8_t now = g_class[fd].load(std::memory_order_relaxed);
  if (now != kMouse) return now;
  SocketFds* g = group_of(fd);
  const int rc = register_with_policy(c, fd);
  if (rc != FT_OK && rc != FT_EEXIST) return kMouse;  // stays a mouse: never scheduled
  g_owner[fd].store(fd, std::memory_order_relaxed);
  g_class[fd].store(kManaged, std::memory_order_relaxed);
  if (g == nullptr) return kManaged;
  // The old owner (if another fd) and every other member become aliases.
  if (g->owner != fd) {
    g->others.erase(std::remove(g->others.begin(), g->others.end(), fd), g->others.end());
    g->others.push_back(g->owner);
    g->owner = fd;
  }
  g->registered = true;
  for (const int m : g->others) {
    g_owner[m].store(fd, std::memory_order_relaxed);
    g_class[m].store(kAlias, std::memory_order_relaxed);
  }
  return kManaged;
}

void note_seen(int fd) {
  int seen = g_max_fd.load(std::memory_order_relaxed);
  while (fd > seen && !g_max_fd.compare_exchange_weak(seen, fd)) {
  }
}

void leave_group(int fd);  // below, with forget()

// A fd's first write: a socket the shim would manage joins its socket's
// group (an alias if the socket is registered, else a mouse sharing the
// owner's bucket) or starts one as its owner, a mouse with an empty bucket.
// No client is opened here. Not in a child that no fork handler told of:
// its writes there go unmanaged, and the parent's memory unchanged.
std::uint8_t classify(int fd) {
  if (!this_process()) return kIgnored;
  if (!manageable(fd)) {
    g_class[fd].store(kIgnored, std::memory_order_relaxed);
    note_seen(fd);
    return kIgnored;
  }
  std::uint64_t cookie = 0;
  socklen_t len = sizeof cookie;
  const bool have_cookie = getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &len) == 0;
  g_mouse_level[fd].store(0, std::memory_order_relaxed);
  g_mouse_ns[fd].store(0, std::memory_order_relaxed);
  SocketsLock lock;
  leave_group(fd);  // a membership a close the shim did not see left behind
  std::uint8_t cls = kMouse;
  g_owner[fd].store(fd, std::memory_order_relaxed);
  if (have_cookie) {
    (*g_cookie_of)[fd] = cookie;
    auto [it, fresh] = g_by_cookie->try_emplace(cookie, SocketFds{fd, false, {}});
    if (!fresh) {
      it->second.others.push_back(fd);
      g_owner[fd].store(it->second.owner, std::memory_order_relaxed);
      if (it->second.registered) cls = kAlias;
    }
  }
  g_class[fd].store(cls, std::memory_order_relaxed);
  note_seen(fd);
  return cls;
}

// A kMouse fd whose write passed the gate: its socket is registered now,
// with fd as its owner (or fd turned out an alias meanwhile).
std::uint8_t promote(int fd) {
  if (!this_process()) return kMouse;
  ft_client* c = client();  // outside SocketsLock: it takes the open lock
  if (c == nullptr) return kMouse;
  return register_socket(c, fd);
}

// Around a real call that may move `len` bytes into fd. Before it: if the
// socket has no flowlet in progress, the write goes through the mice gate;
// past it a flowlet begins now with the gate's bytes, so the allocator
// hears of it while the bytes go out (a blocking write of megabytes would
// otherwise be over before it was reported). After it: the bytes are
// counted; on the coalesced path (a flowlet in progress) that is the only
// work, one event. The end follows from the socket's queue.
struct Pending {
  ft_client* client = nullptr;  // null: not managed, or a mouse of a kMouse fd
  int fd = -1;                  // the registered fd of the socket
  std::uint64_t began = 0;      // bytes of the flowlet begun before the call
  bool mouse = false;           // a mouse on a registered socket: count nothing
  bool marked = false;          // ft_socket_writing(1) done: undo after the call
};

// The registered socket's side of before(): marks the call in progress (a
// blocking write reports its bytes only when it returns; meanwhile the
// library must not end the flowlet) and begins a flowlet if none is in
// progress and the gate lets the write through (`gated`: its bytes).
inline void before_managed(Pending& p, std::size_t len, std::uint64_t gated) {
  p.client = g_client.load(std::memory_order_acquire);
  if (p.client == nullptr) return;
  const int active = ft_socket_writing(p.client, p.fd, 1);
  p.marked = active >= 0;
  if (active != 0) return;
  if (gated == 0) gated = mouse_gate(p.fd, len);
  if (gated == 0) {
    p.mouse = true;
    return;
  }
  Inside guard;  // a beginning may wake the runtime (a syscall)
  if (ft_flowlet_begin(p.client, p.fd, gated, nullptr) == FT_OK) p.began = gated;
}

inline Pending before(int fd, std::size_t len) {
  Pending p;
  if (len == 0 || fd < 0 || fd >= kMaxFd || t_inside) return p;
  std::uint8_t cls = g_class[fd].load(std::memory_order_relaxed);
  if (cls == kIgnored) return p;
  if (cls == kUnknown) {
    Inside guard;  // classifying makes syscalls: keep the caller's errno
    cls = classify(fd);
  }
  std::uint64_t gated = 0;
  if (cls == kMouse) {
    // The socket's bucket is its owner's, whichever of its fds writes.
    gated = mouse_gate(g_owner[fd].load(std::memory_order_relaxed), len);
    if (gated == 0) return p;  // the common case of small-request servers
    Inside guard;
    cls = promote(fd);
  }
  p.fd = fd;
  if (cls == kAlias) {
    p.fd = g_owner[fd].load(std::memory_order_relaxed);
    cls = g_class[p.fd].load(std::memory_order_relaxed);
  }
  if (cls != kManaged) return p;
  before_managed(p, len, gated);
  return p;
}

inline void after(const Pending& p, ssize_t n) {
  if (p.client == nullptr) return;
  const int fd = p.fd;
  // The calls below make a syscall only when they wake the runtime (an
  // event past a full queue, a flowlet the runtime ended meanwhile), but
  // the caller's errno is the real call's whatever they do.
  const int saved = errno;
  if (p.began != 0) {
    // All the flowlet's bytes count as handed over even after a partial
    // write: whether the flowlet is over is decided by the socket's queue,
    // not by these counts, and the application's retry of the rest extends
    // the flowlet.
    ft_flowlet_sent(p.client, fd, p.began);
  } else if (n > 0 && !p.mouse) {
    ft_flowlet_wrote(p.client, fd, static_cast<std::uint64_t>(n));
  }
  if (p.marked) ft_socket_writing(p.client, fd, 0);
  errno = saved;
}

// One wrapper's body: the real call between before() and after().
template <typename Call>
inline auto around(int fd, std::size_t len, Call call) {
  resolve();
  const Pending p = before(fd, len);
  const auto n = call();
  after(p, static_cast<ssize_t>(n));
  return n;
}

std::size_t iov_bytes(const iovec* iov, std::size_t n) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += iov[i].iov_len;
  return total;
}

// fd leaves its socket's group (under SocketsLock). When the registered
// owner leaves, the group goes: the other members (its aliases) classify
// anew at their next write. An unregistered owner hands the group, and
// the bucket's role, to another member.
void leave_group(int fd) {
  const auto c = g_cookie_of->find(fd);
  if (c == g_cookie_of->end()) return;
  const auto it = g_by_cookie->find(c->second);
  g_cookie_of->erase(c);
  if (it == g_by_cookie->end()) return;
  SocketFds& g = it->second;
  if (g.owner != fd) {
    g.others.erase(std::remove(g.others.begin(), g.others.end(), fd), g.others.end());
    return;
  }
  if (g.registered || g.others.empty()) {
    for (const int m : g.others) {
      g_class[m].store(kUnknown, std::memory_order_relaxed);
      g_cookie_of->erase(m);
    }
    g_by_cookie->erase(it);
    return;
  }
  g.owner = g.others.back();
  g.others.pop_back();
  g_owner[g.owner].store(g.owner, std::memory_order_relaxed);
  for (const int m : g.others) g_owner[m].store(g.owner, std::memory_order_relaxed);
}

// Before fd stops naming its socket (close, dup2 over it).
inline void forget(int fd) {
  if (fd < 0 || fd >= kMaxFd) return;
  const std::uint8_t seen = g_class[fd].load(std::memory_order_relaxed);
  if (seen == kUnknown) return;
  if (seen == kIgnored) {
    std::uint8_t expected = kIgnored;
    g_class[fd].compare_exchange_strong(expected, kUnknown, std::memory_order_relaxed);
    return;
  }
  // A vfork child closing its copy must not change the parent's groups.
  if (!this_process()) return;
  Inside guard;
  bool unregister = false;
  {
    SocketsLock lock;
    const std::uint8_t cls = g_class[fd].exchange(kUnknown, std::memory_order_relaxed);
    if (cls == kMouse || cls == kManaged || cls == kAlias) leave_group(fd);
    unregister = cls == kManaged;  // the registered owner
  }
  if (!unregister) return;
  if (ft_client* c = g_client.load(std::memory_order_acquire)) ft_socket_unregister(c, fd);
}

// Every lock the shim holds is made anew here, and what it guarded is
// dropped: the thread that held it at the fork does not exist in the child.
// g_open_lock: a thread opening the client (the process's first managed
// write) while another forked left the child's copy locked, and the child
// hung at its first write. g_sockets_lock: a thread registering or closing
// a socket. The library's own state needs no handler here: a client opened
// before the fork answers FT_EFORKED in the child (api.cc), and the shim
// never calls it again. Nothing here opens or closes a descriptor: the
// child's table is exactly the parent's.
void after_fork_in_child() {
  g_pid = getpid();
  pthread_mutex_init(&g_open_lock, nullptr);
  // The parent's client has no runtime thread here; its memory is left
  // alone. Every socket's class becomes unknown (its group is dropped with
  // the maps below), to be classified anew.
  g_client.store(nullptr);
  g_disabled.store(false);
  const int max_seen = g_max_fd.load(std::memory_order_relaxed);
  for (int fd = 0; fd <= max_seen && fd < kMaxFd; ++fd) {
    const std::uint8_t cls = g_class[fd].load(std::memory_order_relaxed);
    if (cls != kIgnored) g_class[fd].store(kUnknown, std::memory_order_relaxed);
  }
  pthread_mutex_init(&g_sockets_lock, nullptr);
  g_by_cookie = nullptr;
  g_cookie_of = nullptr;
  // Where the runtime shared the table, the library's descriptors are
  // copies here that no thread uses: the child's own, to close as it likes.
  const int max_ours = g_max_ours.exchange(-1, std::memory_order_relaxed);
  for (int fd = 0; fd <= max_ours && fd < kMaxFd; ++fd) {
    g_ours[fd].store(false, std::memory_order_relaxed);
  }
}

__attribute__((constructor)) void init() {
  g_pid = getpid();
  resolve();
  snapshot_config();
  pthread_atfork(nullptr, nullptr, after_fork_in_child);
}

}  // namespace

// ---- wrappers ----

FT_SHIM_EXPORT ssize_t send(int fd, const void* buf, size_t len, int flags) {
  return around(fd, len, [&] { return real.send(fd, buf, len, flags); });
}

FT_SHIM_EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags, const sockaddr* to,
                              socklen_t tolen) {
  return around(fd, len, [&] { return real.sendto(fd, buf, len, flags, to, tolen); });
}

FT_SHIM_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  const std::size_t len = msg != nullptr ? iov_bytes(msg->msg_iov, msg->msg_iovlen) : 0;
  return around(fd, len, [&] { return real.sendmsg(fd, msg, flags); });
}

FT_SHIM_EXPORT int sendmmsg(int fd, mmsghdr* msgs, unsigned vlen, int flags) {
  resolve();
  std::size_t len = 0;
  for (unsigned i = 0; msgs != nullptr && i < vlen; ++i) {
    len += iov_bytes(msgs[i].msg_hdr.msg_iov, msgs[i].msg_hdr.msg_iovlen);
  }
  const Pending p = before(fd, len);
  const int n = real.sendmmsg(fd, msgs, vlen, flags);
  ssize_t bytes = 0;
  for (int i = 0; i < n; ++i) bytes += msgs[i].msg_len;
  after(p, n > 0 ? bytes : -1);
  return n;
}

FT_SHIM_EXPORT ssize_t write(int fd, const void* buf, size_t len) {
  return around(fd, len, [&] { return real.write(fd, buf, len); });
}

FT_SHIM_EXPORT ssize_t writev(int fd, const iovec* iov, int iovcnt) {
  const std::size_t len = iovcnt > 0 ? iov_bytes(iov, static_cast<std::size_t>(iovcnt)) : 0;
  return around(fd, len, [&] { return real.writev(fd, iov, iovcnt); });
}

FT_SHIM_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  return around(out_fd, count, [&] { return real.sendfile(out_fd, in_fd, offset, count); });
}

FT_SHIM_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  return around(out_fd, count, [&] { return real.sendfile64(out_fd, in_fd, offset, count); });
}

FT_SHIM_EXPORT ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                              unsigned flags) {
  return around(fd_out, len, [&] { return real.splice(fd_in, off_in, fd_out, off_out, len, flags); });
}

namespace {

// An internal thread created fd: the library's, if it shares the table.
inline int mark_ours(int fd) {
  if (fd < 0 || fd >= kMaxFd || !t_inside || !flowtune::client::runtime_shares_fd_table()) {
    return fd;
  }
  g_ours[fd].store(true, std::memory_order_relaxed);
  int seen = g_max_ours.load(std::memory_order_relaxed);
  while (fd > seen && !g_max_ours.compare_exchange_weak(seen, fd)) {
  }
  return fd;
}

inline bool is_ours(int fd) {
  return fd >= 0 && fd < kMaxFd && g_ours[fd].load(std::memory_order_relaxed);
}

// Closes [first, last] but the library's descriptors, in as few calls as
// there are gaps. 0, or -1 with errno from the first call that failed.
int close_range_but_ours(unsigned first, unsigned last, int flags) {
  const int max_ours = g_max_ours.load(std::memory_order_relaxed);
  if (max_ours < 0 || first > static_cast<unsigned>(max_ours)) {
    return real.close_range(first, last, flags);
  }
  int rc = 0;
  unsigned from = first;
  for (unsigned fd = first; fd <= last && fd <= static_cast<unsigned>(max_ours); ++fd) {
    if (!is_ours(static_cast<int>(fd))) continue;
    if (fd > from && real.close_range(from, fd - 1, flags) != 0 && rc == 0) rc = -1;
    from = fd + 1;
  }
  if (from <= last && from != 0 && real.close_range(from, last, flags) != 0 && rc == 0) rc = -1;
  return rc;
}

}  // namespace

FT_SHIM_EXPORT int close(int fd) {
  resolve();
  if (t_inside) {
    if (fd >= 0 && fd < kMaxFd) g_ours[fd].store(false, std::memory_order_relaxed);
    return real.close(fd);
  }
  if (is_ours(fd)) {
    errno = EBADF;  // not the application's: as if it were not open
    return -1;
  }
  forget(fd);
  return real.close(fd);
}

namespace {

void forget_range(unsigned first, unsigned last) {
  const int max_seen = g_max_fd.load(std::memory_order_relaxed);
  const unsigned cap = max_seen < 0 ? 0 : static_cast<unsigned>(max_seen);
  const unsigned end = last < cap ? last : cap;
  for (unsigned fd = first; max_seen >= 0 && fd <= end && fd >= first; ++fd) {
    forget(static_cast<int>(fd));
  }
}

// A fd number the kernel just handed out names a new object, whatever
// g_class remembers: a close the shim could not see (a raw syscall, a
// glibc-internal close) left the old class behind.
inline int fresh(int fd) {
  if (fd >= 0 && !t_inside) forget(fd);
  return mark_ours(fd);
}

struct ThreadStart {
  void* (*fn)(void*);
  void* arg;
};

void* internal_thread(void* p) {
  const ThreadStart start = *static_cast<ThreadStart*>(p);
  std::free(p);
  t_inside = true;  // for the thread's whole life
  return start.fn(start.arg);
}

}  // namespace

FT_SHIM_EXPORT int close_range(unsigned first, unsigned last, int flags) {
  resolve();
  if (t_inside) return real.close_range(first, last, flags);
  if ((flags & CLOSE_RANGE_CLOEXEC) == 0) forget_range(first, last);
  return close_range_but_ours(first, last, flags);
}

// glibc's closefrom calls close_range inside libc, past the wrapper above.
FT_SHIM_EXPORT void closefrom(int first) {
  resolve();
  if (t_inside || first < 0) {
    real.closefrom(first);
    return;
  }
  forget_range(static_cast<unsigned>(first), ~0u);
  if (g_max_ours.load(std::memory_order_relaxed) < first) {
    real.closefrom(first);
    return;
  }
  (void)close_range_but_ours(static_cast<unsigned>(first), ~0u, 0);
}

FT_SHIM_EXPORT int socket(int domain, int type, int protocol) {
  resolve();
  return fresh(real.socket(domain, type, protocol));
}

FT_SHIM_EXPORT int accept(int fd, sockaddr* addr, socklen_t* len) {
  resolve();
  return fresh(real.accept(fd, addr, len));
}

FT_SHIM_EXPORT int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  resolve();
  return fresh(real.accept4(fd, addr, len, flags));
}

// Threads created by an internal thread are internal (see t_inside).
FT_SHIM_EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                  void* (*fn)(void*), void* arg) {
  resolve();
  if (!t_inside) return real.pthread_create(thread, attr, fn, arg);
  auto* start = static_cast<ThreadStart*>(std::malloc(sizeof(ThreadStart)));
  if (start == nullptr) return EAGAIN;
  *start = {fn, arg};
  const int rc = real.pthread_create(thread, attr, internal_thread, start);
  if (rc != 0) std::free(start);
  return rc;
}

FT_SHIM_EXPORT int dup2(int oldfd, int newfd) {
  resolve();
  if (!t_inside && oldfd != newfd) forget(newfd);
  return real.dup2(oldfd, newfd);
}

FT_SHIM_EXPORT int dup3(int oldfd, int newfd, int flags) {
  resolve();
  if (!t_inside && oldfd != newfd) forget(newfd);
  return real.dup3(oldfd, newfd, flags);
}

// Calls that create descriptors: what internal threads create is the
// library's (marked only where it shares the application's table).
FT_SHIM_EXPORT int eventfd(unsigned initval, int flags) {
  resolve();
  return mark_ours(real.eventfd(initval, flags));
}

FT_SHIM_EXPORT int epoll_create(int size) {
  resolve();
  return mark_ours(real.epoll_create(size));
}

FT_SHIM_EXPORT int epoll_create1(int flags) {
  resolve();
  return mark_ours(real.epoll_create1(flags));
}

FT_SHIM_EXPORT int timerfd_create(int clock, int flags) {
  resolve();
  return mark_ours(real.timerfd_create(clock, flags));
}

FT_SHIM_EXPORT int signalfd(int fd, const sigset_t* mask, int flags) {
  resolve();
  return fd >= 0 ? real.signalfd(fd, mask, flags) : mark_ours(real.signalfd(fd, mask, flags));
}

FT_SHIM_EXPORT int pipe(int fds[2]) {
  resolve();
  const int rc = real.pipe(fds);
  if (rc == 0) {
    mark_ours(fds[0]);
    mark_ours(fds[1]);
  }
  return rc;
}

FT_SHIM_EXPORT int pipe2(int fds[2], int flags) {
  resolve();
  const int rc = real.pipe2(fds, flags);
  if (rc == 0) {
    mark_ours(fds[0]);
    mark_ours(fds[1]);
  }
  return rc;
}

FT_SHIM_EXPORT int socketpair(int domain, int type, int protocol, int fds[2]) {
  resolve();
  const int rc = real.socketpair(domain, type, protocol, fds);
  if (rc == 0) {
    mark_ours(fds[0]);
    mark_ours(fds[1]);
  }
  return rc;
}
