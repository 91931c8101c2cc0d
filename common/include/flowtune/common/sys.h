// One helper per system idiom, so that no file keeps its own copy: a system
// call retried across EINTR, and a bounded read of a whole (small) file that
// refuses what would block or exhaust memory. Failures are Results (tier two
// of the error model in flowtune/common/assert.h).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "flowtune/common/fd.h"
#include "flowtune/common/result.h"

namespace flowtune {

// Calls `call()` again while it fails with EINTR; returns its last result.
// For calls that return -1 and set errno (read, write, open, ...).
template <typename Call>
auto retry_eintr(Call&& call) -> decltype(call()) {
  for (;;) {
    auto r = call();
    if (!(r == -1 && errno == EINTR)) return r;
  }
}

// What read_bounded accepts, and the messages it fails with (each is put
// after "PATH: ").
struct ReadBounds {
  std::size_t max_bytes = 0;
  // Failure message when the file is (or grows) larger than max_bytes.
  const char* too_large = "too large";
  // Mode bits the file must not have (e.g. S_IRGRP | S_IROTH for a secret),
  // and the message when it has any of them.
  mode_t forbidden_mode = 0;
  const char* forbidden_why = "has forbidden permission bits";
};

// The whole of the regular file at `path`, at most b.max_bytes long. It is
// opened non-blocking and without a controlling tty, so a FIFO or a device
// is refused rather than waited on; symbolic links are followed. Errors name
// the path: "PATH: not a regular file", "PATH: <strerror>", "PATH: <b.too_large>".
inline Result<std::string> read_bounded(const std::string& path, const ReadBounds& b) {
  const auto io = [&](int err) { return fail(ErrorCause::kIo, path + ": " + std::strerror(err)); };
  UniqueFd fd(retry_eintr(
      [&] { return ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); }));
  if (!fd)
    return errno == ENOENT ? fail(ErrorCause::kNotFound, path + ": " + std::strerror(errno))
                           : io(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return io(errno);
  if (!S_ISREG(st.st_mode)) return fail(ErrorCause::kInvalid, path + ": not a regular file");
  if (st.st_size > static_cast<off_t>(b.max_bytes))
    return fail(ErrorCause::kTooLarge, path + ": " + b.too_large);
  if ((st.st_mode & b.forbidden_mode) != 0)
    return fail(ErrorCause::kRefused, path + ": " + b.forbidden_why);
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = retry_eintr([&] { return ::read(fd.get(), buf, sizeof buf); });
    if (n < 0) return io(errno);
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > b.max_bytes) return fail(ErrorCause::kTooLarge, path + ": " + b.too_large);
  }
}

}  // namespace flowtune
