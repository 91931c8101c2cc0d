// flowtune-shuffle's wire format and map-output files (docs/coflows.md).
//
// A reducer asks a server for one block (one map's output for one reduce
// partition) with a text line, "FETCH <shuffle> <map> <partition> <coflow>\n"
// (at most kMaxRequestLine bytes); the server answers each line, in order,
// with a 24-byte header (magic, status, length, CRC32C of the body) and the
// body: the block, or for an error a message. Map outputs are files as a
// Spark shuffle writes them: DIR/shuffle_S/map_M.data holds the partitions
// back to back, DIR/shuffle_S/map_M.index their offsets and checksums.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flowtune/common/result.h"

namespace flowtune::shuffle {

// The whole of `s` as a number (std::from_chars: no sign for unsigned, no
// spaces, nothing left over).
template <typename T>
bool parse_whole(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

struct Fetch {
  std::uint32_t shuffle = 0;
  std::uint32_t map = 0;
  std::uint32_t partition = 0;
  std::uint64_t coflow = 0;  // the stage's coflow id; 0 = none
  bool operator==(const Fetch&) const = default;
};

inline constexpr std::size_t kMaxRequestLine = 128;
// The answer to a line over kMaxRequestLine bytes, whole or still arriving.
inline constexpr const char* kRequestTooLong = "request longer than 128 bytes";

// One request line without its '\n'; the error says what is wrong.
std::variant<Fetch, std::string> parse_fetch(std::string_view line);
std::string format_fetch(const Fetch& f);  // with the '\n'

// The framing of a connection's request stream, without the I/O: `in` holds
// what has arrived and not yet been taken. Each complete line (without its
// '\n') goes to line(std::string_view), in order, and leaves `in`. Returns
// true when what is left can no longer become a request (over
// kMaxRequestLine bytes and no '\n' yet): `in` is cleared, and the server
// answers kRequestTooLong and discards the rest of the connection's input.
template <typename Line>
bool take_request_lines(std::string& in, Line line) {
  std::size_t start = 0;
  std::size_t nl = 0;
  while ((nl = in.find('\n', start)) != std::string::npos) {
    line(std::string_view(in).substr(start, nl - start));
    start = nl + 1;
  }
  in.erase(0, start);
  if (in.size() <= kMaxRequestLine) return false;
  in.clear();
  return true;
}

enum class Status : std::uint32_t { kOk = 0, kBadRequest = 1, kNotFound = 2, kServerError = 3 };
const char* to_string(Status s);

struct BlockHeader {
  Status status = Status::kOk;
  std::uint64_t length = 0;  // body bytes
  std::uint32_t crc = 0;     // CRC32C of the body
};
inline constexpr std::size_t kHeaderBytes = 24;
void encode_header(const BlockHeader& h, std::uint8_t out[kHeaderBytes]);
// nullopt for a bad magic or an unknown status.
std::optional<BlockHeader> decode_header(const std::uint8_t in[kHeaderBytes]);

// Sends all n bytes on a connected socket (no SIGPIPE, retries EINTR);
// false when the connection failed (errno says why; EAGAIN: the socket's
// SO_SNDTIMEO passed with nothing sent).
bool send_all(int fd, const void* data, std::size_t n);
// Receives exactly n bytes (retries EINTR); false at the peer's end (errno
// 0) or an error (errno; EAGAIN: SO_RCVTIMEO passed with nothing received).
bool recv_all(int fd, void* data, std::size_t n);
// A blocking socket's connect, send and receive calls each fail (EAGAIN,
// EINPROGRESS for connect) once timeout_ms passes with nothing moved.
void set_timeouts(int fd, std::uint32_t timeout_ms);

// CRC32C (Castagnoli), continued from `crc` (0 to start).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t n);

// ---- Map outputs ----

struct MapIndex {
  std::vector<std::uint64_t> offsets;  // partitions + 1, from 0 to the data file's size
  std::vector<std::uint32_t> crcs;     // per partition
  std::size_t partitions() const { return crcs.size(); }
};

std::string data_path(const std::string& dir, std::uint32_t shuffle, std::uint32_t map);
std::string index_path(const std::string& dir, std::uint32_t shuffle, std::uint32_t map);
// The index file's bytes, and back (an ErrorCause::kInvalid Error saying
// what is wrong for a bad file).
std::string encode_index(const MapIndex& ix);
Result<MapIndex> decode_index(std::string_view bytes);

// Writes `maps` map outputs of `partitions` blocks each. Block sizes are
// drawn uniformly from [min_bytes, max_bytes] and their bytes from a
// generator seeded by (seed, shuffle, map), so a run is reproducible.
// Throws std::runtime_error naming the file that could not be written.
void generate(const std::string& dir, std::uint32_t shuffle, std::uint32_t maps,
              std::uint32_t partitions, std::uint64_t min_bytes, std::uint64_t max_bytes,
              std::uint64_t seed);
// The same with every map's block p of partition_bytes[p] bytes (a stage
// whose reducers' shares are known, as a trace gives them).
void generate(const std::string& dir, std::uint32_t shuffle, std::uint32_t maps,
              const std::vector<std::uint64_t>& partition_bytes, std::uint64_t seed);

}  // namespace flowtune::shuffle
