// What the engine fuzzers (clos_diff_fuzz, engine_diff_fuzz) read their
// operations from, and how they fail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace flowtune::testing {

// Consumes input bytes; zeros once exhausted.
class FuzzBytes {
 public:
  FuzzBytes(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  std::uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

// A failed property: says which, and aborts so libFuzzer keeps the input.
inline void fuzz_check(bool ok, const char* fuzzer, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "%s: %s\n", fuzzer, what);
  std::abort();
}

}  // namespace flowtune::testing
