#include "protocol.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>

namespace flowtune::shuffle {

namespace {

constexpr std::uint32_t kHeaderMagic = 0x42535446;  // "FTSB"
constexpr std::uint32_t kIndexMagic = 0x58495446;   // "FTIX"

template <typename T>
bool number(std::string_view s, T& out) {
  return !s.empty() && s.size() <= 20 && parse_whole(s, out);
}

void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | p[i];
  return v;
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? 0x82F63B78u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(std::uint32_t crc, const std::uint8_t* p,
                                                            std::size_t n) {
  std::uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return ~c32;
}

}  // namespace

std::variant<Fetch, std::string> parse_fetch(std::string_view line) {
  if (line.size() > kMaxRequestLine) return std::string(kRequestTooLong);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string_view parts[6];
  std::size_t n = 0;
  while (!line.empty()) {
    const auto sp = line.find(' ');
    const std::string_view word = line.substr(0, sp);
    if (word.empty()) return std::string("words must be separated by one space");
    if (n == 6) return std::string("too many words: expected FETCH SHUFFLE MAP PARTITION COFLOW");
    parts[n++] = word;
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
    if (line.empty()) return std::string("trailing space");
  }
  if (n != 5 || parts[0] != "FETCH") {
    return std::string("expected FETCH SHUFFLE MAP PARTITION COFLOW");
  }
  Fetch f;
  if (!number(parts[1], f.shuffle) || !number(parts[2], f.map) || !number(parts[3], f.partition) ||
      !number(parts[4], f.coflow)) {
    return std::string("SHUFFLE, MAP and PARTITION must be 32-bit and COFLOW 64-bit unsigned numbers");
  }
  return f;
}

std::string format_fetch(const Fetch& f) {
  return "FETCH " + std::to_string(f.shuffle) + " " + std::to_string(f.map) + " " +
         std::to_string(f.partition) + " " + std::to_string(f.coflow) + "\n";
}

const char* to_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadRequest: return "bad request";
    case Status::kNotFound: return "not found";
    case Status::kServerError: return "server error";
  }
  return "?";
}

void encode_header(const BlockHeader& h, std::uint8_t out[kHeaderBytes]) {
  put32(out, kHeaderMagic);
  put32(out + 4, static_cast<std::uint32_t>(h.status));
  put64(out + 8, h.length);
  put32(out + 16, h.crc);
  put32(out + 20, 0);
}

std::optional<BlockHeader> decode_header(const std::uint8_t in[kHeaderBytes]) {
  if (get32(in) != kHeaderMagic) return std::nullopt;
  const std::uint32_t s = get32(in + 4);
  if (s > static_cast<std::uint32_t>(Status::kServerError)) return std::nullopt;
  return BlockHeader{static_cast<Status>(s), get64(in + 8), get32(in + 16)};
}

bool recv_all(int fd, void* data, std::size_t n) {
  auto* b = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = 0;
    if (r <= 0) return false;
    b += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_all(int fd, const void* data, std::size_t n) {
  const auto* b = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = 0;
    if (w <= 0) return false;
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

void set_timeouts(int fd, std::uint32_t timeout_ms) {
  const timeval tv{static_cast<time_t>(timeout_ms / 1000),
                   static_cast<suseconds_t>(timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  if (__builtin_cpu_supports("sse4.2")) return crc32c_hw(crc, p, n);
  static const auto table = crc_table();
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return ~c;
}

namespace {
std::string shuffle_dir(const std::string& dir, std::uint32_t shuffle) {
  return dir + "/shuffle_" + std::to_string(shuffle);
}
}  // namespace

std::string data_path(const std::string& dir, std::uint32_t shuffle, std::uint32_t map) {
  return shuffle_dir(dir, shuffle) + "/map_" + std::to_string(map) + ".data";
}
std::string index_path(const std::string& dir, std::uint32_t shuffle, std::uint32_t map) {
  return shuffle_dir(dir, shuffle) + "/map_" + std::to_string(map) + ".index";
}

std::string encode_index(const MapIndex& ix) {
  const std::size_t r = ix.partitions();
  std::string out(8 + 8 * (r + 1) + 4 * r, '\0');
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  put32(p, kIndexMagic);
  put32(p + 4, static_cast<std::uint32_t>(r));
  for (std::size_t i = 0; i <= r; ++i) put64(p + 8 + 8 * i, ix.offsets[i]);
  for (std::size_t i = 0; i < r; ++i) put32(p + 8 + 8 * (r + 1) + 4 * i, ix.crcs[i]);
  return out;
}

Result<MapIndex> decode_index(std::string_view bytes) {
  const auto bad = [](const char* w) { return fail(ErrorCause::kInvalid, w); };
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  if (bytes.size() < 16 || get32(p) != kIndexMagic) return bad("not a map index");
  const std::uint64_t r = get32(p + 4);
  if (bytes.size() != 8 + 8 * (r + 1) + 4 * r) {
    return bad("index size does not match its partitions");
  }
  MapIndex ix;
  for (std::uint64_t i = 0; i <= r; ++i) {
    ix.offsets.push_back(get64(p + 8 + 8 * i));
    if (i == 0 ? ix.offsets[0] != 0 : ix.offsets[i] < ix.offsets[i - 1]) {
      return bad("offsets must start at 0 and never decrease");
    }
  }
  for (std::uint64_t i = 0; i < r; ++i) ix.crcs.push_back(get32(p + 8 + 8 * (r + 1) + 4 * i));
  return ix;
}

namespace {

// One map output: DIR/shuffle_S/map_M.{data,index}, block p of size_of(p).
template <typename SizeOf>
void write_map(const std::string& dir, std::uint32_t shuffle, std::uint32_t m,
               std::uint32_t partitions, std::mt19937_64& rng, SizeOf size_of) {
  std::vector<char> buf;
  const std::string path = data_path(dir, shuffle, m);
  std::ofstream data(path, std::ios::binary | std::ios::trunc);
  MapIndex ix;
  ix.offsets.push_back(0);
  for (std::uint32_t p = 0; p < partitions; ++p) {
    const std::uint64_t n = size_of(p);
    buf.resize(n);
    for (std::uint64_t i = 0; i < n; i += 8) {
      const std::uint64_t v = rng();
      std::memcpy(buf.data() + i, &v, std::min<std::uint64_t>(8, n - i));
    }
    data.write(buf.data(), static_cast<std::streamsize>(n));
    ix.crcs.push_back(crc32c(0, buf.data(), n));
    ix.offsets.push_back(ix.offsets.back() + n);
  }
  data.close();
  if (!data) throw std::runtime_error("cannot write " + path);
  const std::string ipath = index_path(dir, shuffle, m);
  std::ofstream index(ipath, std::ios::binary | std::ios::trunc);
  const std::string bytes = encode_index(ix);
  index.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  index.close();
  if (!index) throw std::runtime_error("cannot write " + ipath);
}

std::mt19937_64 map_rng(std::uint64_t seed, std::uint32_t shuffle, std::uint32_t m) {
  return std::mt19937_64(seed * 1'000'003 + shuffle * 7'919 + m);
}

}  // namespace

void generate(const std::string& dir, std::uint32_t shuffle, std::uint32_t maps,
              std::uint32_t partitions, std::uint64_t min_bytes, std::uint64_t max_bytes,
              std::uint64_t seed) {
  if (partitions == 0 || maps == 0 || min_bytes > max_bytes) {
    throw std::invalid_argument("maps and partitions must be positive, and min bytes <= max bytes");
  }
  std::filesystem::create_directories(shuffle_dir(dir, shuffle));
  for (std::uint32_t m = 0; m < maps; ++m) {
    auto rng = map_rng(seed, shuffle, m);
    write_map(dir, shuffle, m, partitions, rng, [&](std::uint32_t) {
      return min_bytes + (max_bytes > min_bytes ? rng() % (max_bytes - min_bytes + 1) : 0);
    });
  }
}

void generate(const std::string& dir, std::uint32_t shuffle, std::uint32_t maps,
              const std::vector<std::uint64_t>& partition_bytes, std::uint64_t seed) {
  if (partition_bytes.empty() || maps == 0) {
    throw std::invalid_argument("maps and partitions must be positive");
  }
  std::filesystem::create_directories(shuffle_dir(dir, shuffle));
  for (std::uint32_t m = 0; m < maps; ++m) {
    auto rng = map_rng(seed, shuffle, m);
    write_map(dir, shuffle, m, static_cast<std::uint32_t>(partition_bytes.size()), rng,
              [&](std::uint32_t p) { return partition_bytes[p]; });
  }
}

}  // namespace flowtune::shuffle
