// Answers to flowtune-ctl: the allocator's state as JSON. Requests are one
// word, optionally followed by a limit: "status", "endpoints", "flows [N]",
// "links". An unknown request gets {"error": ...}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "flowtune/daemon/allocator.h"

namespace flowtune::daemon {

struct ServerInfo {
  std::string listen;
  std::uint64_t uptime_us = 0;
};

std::string control_reply(const Allocator& a, const ServerInfo& info, std::string_view request,
                          std::uint64_t now_us);

}  // namespace flowtune::daemon
