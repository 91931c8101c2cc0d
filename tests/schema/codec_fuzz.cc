// libFuzzer target: arbitrary bytes through both decoders. Anything that
// decodes must re-encode and decode to the same value; nothing may crash,
// leak or trip a sanitizer.
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> bytes(data, size);
  round_trip<flowtune::wire::EndpointMessage>(bytes);
  round_trip<flowtune::wire::AllocatorMessage>(bytes);
  return 0;
}
