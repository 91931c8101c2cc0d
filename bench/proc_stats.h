// What /proc says of a benchmark's child process (the allocator, a relay).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace flowtune::bench {

// User + system CPU seconds of `pid` so far (/proc/PID/stat fields 14, 15).
inline double process_cpu_s(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string tok;
  double t = 0;
  for (int i = 1; i <= 15 && f >> tok; ++i) {
    if (i == 14 || i == 15) t += std::stod(tok);
  }
  return t / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace flowtune::bench
