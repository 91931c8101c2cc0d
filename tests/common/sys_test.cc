// UniqueFd (flowtune/common/fd.h) and the system helpers of
// flowtune/common/sys.h: descriptors are closed exactly when their owner
// goes, EINTR is retried, and bounded reads refuse what they must.
#include "flowtune/common/sys.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <string>

#include "flowtune/common/fd.h"

namespace flowtune {
namespace {

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ft_sys_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { (void)std::system(("rm -rf " + path_).c_str()); }
  std::string file(const std::string& name, const std::string& text, mode_t mode = 0600) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    (void)::chmod(p.c_str(), mode);
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(UniqueFd, ClosesWhenItsOwnerGoes) {
  int raw = -1;
  {
    UniqueFd fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(fd);
    raw = fd.get();
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
}

TEST(UniqueFd, MoveTransfersAndReleaseGivesUp) {
  UniqueFd a(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(b.get(), raw);
  const int kept = b.release();
  EXPECT_FALSE(b);
  EXPECT_TRUE(is_open(kept));
  UniqueFd c;
  c.reset(kept);
  c = UniqueFd();  // assigning closes what c held
  EXPECT_FALSE(is_open(kept));
}

TEST(RetryEintr, CallsAgainOnlyWhileInterrupted) {
  int calls = 0;
  const int r = retry_eintr([&] {
    ++calls;
    if (calls < 3) {
      errno = EINTR;
      return -1;
    }
    return 7;
  });
  EXPECT_EQ(r, 7);
  EXPECT_EQ(calls, 3);
  calls = 0;
  const int failed = retry_eintr([&] {
    ++calls;
    errno = EBADF;
    return -1;
  });
  EXPECT_EQ(failed, -1);
  EXPECT_EQ(calls, 1);
}

TEST(ReadBounded, ReadsAWholeFileWithinItsBound) {
  TempDir d;
  const std::string text(10000, 'k');
  const Result<std::string> r = read_bounded(d.file("a", text), {.max_bytes = 10000});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, text);
}

TEST(ReadBounded, RefusesWhatItMustWithThePathInTheMessage) {
  TempDir d;
  const std::string big = d.file("big", std::string(101, 'x'));
  Result<std::string> r =
      read_bounded(big, {.max_bytes = 100, .too_large = "too large for a test"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().cause, ErrorCause::kTooLarge);
  EXPECT_EQ(r.error().message, big + ": too large for a test");

  r = read_bounded(d.path(), {.max_bytes = 100});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, d.path() + ": not a regular file");

  const std::string fifo = d.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = read_bounded(fifo, {.max_bytes = 100});  // no writer: a blocking open would hang
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, fifo + ": not a regular file");

  r = read_bounded(d.path() + "/none", {.max_bytes = 100});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().cause, ErrorCause::kNotFound);

  const std::string shared = d.file("shared", "secret", 0644);
  r = read_bounded(shared,
                   {.max_bytes = 100, .forbidden_mode = S_IROTH, .forbidden_why = "shared"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().cause, ErrorCause::kRefused);
  EXPECT_EQ(r.error().message, shared + ": shared");
}

}  // namespace
}  // namespace flowtune
