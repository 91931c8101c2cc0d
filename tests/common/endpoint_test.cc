// endpoint_port_error (flowtune/common/endpoint.h): a TCP endpoint's port
// must be decimal 0-65535 or '*', since libzmq would keep only its low 16
// bits; other transports pass unchecked.
#include "flowtune/common/endpoint.h"

#include <gtest/gtest.h>

namespace flowtune {
namespace {

TEST(EndpointPort, TcpPortsInRangeOrAnyPass) {
  for (const char* ok : {"tcp://127.0.0.1:5555", "tcp://*:0", "tcp://h:65535", "tcp://[::1]:80",
                         "tcp://127.0.0.1:*", "ipc:///tmp/a:99999", "inproc://x",
                         "tcp://eth0:5555", "tcp://[fe80::1%eth0]:5555",
                         "tcp://eth1:0;server1:5555", "tcp://192.168.1.17:5555;192.168.1.1:5555"}) {
    EXPECT_EQ(endpoint_port_error(ok), "") << ok;
  }
}

TEST(EndpointPort, OutOfRangeMalformedOrMissingPortsAreNamed) {
  EXPECT_EQ(endpoint_port_error("tcp://127.0.0.1:99999"),
            "'tcp://127.0.0.1:99999': port '99999' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://127.0.0.1:65536"),
            "'tcp://127.0.0.1:65536': port '65536' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://h:0x10"), "'tcp://h:0x10': port '0x10' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://h:-1"), "'tcp://h:-1': port '-1' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://h:"), "'tcp://h:': port '' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://h:1000000000000000000000"),
            "'tcp://h:1000000000000000000000': port '1000000000000000000000' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://127.0.0.1"),
            "'tcp://127.0.0.1' names no port (tcp://HOST:PORT)");
  // The source address's port is checked too.
  EXPECT_EQ(endpoint_port_error("tcp://10.0.0.1:99999;10.0.0.2:5555"),
            "'tcp://10.0.0.1:99999;10.0.0.2:5555': port '99999' is not 0-65535 or *");
  EXPECT_EQ(endpoint_port_error("tcp://10.0.0.1;10.0.0.2:5555"),
            "'tcp://10.0.0.1;10.0.0.2:5555' names no port (tcp://HOST:PORT)");
}

}  // namespace
}  // namespace flowtune
