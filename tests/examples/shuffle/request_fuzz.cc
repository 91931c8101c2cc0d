// libFuzzer target over flowtune-shuffle's request side: the input is the
// byte stream a connection sends. It is framed into lines twice, whole and
// in reads whose sizes a generator seeded by the input picks, and each line
// is parsed (take_request_lines, parse_fetch). The same bytes are also read
// as an index file (decode_index) and a block header (decode_header).
// Checked, beyond nothing crashing or tripping a sanitizer:
//   - framing against a naive oracle (split the whole stream at '\n'): any
//     split of the stream into reads answers the oracle's lines in order;
//     only a partial line over 128 bytes ends the stream early, answered
//     kRequestTooLong, which is then also what the oracle answers its line;
//   - a refused line has a non-empty reason; an accepted one survives
//     format_fetch -> parse_fetch;
//   - an index that decodes re-encodes to the same bytes; a refused one says
//     why; a header that decodes re-encodes to its bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol.h"

namespace {

using namespace flowtune::shuffle;

using Answer = std::variant<Fetch, std::string>;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "request_fuzz: %s\n", what);
  std::abort();
}

Answer answer(std::string_view line) {
  Answer a = parse_fetch(line);
  if (const auto* f = std::get_if<Fetch>(&a)) {
    const std::string again = format_fetch(*f);
    const Answer back = parse_fetch(std::string_view(again).substr(0, again.size() - 1));
    if (!std::holds_alternative<Fetch>(back) || std::get<Fetch>(back) != *f) {
      fail("an accepted request does not survive format_fetch -> parse_fetch");
    }
  } else if (std::get<std::string>(a).empty()) {
    fail("a refused request has no reason");
  }
  return a;
}

// The stream in reads of 1..max_read bytes; false when it ended early.
bool framed(std::string_view stream, std::uint64_t seed, std::size_t max_read,
            std::vector<Answer>* out) {
  std::string in;
  std::size_t pos = 0;
  while (pos < stream.size()) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const std::size_t n = std::min<std::size_t>(1 + (seed >> 33) % max_read, stream.size() - pos);
    in.append(stream.substr(pos, n));
    pos += n;
    if (take_request_lines(in, [&](std::string_view l) { out->push_back(answer(l)); })) {
      out->push_back(std::string(kRequestTooLong));
      return false;
    }
  }
  return true;
}

void check_framing(std::string_view stream, std::uint64_t seed, std::size_t max_read,
                   const std::vector<Answer>& oracle) {
  std::vector<Answer> got;
  const bool whole = framed(stream, seed, max_read, &got);
  if (whole) {
    if (got != oracle) fail("framing in reads disagrees with the whole stream split at '\\n'");
    return;
  }
  // Ended early: the lines before agree, and the one that ended it is too
  // long for the oracle as well (or never ends in the stream).
  const std::size_t k = got.size() - 1;
  if (k > oracle.size()) fail("framing answered more lines than the stream holds");
  for (std::size_t i = 0; i < k; ++i) {
    if (got[i] != oracle[i]) fail("framing in reads disagrees before the stream ended");
  }
  if (k < oracle.size() && oracle[k] != got[k]) {
    fail("the stream ended on a line the oracle accepts or refuses otherwise");
  }
}

void check_index(std::string_view bytes) {
  const auto ix = decode_index(bytes);
  if (!ix) {
    if (ix.error().message.empty()) fail("a refused index has no reason");
    return;
  }
  if (ix->offsets.size() != ix->partitions() + 1) fail("an index has the wrong offset count");
  if (encode_index(*ix) != bytes) fail("a decoded index does not re-encode to its bytes");
}

void check_header(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes) return;
  std::uint8_t raw[kHeaderBytes];
  std::memcpy(raw, bytes.data(), kHeaderBytes);
  const auto h = decode_header(raw);
  if (!h) return;
  std::uint8_t again[kHeaderBytes];
  encode_header(*h, again);
  // The last four bytes are reserved: encode writes 0, decode ignores them.
  if (std::memcmp(raw, again, kHeaderBytes - 4) != 0) fail("a decoded header does not re-encode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  // The oracle: every complete line, parsed; a last partial line is never answered.
  std::vector<Answer> oracle;
  for (std::size_t start = 0, nl; (nl = stream.find('\n', start)) != std::string_view::npos;
       start = nl + 1) {
    oracle.push_back(answer(stream.substr(start, nl - start)));
  }
  std::uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (std::size_t i = 0; i < size; ++i) seed = (seed ^ data[i]) * 0x100000001b3ull;
  check_framing(stream, seed, size + 1, oracle);  // one read, or a few large ones
  check_framing(stream, seed, 64, oracle);        // reads of up to half a line's limit
  check_index(stream);
  check_header(stream);
  return 0;
}
