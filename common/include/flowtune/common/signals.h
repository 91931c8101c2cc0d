// The daemons' signals (SIGINT and SIGTERM stop; SIGHUP reloads) taken as
// events on an fd their loop polls, not by handlers, so shutdown and reload
// are ordinary turns of the loop.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace flowtune {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and the threads
// it starts after this (ZeroMQ's, MPI's): a thread that left them open
// would take SIGTERM's default and kill the process. Returns the set.
inline sigset_t block_daemon_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  return mask;
}

// Blocks them and returns a close-on-exec signalfd that reads them; -1
// (errno set) if the kernel refuses one.
inline int daemon_signal_fd() {
  const sigset_t mask = block_daemon_signals();
  return signalfd(-1, &mask, SFD_CLOEXEC);
}

// The signal waiting on `fd` (a signalfd the loop's poll found readable):
// its number, or 0 if none could be read.
inline int take_signal(int fd) {
  signalfd_siginfo si{};
  if (::read(fd, &si, sizeof si) != static_cast<ssize_t>(sizeof si)) return 0;
  return static_cast<int>(si.ssi_signo);
}

}  // namespace flowtune
