// The socket table's bookkeeping without a runtime: registrations and their
// generations, and the bytes written into a flowlet in progress that gather
// in a slot until the runtime collects them.
#include "pacing.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "flowtune/flowtune.h"

namespace flowtune::client {
namespace {

struct Socket {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ~Socket() { ::close(fd); }
};

TEST(SocketTable, WrittenBytesGatherUntilCollectedOnce) {
  SocketTable t;
  Socket s;
  SocketRef ref;
  ASSERT_EQ(t.claim(s.fd, &ref), FT_OK);
  // The first add finds nothing gathered: its caller must have the runtime
  // collect; later adds only accumulate.
  EXPECT_EQ(t.add_unreported(s.fd, 100), 0u);
  EXPECT_EQ(t.add_unreported(s.fd, 20), 100u);
  EXPECT_EQ(t.add_unreported(s.fd, 3), 120u);
  EXPECT_EQ(t.take_unreported(ref), 123u);
  EXPECT_EQ(t.take_unreported(ref), 0u);
  EXPECT_EQ(t.add_unreported(s.fd, 7), 0u);  // collected: the next add must tell again
}

TEST(SocketTable, AStaleRegistrationCollectsNothingAndANewOneStartsEmpty) {
  SocketTable t;
  Socket s;
  SocketRef old_ref, new_ref;
  ASSERT_EQ(t.claim(s.fd, &old_ref), FT_OK);
  t.add_unreported(s.fd, 500);
  ASSERT_EQ(t.release(s.fd), FT_OK);
  EXPECT_EQ(t.take_unreported(old_ref), 0u);  // the fd is no longer that registration
  ASSERT_EQ(t.claim(s.fd, &new_ref), FT_OK);
  EXPECT_NE(new_ref.gen, old_ref.gen);
  EXPECT_EQ(t.take_unreported(new_ref), 0u);  // nothing carried over
}

TEST(SocketTable, ConcurrentWritersLoseNoBytes) {
  SocketTable t;
  Socket s;
  SocketRef ref;
  ASSERT_EQ(t.claim(s.fd, &ref), FT_OK);
  std::atomic<bool> done{false};
  std::uint64_t collected = 0;
  std::thread runtime([&] {
    while (!done.load()) collected += t.take_unreported(ref);
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) t.add_unreported(s.fd, 3);
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  runtime.join();
  collected += t.take_unreported(ref);
  EXPECT_EQ(collected, 4u * 100000u * 3u);
}

}  // namespace
}  // namespace flowtune::client
