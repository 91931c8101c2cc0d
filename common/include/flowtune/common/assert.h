// Always-on assertions, and the project's error model.
//
// Every failure in Flowtune falls in one of four tiers; pick the tier by who
// can act on the failure, not by how rare it is.
//
// 1. A bug, an invariant the code itself broke: FT_ASSERT(cond, values...)
//    below. Always on; prints file:line, the condition and every value, then
//    aborts.
// 2. A refusal or an expected failure (bad input, a peer gone, a full table, a
//    file that cannot be read): return a Result<T> carrying an ErrorCause and
//    a message (flowtune/common/result.h); the caller decides.
// 3. A configuration that cannot be loaded, at start-up only: throw
//    (std::runtime_error or a parser's own type), caught once in main(), which
//    prints the message and exits non-zero (the daemons' main.cc and their
//    config readers).
// 4. A failure reported through the public C API: a negative FT_E* code and
//    ft_strerror() (libflowtune/include/flowtune/flowtune.h, src/api.cc);
//    never an exception across extern "C".
//
// Rules that follow from the tiers:
// - A `Result` is converted to an `FT_E*` code only at the C API boundary,
//   and to an exception only while loading configuration.
// - No sentinel stands for "no error" (an empty string, an enum's `kCount`,
//   -1): success is a `Result` holding a value.
// - Code on the data path (the shim, the endpoint runtime, the pacer) never
//   throws; what it cannot handle is either a bug (FT_ASSERT) or a Result.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace flowtune::detail {

template <typename... Args>
[[noreturn]] inline void assert_fail(const char* cond, const char* file, int line,
                                     const Args&... values) {
  std::ostringstream os;
  ((os << ' ' << values), ...);
  std::fprintf(stderr, "flowtune: assertion failed at %s:%d: %s;%s\n", file, line, cond,
               os.str().c_str());
  std::abort();
}

}  // namespace flowtune::detail

// FT_ASSERT(cond, values...) prints every value after the condition when it fails.
#define FT_ASSERT(cond, ...)                                                       \
  do {                                                                             \
    if (__builtin_expect(!(cond), 0)) {                                            \
      ::flowtune::detail::assert_fail(#cond, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                              \
  } while (0)
