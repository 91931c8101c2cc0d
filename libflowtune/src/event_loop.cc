#include "event_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace flowtune::client {

int EventLoop::init() {
  if (epfd_ >= 0) return 0;
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  return epfd_ >= 0 ? 0 : -errno;
}

int EventLoop::watch(int fd, std::function<void()> on_input) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = handlers_.size();
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) return -errno;
  handlers_.push_back(std::move(on_input));
  watching_ = true;
  return 0;
}

void EventLoop::unwatch_all() {
  // The set itself is closed by close(): removing each fd would need the
  // numbers, and a closed set watches nothing.
  watching_ = false;
}

void EventLoop::run(const std::function<bool()>& may_block, const std::function<void()>& woke,
                    const std::function<void()>& pending) {
  constexpr int kMaxEvents = 8;
  epoll_event ready[kMaxEvents];
  while (watching_) {
    const bool block = may_block();
    const int n = ::epoll_wait(epfd_, ready, kMaxEvents, block ? -1 : 0);
    woke();
    for (int i = 0; i < n && watching_; ++i) {
      const std::uint64_t at = ready[i].data.u64;
      if (at < handlers_.size()) handlers_[at]();
    }
    if (!block && n <= 0 && watching_) pending();
  }
}

int EventLoop::close() {
  if (epfd_ < 0) return 0;
  const int rc = watching_ ? -EBUSY : 0;
  // The runtime thread is internal to the preload shim: its close() passes
  // this straight through, whichever table the number is in.
  (void)::close(epfd_);
  epfd_ = -1;
  handlers_.clear();
  watching_ = false;
  return rc;
}

}  // namespace flowtune::client
