// The runtime thread's event loop: a few descriptors watched for input in
// one epoll set, a hook that decides before each wait whether the thread
// may block, and one that runs after it woke.
//
// Why not libuv. The runtime opens its loop in a private fd table
// (runtime.h). libuv keeps process-wide signal state, a pipe made by the
// first loop of the process, and re-creates that pipe in every forked child
// from a pthread_atfork handler. The pipe's numbers were the private
// table's, so in the child the handler closed the application's
// descriptors of the same numbers and put a pipe there (issue 46: Python's
// ProcessPoolExecutor broke, sockets turned into pipes). This loop has no
// process-wide state, registers no fork handler and opens one descriptor,
// its epoll set, in the table of the thread that calls init().
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace flowtune::client {

class EventLoop {
 public:
  EventLoop() = default;
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;
  ~EventLoop() { (void)close(); }

  // 0, or -errno from epoll_create1.
  int init();
  // Calls `on_input` whenever fd is readable (level-triggered) until
  // unwatch_all(). 0, or -errno from epoll_ctl.
  int watch(int fd, std::function<void()> on_input);
  // Stops watching every descriptor; run() returns after the callbacks of
  // the current wake-up.
  void unwatch_all();

  // Runs until unwatch_all(). Before each wait, `may_block()` says whether
  // the thread may sleep; if not, the loop only polls, and calls
  // `pending()` when no descriptor was ready (work was already there).
  // `woke()` runs after every wait.
  void run(const std::function<bool()>& may_block, const std::function<void()>& woke,
           const std::function<void()>& pending);

  // Closes the epoll set. 0, or -EBUSY if descriptors were still watched
  // (a caller that forgot to unwatch: tests assert 0).
  int close();

 private:
  int epfd_ = -1;
  std::vector<std::function<void()>> handlers_;  // index: the epoll data
  bool watching_ = false;
};

}  // namespace flowtune::client
