// flowtune-ctl health: liveness and readiness verdicts from status replies,
// for Kubernetes-style probes and systemd watchdogs (docs/operate.md).
// Pure: main.cc asks, these functions judge.
//   live:  the daemon answered status (its loop turns).
//   ready: live, and
//          - the engine is idle, or it iterated between two replies
//            taken interval apart (busy with no iteration: stuck);
//          - outside a standby pair, or active, or a standby whose peer
//            is heard active (a standby that has not heard its peer does
//            not yet know whether it must take over).
//          A relay or a witness (status says so) is ready when live.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace flowtune::ctl {

struct Verdict {
  bool ok = false;
  std::string reason;  // one line, for the probe's log
};

// first, second: status replies taken interval_ms apart.
Verdict readiness(const nlohmann::json& first, const nlohmann::json& second, long interval_ms);

}  // namespace flowtune::ctl
