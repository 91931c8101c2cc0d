// flowtune-shuffle's server and fetch client (docs/coflows.md).
//
// The server serves map-output blocks over TCP from one io_uring loop:
// accepts, request reads, file reads and sends are all submissions, so one
// thread keeps every connection busy without a thread or a blocking call per
// fetch. Each block it sends is a flowlet declared through libflowtune with
// its size and the coflow id the request names (the reduce stage), so the
// allocator sees the stage whole; without an allocator, or with
// --no-flowtune, blocks go out as plain TCP and arrive all the same.
// The client fetches one reduce partition from many servers at once, one
// connection per server with its requests pipelined, and checks every
// block's CRC32C. Neither side lets a stalled peer hold it: the server
// closes a connection on which nothing moved for its idle timeout, the
// client fails a source's outstanding blocks when no byte came from it for
// its read timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flowtune/flowtune.h"
#include "protocol.h"

namespace flowtune::shuffle {

// How block bytes go from the file to the socket.
enum class DataPath : std::uint8_t {
  kRead,      // io_uring: read into a (registered) buffer, send it
  kReadZc,    // io_uring: read into a registered buffer, send it zero-copy (IORING_OP_SEND_ZC)
  kSplice,    // io_uring: splice file -> pipe -> socket (no user-space copy)
  kSendfile,  // a blocking thread per connection with sendfile(2): the plain baseline
};
const char* to_string(DataPath p);

inline constexpr std::uint32_t kDefaultIdleTimeoutMs = 60'000;  // server: --idle-timeout-s
inline constexpr std::uint32_t kDefaultReadTimeoutMs = 30'000;  // client: --read-timeout-s

struct ServerConfig {
  std::string dir;               // map outputs (generate())
  std::string bind = "0.0.0.0";  // IPv4 address to listen on
  std::uint16_t port = 0;        // 0: the kernel picks (port() says which)
  bool flowtune = true;          // declare blocks as flowlets (libflowtune)
  std::uint32_t chunk_bytes = 256 * 1024;  // file read and send size
  std::uint32_t max_pipelined = 1024;      // requests queued per connection
  std::string congestion;                  // TCP congestion control; empty: the system's
  // A connection on which nothing moved (no request bytes in, no answer
  // bytes out, no file read or send completed) for this long is closed.
  std::uint32_t idle_timeout_ms = kDefaultIdleTimeoutMs;
  // splice measured the least CPU per GB of the io_uring paths at the same
  // throughput (bench/shuffle_bench.py, docs/coflows.md).
  DataPath data_path = DataPath::kSplice;
};

struct ServerStats {
  std::atomic<std::uint64_t> connections{0};
  std::atomic<std::uint64_t> blocks{0};        // served whole
  std::atomic<std::uint64_t> bytes{0};         // block bytes sent
  std::atomic<std::uint64_t> bad_requests{0};  // answered with an error
  std::atomic<std::uint64_t> not_found{0};
  std::atomic<std::uint64_t> aborted{0};       // connections lost mid-block
  std::atomic<std::uint64_t> idle_closed{0};   // closed after idle_timeout_ms with nothing moving
  // DataPath::kRead and kReadZc: connections whose buffer the kernel took
  // as a registered buffer, and those left with plain reads (refused, e.g.
  // by RLIMIT_MEMLOCK, or every slot taken).
  std::atomic<std::uint64_t> buffers_registered{0};
  std::atomic<std::uint64_t> buffers_refused{0};
  // DataPath::kReadZc: sends done zero-copy, and of those the kernel
  // reported it copied after all (loopback always does).
  std::atomic<std::uint64_t> zc_sends{0};
  std::atomic<std::uint64_t> zc_copied{0};
};

class Server {
 public:
  // Listens (throws std::runtime_error with the reason); serves on run().
  explicit Server(ServerConfig c);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  // Serves until stop(); throws std::runtime_error if io_uring fails.
  void run();
  // From any thread (async-signal-safe: one eventfd write).
  void stop();
  const ServerStats& stats() const;
  bool flowtune_active() const;  // a libflowtune client is open
  // DataPath::kReadZc and the kernel has not refused zero-copy send.
  bool zero_copy() const;
  // The libflowtune client's counters; false when none is open.
  bool flowtune_stats(ft_stats* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct FetchSource {
  std::string host;
  std::uint16_t port = 0;
  std::uint32_t first_map = 0;
  std::uint32_t last_map = 0;  // inclusive
};

struct BlockResult {
  std::uint32_t map = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;  // from the stage's start to the block's last byte
  std::string error;   // empty when the block arrived whole and its CRC matched
};

struct FetchResult {
  std::vector<BlockResult> blocks;
  std::uint64_t bytes = 0;
  std::uint32_t failed = 0;
  double seconds = 0;  // the stage: first request to last byte
};

// Fetches partition `partition` of shuffle `shuffle` from every source's
// maps, one connection per source, all at once. Never throws for network
// errors: they are reported per block. A source from which no byte came for
// read_timeout_ms (connecting, or with answers outstanding) fails its
// outstanding blocks with an error naming it.
FetchResult fetch_partition(const std::vector<FetchSource>& sources, std::uint32_t shuffle,
                            std::uint32_t partition, std::uint64_t coflow,
                            std::uint32_t read_timeout_ms = kDefaultReadTimeoutMs);

// "HOST:PORT:FIRST-LAST" (maps FIRST..LAST of the server at HOST:PORT).
std::optional<FetchSource> parse_source(std::string_view text);

// ---- Stages from a plan (a trace replayed by one reducer host) ----

// One line of a plan: "START_MS SHUFFLE PARTITION COFLOW SOURCE [SOURCE ...]",
// a fetch of one reduce partition that starts START_MS after the plan's
// start. Blank lines and '#' comments are skipped.
struct PlannedFetch {
  double start_ms = 0;
  std::uint32_t shuffle = 0;
  std::uint32_t partition = 0;
  std::uint64_t coflow = 0;
  std::vector<FetchSource> sources;
};
// The plan's fetches, or an ErrorCause::kInvalid Error naming the first bad
// line ("line N: ...").
Result<std::vector<PlannedFetch>> parse_plan(std::string_view text);

struct PlannedOutcome {
  double start_s = 0;   // when its first request went, from the plan's start
  double finish_s = 0;  // its last byte, from the plan's start
  FetchResult result;
};
// Runs every fetch at its time (each on its own thread, so a slow stage
// never delays the next one's start), from t0 on CLOCK_REALTIME, which
// every host and namespace shares; outcomes in plan order. `done`, when
// given, hears of each fetch (its index in `plan`) on the fetch's thread
// as it ends. Each fetch has fetch_partition's read_timeout_ms.
using PlannedDone = std::function<void(std::size_t, const PlannedOutcome&)>;
std::vector<PlannedOutcome> run_plan(const std::vector<PlannedFetch>& plan,
                                     std::chrono::system_clock::time_point t0,
                                     const PlannedDone& done = {},
                                     std::uint32_t read_timeout_ms = kDefaultReadTimeoutMs);

}  // namespace flowtune::shuffle
