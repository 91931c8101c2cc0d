// The shim's per-socket policy: FLOWTUNE_* defaults and FLOWTUNE_RULES,
// parsed and matched without sockets.
#include "socket_policy.h"

#include <gtest/gtest.h>

#include "flowtune/common/ipv4.h"

namespace flowtune::preload {
namespace {

SocketEnds v4(const char* src, std::uint16_t sport, const char* dst, std::uint16_t dport) {
  return {true, *parse_ipv4(src), *parse_ipv4(dst), sport, dport};
}

PolicyConfig parse(PolicyEnv env) {
  std::string error;
  auto c = parse_policy(env, &error);
  EXPECT_TRUE(c.has_value()) << error;
  return c.value_or(PolicyConfig{});
}

std::string error_of(PolicyEnv env) {
  std::string error;
  EXPECT_FALSE(parse_policy(env, &error).has_value());
  return error;
}

TEST(SocketPolicy, NothingSetIsEmptyAndChangesNoSocket) {
  const PolicyConfig c = parse({});
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.for_socket(v4("10.0.0.1", 1000, "10.0.0.2", 80)), SocketPolicy{});
  EXPECT_TRUE(parse({.rules = " ; ;"}).empty());
}

TEST(SocketPolicy, DefaultsComeFromTheVariables) {
  const PolicyConfig c = parse({"2", "0.5", "web", "250", nullptr, "9223372036854775807"});
  EXPECT_FALSE(c.empty());
  const SocketPolicy p = c.for_socket(v4("10.0.0.1", 1000, "10.0.0.2", 80));
  EXPECT_EQ(p.priority_class, 2);
  EXPECT_EQ(p.weight, 0.5f);
  EXPECT_EQ(p.tenant, "web");
  EXPECT_EQ(p.deadline_ms, 250u);
  EXPECT_EQ(p.coflow_id, (std::uint64_t{1} << 63) - 1);
  // A coflow alone is a policy too.
  EXPECT_FALSE(parse({.coflow = "7"}).empty());
}

TEST(SocketPolicy, ARuleCanPutOnePortsSocketsInACoflow) {
  // A shuffle server's block port carries the stage's coflow; its other
  // sockets (RPC) keep the default, none.
  const PolicyConfig c = parse({.rules = "sport=7337 coflow=42", .coflow = "9"});
  EXPECT_EQ(c.for_socket(v4("10.0.0.1", 7337, "10.0.0.2", 50000)).coflow_id, 42u);
  EXPECT_EQ(c.for_socket(v4("10.0.0.1", 40000, "10.0.0.2", 7077)).coflow_id, 9u);
}

TEST(SocketPolicy, TheFirstMatchingRuleSetsItsSettingsOverTheDefaults) {
  PolicyEnv env;
  env.priority_class = "5";
  env.tenant = "bulk";
  env.rules =
      "dport=6379 class=0 deadline-ms=20; dst=10.1.0.0/16,sport=2000-2999 tenant=batch weight=2;"
      "dst=10.1.2.3 class=1";
  const PolicyConfig c = parse(env);
  ASSERT_EQ(c.rules.size(), 3u);
  // A port rule, any address family.
  SocketPolicy p = c.for_socket(v4("10.0.0.1", 40000, "10.9.9.9", 6379));
  EXPECT_EQ(p.priority_class, 0);
  EXPECT_EQ(p.deadline_ms, 20u);
  EXPECT_EQ(p.tenant, "bulk");  // not set by the rule: the default
  SocketEnds six;
  six.dport = 6379;
  EXPECT_EQ(c.for_socket(six).priority_class, 0);
  // Both matches must hold; the first rule that holds wins (10.1.2.3 is in
  // 10.1.0.0/16, so the third rule is not reached from port 2500).
  p = c.for_socket(v4("10.0.0.1", 2500, "10.1.2.3", 80));
  EXPECT_EQ(p.tenant, "batch");
  EXPECT_EQ(p.weight, 2.0f);
  EXPECT_EQ(p.priority_class, 5);
  p = c.for_socket(v4("10.0.0.1", 3000, "10.1.2.3", 80));
  EXPECT_EQ(p.priority_class, 1);
  EXPECT_EQ(p.tenant, "bulk");
  // Address rules never match an IPv6 socket; nothing matches: the defaults.
  six.dport = 80;
  EXPECT_EQ(c.for_socket(six).priority_class, 5);
  EXPECT_EQ(c.for_socket(v4("10.0.0.1", 3000, "10.2.0.1", 80)).priority_class, 5);
}

TEST(SocketPolicy, CidrPrefixesMatchTheirNetworkOnly) {
  const PolicyConfig c = parse({.rules = "dst=192.168.4.0/22 class=3; src=0.0.0.0/0 class=6"});
  EXPECT_EQ(c.for_socket(v4("1.1.1.1", 1, "192.168.7.255", 9)).priority_class, 3);
  EXPECT_EQ(c.for_socket(v4("1.1.1.1", 1, "192.168.8.0", 9)).priority_class, 6);
  EXPECT_EQ(c.for_socket(v4("1.1.1.1", 1, "192.168.3.255", 9)).priority_class, 6);
}

TEST(SocketPolicy, BadInputIsRefusedNamingTheVariableTheRuleAndTheWord) {
  EXPECT_NE(error_of({.priority_class = "8"}).find("FLOWTUNE_CLASS: '8'"), std::string::npos);
  EXPECT_NE(error_of({.priority_class = "-1"}).find("FLOWTUNE_CLASS"), std::string::npos);
  EXPECT_NE(error_of({.weight = "0"}).find("FLOWTUNE_WEIGHT"), std::string::npos);
  EXPECT_NE(error_of({.weight = "nan"}).find("FLOWTUNE_WEIGHT"), std::string::npos);
  EXPECT_NE(error_of({.tenant = std::string(300, 't').c_str()}).find("FLOWTUNE_TENANT"),
            std::string::npos);
  EXPECT_NE(error_of({.deadline_ms = "10ms"}).find("FLOWTUNE_DEADLINE_MS"), std::string::npos);
  for (const char* bad : {"0", "-1", "9223372036854775808", "18446744073709551616", "0x10", "1e3"}) {
    EXPECT_NE(error_of({.coflow = bad}).find("FLOWTUNE_COFLOW"), std::string::npos) << bad;
  }
  const std::string e = error_of({.rules = "dport=80 class=0; dport=70000 class=1"});
  EXPECT_NE(e.find("FLOWTUNE_RULES: rule 2, 'dport=70000'"), std::string::npos) << e;
  for (const char* bad : {"dst=10.0.0.0/33", "dst=10.0.0", "dport=0", "dport=90-80", "class=x",
                          "colour=red", "class", "tenant=", "deadline-ms=0", "coflow=0", "coflow=x"}) {
    EXPECT_NE(error_of({.rules = bad}).find("FLOWTUNE_RULES: rule 1"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace flowtune::preload
