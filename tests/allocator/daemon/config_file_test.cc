// read_config_file: TOML keys to the flags they stand for, and refusals
// that name the file, the line and the key.
#include "flowtune/daemon/config_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "flowtune/daemon/network.h"

namespace flowtune::daemon {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    std::ofstream(path_) << text;
    return path_;
  }
  // The ConfigError's text, or "" when none was thrown.
  std::string error_of(const std::string& text) {
    try {
      (void)read_config_file(write(text));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return {};
  }
  void TearDown() override { ::unlink(path_.c_str()); }
  std::string path_ = "/tmp/ft-config-test-" + std::to_string(::getpid()) + ".toml";
};

TEST_F(ConfigFileTest, KeysBecomeFlagsInLineOrder) {
  const auto e = read_config_file(write(
      "listen = \"tcp://0.0.0.0:5555\"\n[engine]\nthreads = 4\ngamma = 0.25\nearly-rates = false\nmpi = true\n"
      "[relays]\nrelay-from = [\"10.1.0.0/16\", \"10.2.0.0/16\"]\n"));
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0].flag, "--listen");
  EXPECT_EQ(e[0].value, "tcp://0.0.0.0:5555");
  EXPECT_EQ(e[1].flag, "--threads");
  EXPECT_EQ(e[1].value, "4");
  EXPECT_EQ(e[1].line, 3u);
  EXPECT_EQ(e[2].value, "0.25");
  EXPECT_EQ(e[3].value, "off") << "a boolean on a valued flag";
  EXPECT_TRUE(e[4].is_switch);
  EXPECT_EQ(e[4].flag, "--mpi");
  EXPECT_EQ(e[5].value, "10.1.0.0/16,10.2.0.0/16");
}

TEST_F(ConfigFileTest, AFalseSwitchIsLeftOut) {
  EXPECT_TRUE(read_config_file(write("mpi = false\n")).empty());
}

TEST_F(ConfigFileTest, RefusalsNameTheFileLineAndKey) {
  EXPECT_NE(error_of("threads = 1\n[a]\nthreads = 2\n").find(":3: key 'threads': given again (first on line 1)"),
            std::string::npos);
  EXPECT_NE(error_of("[a]\n[a.b]\nthreads = 2\n").find("tables group keys one level deep only"), std::string::npos);
  EXPECT_NE(error_of("check-config = true\n").find(":1: key 'check-config': not a setting"), std::string::npos);
  EXPECT_NE(error_of("mpi = \"yes\"\n").find("key 'mpi': a switch: true or false"), std::string::npos);
  EXPECT_NE(error_of("when = 1979-05-27\n").find("key 'when': a string, number"), std::string::npos);
  EXPECT_NE(error_of("threads = \n").find(":1:"), std::string::npos) << "TOML errors give line:column";
  EXPECT_EQ(error_of("threads = 2\n"), "");
}

TEST_F(ConfigFileTest, AMissingFileIsNamed) {
  try {
    (void)read_config_file("/nonexistent/allocator.toml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/allocator.toml: cannot open"), std::string::npos);
  }
}

}  // namespace
}  // namespace flowtune::daemon
