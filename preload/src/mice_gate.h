// The mice gate: whether a write on a socket with no flowlet in progress is
// a mouse (never scheduled) or begins a flowlet. Each socket has a bucket,
// filled by each write's bytes and drained at the mice rate; a write that
// leaves it below min_flowlet_bytes is a mouse. A write that fills it
// begins a flowlet of the bucket's bytes and empties it. So a bulk sender
// (whose first writes go into an empty send buffer at memory speed) is
// scheduled within its first min_flowlet_bytes, and a small-request
// server's replies never are. Pure: the shim keeps the buckets and reads
// the clock (shim.cc); tests drive it with times of their own.
#pragma once

#include <cstdint>

namespace flowtune::preload {

struct MiceBucket {
  std::uint64_t level = 0;  // bytes
  std::uint64_t at_ns = 0;  // when `level` was last set
};

// Adds a write of `len` bytes at `now_ns`. 0: a mouse. Otherwise the bytes
// of the flowlet that begins now (the bucket is emptied).
inline std::uint64_t mice_gate_add(MiceBucket& b, std::uint64_t now_ns, std::uint64_t len,
                                   std::uint64_t min_flowlet_bytes,
                                   std::uint64_t mice_bytes_per_sec) {
  std::uint64_t level = b.level;
  if (level != 0 && now_ns > b.at_ns) {
    const std::uint64_t ns = now_ns - b.at_ns;
    // ns * rate / 1e9. A pause of a second or more empties the bucket: a
    // burst is over by then, whatever the rate. Below a second the product
    // stays under 2^64 for every rate the shim accepts (up to 1 Tbit/s).
    const std::uint64_t drained =
        ns >= 1'000'000'000u ? level : ns * (mice_bytes_per_sec / 1000) / 1'000'000u;
    level = drained >= level ? 0 : level - drained;
  }
  level += len;
  if (level >= min_flowlet_bytes) {
    b = MiceBucket{0, now_ns};
    return level;
  }
  b = MiceBucket{level, now_ns};
  return 0;
}

}  // namespace flowtune::preload
