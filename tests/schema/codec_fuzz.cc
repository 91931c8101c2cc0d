// libFuzzer target: arbitrary bytes through both decoders. Anything that
// decodes must re-encode and decode to the same value; an endpoint message
// decoded from its scan (unpacked_bytes, as the allocator does) must give
// the same answer as one decoded alone; nothing may crash, leak or trip a
// sanitizer.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "flowtune/wire/codec.h"

namespace {

template <typename M>
void round_trip(std::span<const std::uint8_t> bytes) {
  M m;
  if (!flowtune::wire::decode(bytes, &m).ok()) return;
  std::vector<std::uint8_t> again = flowtune::wire::encode(m);
  M m2;
  if (!flowtune::wire::decode(std::span<const std::uint8_t>(again), &m2).ok() || !(m2 == m)) {
    std::fprintf(stderr, "codec_fuzz: decoded message does not survive a round trip\n");
    std::abort();
  }
}

void scanned_once(std::span<const std::uint8_t> bytes) {
  flowtune::wire::EndpointMessage a, b;
  const auto alone = flowtune::wire::decode(bytes, &a);
  const auto scanned = flowtune::wire::decode(bytes, flowtune::wire::unpacked_bytes(bytes), &b);
  if (alone.error != scanned.error || alone.detail != scanned.detail || !(a == b)) {
    std::fprintf(stderr, "codec_fuzz: decoding from the scan differs: %s / %s\n", alone.detail.c_str(),
                 scanned.detail.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> bytes(data, size);
  scanned_once(bytes);
  round_trip<flowtune::wire::EndpointMessage>(bytes);
  round_trip<flowtune::wire::AllocatorMessage>(bytes);
  return 0;
}
