// Always-on assertions for programming errors (tier one of the project's error
// model: bugs abort with the values involved; expected failures return codes).
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
