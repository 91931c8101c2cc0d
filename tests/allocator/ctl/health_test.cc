// flowtune-ctl health's readiness rule, on hand-built status replies.
#include "health.h"

#include <gtest/gtest.h>

namespace flowtune::ctl {
namespace {

using nlohmann::json;

json status(bool busy, std::uint64_t iterations, std::string role = "active", json pair = nullptr) {
  return {{"epoch", 5},  {"busy", busy}, {"flows", 3}, {"role", role}, {"standby_pair", pair},
          {"counters", {{"iterations", iterations}}}};
}

TEST(Health, IdleEngineIsReady) {
  const Verdict v = readiness(status(false, 10), status(false, 10), 200);
  EXPECT_TRUE(v.ok) << v.reason;
  EXPECT_NE(v.reason.find("idle"), std::string::npos) << v.reason;
}

TEST(Health, BusyEngineThatIteratesIsReady) {
  EXPECT_TRUE(readiness(status(true, 10), status(true, 50), 200).ok);
}

TEST(Health, BusyEngineThatDoesNotIterateIsNotReady) {
  const Verdict v = readiness(status(true, 10), status(true, 10), 200);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("no iteration in 200 ms"), std::string::npos) << v.reason;
}

TEST(Health, StandbyIsReadyOnlyOnceItsPeerIsHeardActive) {
  const json unheard = {{"peer", "tcp://b:5555"}, {"peer_role", nullptr}};
  const json heard = {{"peer", "tcp://b:5555"}, {"peer_role", "active"}};
  const json both_standby = {{"peer", "tcp://b:5555"}, {"peer_role", "standby"}};
  const Verdict v = readiness(status(false, 0, "standby", unheard), status(false, 0, "standby", unheard), 200);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.reason.find("has not been heard"), std::string::npos) << v.reason;
  EXPECT_FALSE(readiness(status(false, 0, "standby", both_standby), status(false, 0, "standby", both_standby), 200).ok);
  EXPECT_TRUE(readiness(status(false, 0, "standby", heard), status(false, 0, "standby", heard), 200).ok);
  EXPECT_TRUE(readiness(status(false, 0, "active", unheard), status(false, 0, "active", unheard), 200).ok);
}

TEST(Health, ARestartBetweenRepliesIsNotReady) {
  json later = status(false, 0);
  later["epoch"] = 6;
  EXPECT_FALSE(readiness(status(false, 0), later, 200).ok);
}

TEST(Health, RelayAndWitnessAreReadyWhenTheyAnswer) {
  EXPECT_TRUE(readiness(json{{"relay", true}}, json{{"relay", true}}, 200).ok);
  EXPECT_TRUE(readiness(json{{"witness", true}}, json{{"witness", true}}, 200).ok);
  EXPECT_FALSE(readiness(json(), json(), 200).ok);
}

}  // namespace
}  // namespace flowtune::ctl
