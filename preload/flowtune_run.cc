// flowtune-run: runs a dynamically linked program with the Flowtune preload
// shim, the way trickle or proxychains are used. It sets the FLOWTUNE_*
// variables from its flags, puts libflowtune-preload.so first in
// LD_PRELOAD, and execs the command (same pid, same exit status).
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flowtune/common/curve.h"
#include "src/socket_policy.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* kUsage = R"(usage: flowtune-run [options] -- COMMAND [ARGS...]

Runs COMMAND with Flowtune: its TCP writes become flowlets that
flowtune-allocator schedules, and its sockets are paced at the rates it
sends back. If the allocator is unreachable the program runs as without
Flowtune. Static, setuid and io_uring-based programs cannot be intercepted:
use the libflowtune API there.

options:
  --allocator ENDPOINT       allocator to use (FLOWTUNE_ALLOCATOR; default
                             tcp://127.0.0.1:5555)
  --host ID                  this host's name or address in the allocator's
                             topology (FLOWTUNE_HOST; default: the first
                             socket's local address)
  --min-flowlet-bytes N      flowlets smaller than N bytes are not scheduled
                             (FLOWTUNE_MIN_FLOWLET_BYTES; default 65536)
  --mice-mbps N              the mice rate, Mbit/s (FLOWTUNE_MICE_MBPS; 1 to
                             1000000, default 100): writes on a socket with
                             no flowlet in progress are mice, never
                             scheduled, until the socket has been handed
                             min-flowlet-bytes faster than this
                             (docs/preload.md)
  --log LEVEL                0 quiet .. 4 debug (FLOWTUNE_LOG; default 2)
  --curve-server KEY         the allocator's public key (Z85, or its .pub
                             file): speak CURVE (FLOWTUNE_CURVE_SERVER;
                             docs/security.md)
  --curve-key FILE           this host's key pair, from flowtune-ctl keygen
                             (FLOWTUNE_CURVE_KEY); keys that do not load stop
                             flowtune-run here

policy (docs/policy.md; the allocator may lower a class its operator does
not allow):
  --class N                  strict priority class of COMMAND's flowlets,
                             0 (served first) .. 7 (FLOWTUNE_CLASS; default:
                             the allocator's, 4)
  --weight W                 share under contention (FLOWTUNE_WEIGHT; default 1)
  --tenant NAME              the tenant its flowlets count against
                             (FLOWTUNE_TENANT)
  --deadline-ms MS           each flowlet should end within MS of its first
                             write (FLOWTUNE_DEADLINE_MS)
  --coflow ID                the coflow its flowlets belong to, 1 to 2^63-1
                             (FLOWTUNE_COFLOW; docs/coflows.md): every process
                             sending part of one stage names the same ID
  --rule "MATCH... SET..."   other settings for some sockets; repeatable, the
                             first match wins (FLOWTUNE_RULES, ';' between
                             rules). MATCH: dst=CIDR src=CIDR dport=P[-Q]
                             sport=P[-Q]; SET: class= weight= tenant=
                             deadline-ms= coflow=. Example: --rule "dport=6379 class=0"
  --preload PATH             the shim library (default: next to this program,
                             then FLOWTUNE_PRELOAD)
  --pacer DEV                also pace the host as a whole while COMMAND runs:
                             start flowtune-pacer on DEV (the host's egress
                             device; needs root), wait until the allocator has
                             it (at most 2 s), and have it remove its qdisc
                             when COMMAND exits. A pacer already on DEV is
                             left in charge. Without root, or if it cannot
                             start, COMMAND runs anyway (with a warning).
  --link-rate RATE           the host's link for --pacer (default 1gbit)
  -h, --help                 show this help

exit status: COMMAND's (same process); 2 bad usage; 126/127 COMMAND not executable / not found.
)";

// Key files are read by the shim in every process COMMAND starts, from
// wherever it has moved to: a relative path is made absolute here.
std::string absolute_if_file(const char* v) {
  char buf[PATH_MAX];
  if (v[0] == '/' || ::access(v, F_OK) != 0 || ::realpath(v, buf) == nullptr) return v;
  return buf;
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "flowtune-run: %s\n(run 'flowtune-run --help' for usage)\n", msg.c_str());
  std::exit(2);
}

// The first of `rels` (relative to this program's directory) that `mode`
// (access(2)) allows, or "" when none does.
std::string beside_self(const char* argv0, std::initializer_list<const char*> rels, int mode) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv0);
  dir = dir.substr(0, dir.rfind('/') + 1);
  for (const char* rel : rels) {
    if (access((dir + rel).c_str(), mode) == 0) return dir + rel;
  }
  return "";
}

// The shim installed or built beside this binary.
std::string default_preload(const char* argv0) {
  if (const char* env = std::getenv("FLOWTUNE_PRELOAD"); env != nullptr && *env != '\0') return env;
  const std::string p = beside_self(argv0, {"libflowtune-preload.so", "../lib/libflowtune-preload.so",
                                            "../lib/x86_64-linux-gnu/libflowtune-preload.so"},
                                    R_OK);
  return p.empty() ? FT_PRELOAD_BUILD_PATH : p;
}

// flowtune-pacer installed or built beside this binary, else from PATH.
std::string pacer_path(const char* argv0) {
  const std::string p = beside_self(argv0, {"flowtune-pacer", "../pacer/flowtune-pacer"}, X_OK);
  return p.empty() ? "flowtune-pacer" : p;
}

// Starts flowtune-pacer for this process (it follows our pid through exec)
// and waits until the allocator has registered it. Never fatal: the command
// runs either way, since its bytes do not depend on the pacer.
void start_pacer(const char* argv0, const std::string& dev, const std::string& link_rate) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return;
  const std::string self = std::to_string(getpid());
  const std::string bin = pacer_path(argv0);
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "flowtune-run: --pacer: fork: %s\n", std::strerror(errno));
    return;
  }
  if (pid == 0) {
    // A grandchild, so the command never has the pacer as a child (a shell
    // that waits for its children would wait for it forever), in a session
    // of its own (a Ctrl-C for the command must not take it first): it
    // leaves when the command does (--while-pid).
    if (fork() != 0) _exit(0);
    dup2(out[1], STDOUT_FILENO);
    setsid();
    const char* host = std::getenv("FLOWTUNE_HOST");
    std::vector<const char*> argv = {bin.c_str(), "--dev", dev.c_str(), "--link-rate",
                                     link_rate.c_str(), "--while-pid", self.c_str()};
    if (host != nullptr && *host != '\0') {
      argv.push_back("--host");
      argv.push_back(host);
    }
    argv.push_back(nullptr);
    execvp(argv[0], const_cast<char* const*>(argv.data()));
    std::fprintf(stderr, "flowtune-run: --pacer: %s: %s\n", bin.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pollfd p{out[0], POLLIN, 0};
  char buf[64] = {};
  ssize_t got = 0;
  if (poll(&p, 1, 2000) == 1) got = read(out[0], buf, sizeof buf - 1);
  close(out[0]);
  // "registered", or "busy": another pacer already shapes dev.
  if (got > 0 && (std::strncmp(buf, "registered", 10) == 0 || std::strncmp(buf, "busy", 4) == 0)) {
    return;
  }
  std::fprintf(stderr, "flowtune-run: --pacer: flowtune-pacer is not paced by the allocator yet "
                       "(see its message above); running the command anyway\n");
}

// What flowtune-run keeps of its options; the others become the shim's
// FLOWTUNE_* variables as they are read.
struct RunOptions {
  std::string preload;
  std::string pacer_dev;
  std::string link_rate = "1gbit";
  std::string rules;  // every --rule, ';'-separated
};

// One option `a` and its value `v`; a bad one is a usage error (exit 2).
void take_option(std::string_view a, const char* v, RunOptions& o) {
  if (a == "--allocator") setenv("FLOWTUNE_ALLOCATOR", v, 1);
  else if (a == "--host") setenv("FLOWTUNE_HOST", v, 1);
  else if (a == "--min-flowlet-bytes") {
    char* end = nullptr;
    errno = 0;
    std::strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || v[0] < '0' || v[0] > '9') {
      usage_error("--min-flowlet-bytes expects bytes (0 to 2^64 - 1), got '" + std::string(v) + "'");
    }
    setenv("FLOWTUNE_MIN_FLOWLET_BYTES", v, 1);
  } else if (a == "--mice-mbps") {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end == v || *end != '\0' || v[0] < '0' || v[0] > '9' || n == 0 || n > 1'000'000) {
      usage_error("--mice-mbps expects whole Mbit/s from 1 to 1000000, got '" + std::string(v) +
                  "'");
    }
    setenv("FLOWTUNE_MICE_MBPS", v, 1);
  } else if (a == "--log") {
    if (std::strlen(v) != 1 || v[0] < '0' || v[0] > '4') usage_error("--log expects 0-4");
    setenv("FLOWTUNE_LOG", v, 1);
  } else if (a == "--preload") o.preload = v;
  else if (a == "--pacer") o.pacer_dev = v;
  else if (a == "--link-rate") o.link_rate = v;
  else if (a == "--class") setenv("FLOWTUNE_CLASS", v, 1);
  else if (a == "--weight") setenv("FLOWTUNE_WEIGHT", v, 1);
  else if (a == "--tenant") setenv("FLOWTUNE_TENANT", v, 1);
  else if (a == "--deadline-ms") setenv("FLOWTUNE_DEADLINE_MS", v, 1);
  else if (a == "--coflow") setenv("FLOWTUNE_COFLOW", v, 1);
  else if (a == "--rule") o.rules += (o.rules.empty() ? "" : ";") + std::string(v);
  else if (a == "--curve-server") setenv("FLOWTUNE_CURVE_SERVER", absolute_if_file(v).c_str(), 1);
  else if (a == "--curve-key") setenv("FLOWTUNE_CURVE_KEY", absolute_if_file(v).c_str(), 1);
  else usage_error("unknown option: " + std::string(a));
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a.empty() || a[0] != '-') break;  // the command, without "--"
    if (i + 1 >= argc) usage_error(std::string(a) + " needs a value");
    take_option(a, argv[++i], o);
  }
  // Checked here, where a mistake can stop the start: the shim cannot
  // refuse to run the command, it can only leave it unpaced.
  if (const auto curve = flowtune::curve::client_keys({}, {}); !curve) {
    usage_error("CURVE: " + curve.error().message);
  }
  if (!o.rules.empty()) setenv("FLOWTUNE_RULES", o.rules.c_str(), 1);
  // The shim parses the same way; a mistake stops here, not silently there.
  std::string policy_error;
  if (!flowtune::preload::parse_policy(flowtune::preload::PolicyEnv::from_environment(),
                                       &policy_error)) {
    usage_error(policy_error);
  }
  if (i >= argc) usage_error("no command given");
  if (o.preload.empty()) o.preload = default_preload(argv[0]);
  if (access(o.preload.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "flowtune-run: cannot load the shim %s: %s\n", o.preload.c_str(),
                 std::strerror(errno));
    return 2;
  }
  std::string ld = o.preload;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0') {
    ld += ":" + std::string(old);
  }
  if (!o.pacer_dev.empty()) {
    if (geteuid() != 0) {
      std::fprintf(stderr, "flowtune-run: --pacer needs root (tc); running without it\n");
    } else {
      start_pacer(argv[0], o.pacer_dev, o.link_rate);
    }
  }
  setenv("LD_PRELOAD", ld.c_str(), 1);
  execvp(argv[i], argv + i);
  const int e = errno;
  std::fprintf(stderr, "flowtune-run: %s: %s\n", argv[i], std::strerror(e));
  return e == ENOENT ? 127 : 126;
}
