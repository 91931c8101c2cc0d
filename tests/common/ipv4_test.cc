// IPv4 text forms (flowtune/common/ipv4.h), checked against the C library's
// inet_ntop and by hand for what inet_aton accepts and we refuse.
#include "flowtune/common/ipv4.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string_view>

namespace flowtune {
namespace {

TEST(ParseIpv4, AcceptsTheWholeRangeInHostByteOrder) {
  EXPECT_EQ(parse_ipv4("0.0.0.0"), 0u);
  EXPECT_EQ(parse_ipv4("255.255.255.255"), 0xffffffffu);
  EXPECT_EQ(parse_ipv4("10.1.2.3"), 0x0a010203u);
  EXPECT_EQ(parse_ipv4("192.168.0.10"), 0xc0a8000au);
}

TEST(ParseIpv4, RejectsJunkMissingOrExtraOctetsAndOverflow) {
  for (std::string_view s :
       {"", "1.2.3", "1.2.3.4.5", "1..2.3", ".1.2.3", "1.2.3.", "256.0.0.1", "1.2.3.300",
        "1234.1.1.1", " 1.2.3.4", "1.2.3.4 ", "x1.2.3.4", "1.2.3.4x", "-1.2.3.4", "1.2.3.+4",
        "0x1.2.3.4", "1.2.3.4/24", "...", "1,2,3,4"}) {
    EXPECT_EQ(parse_ipv4(s), std::nullopt) << '"' << s << '"';
  }
}

TEST(ParseIpv4, RejectsLeadingZerosBecauseTheyMeanOctalToInetAton) {
  EXPECT_EQ(parse_ipv4("010.0.0.1"), std::nullopt);
  EXPECT_EQ(parse_ipv4("1.2.3.00"), std::nullopt);
  EXPECT_EQ(parse_ipv4("1.02.3.4"), std::nullopt);
  EXPECT_EQ(parse_ipv4("1.0.3.4"), 0x01000304u);
}

TEST(FormatIpv4, RoundTripsThroughParse) {
  for (std::string_view s : {"0.0.0.0", "255.255.255.255", "10.0.0.1", "172.16.254.3"}) {
    EXPECT_EQ(format_ipv4(parse_ipv4(s).value()), s);
  }
}

TEST(FormatIpv4, MatchesInetNtopOverManyAddresses) {
  // Oracle: the C library's formatter, fed network byte order.
  std::uint32_t x = 0x12345678;
  for (int i = 0; i < 10000; ++i) {
    x = x * 1664525u + 1013904223u;
    const std::uint32_t net = htonl(x);
    char buf[INET_ADDRSTRLEN];
    ASSERT_NE(inet_ntop(AF_INET, &net, buf, sizeof buf), nullptr);
    EXPECT_EQ(format_ipv4(x), buf);
    EXPECT_EQ(parse_ipv4(buf), x);
  }
}

}  // namespace
TEST(Cidr, NetworksAndSingleAddressesContainWhatTheySayAndBadOnesAreRefused) {
  const auto net = parse_cidr("10.1.0.0/16");
  ASSERT_TRUE(net);
  EXPECT_TRUE(net->contains("10.1.200.3"));
  EXPECT_FALSE(net->contains("10.2.0.1"));
  EXPECT_FALSE(net->contains("::1"));  // IPv6 is never inside
  const auto one = parse_cidr("127.0.0.1");
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->contains("127.0.0.1"));
  EXPECT_FALSE(one->contains("127.0.0.2"));
  EXPECT_TRUE(parse_cidr("0.0.0.0/0")->contains("192.168.1.1"));
  EXPECT_TRUE(parse_cidr("10.1.2.3/8")->contains("10.200.0.0"));  // host bits ignored
  for (const char* bad : {"", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/08", "10.0.0.0/x", "10.0.0/8", "a/8"}) {
    EXPECT_FALSE(parse_cidr(bad)) << bad;
  }
}

}  // namespace flowtune
