// cli::Args (flowtune/common/cli.h), the parser every Flowtune tool uses:
// values, numbers, counts and choices parse or end the process with status 2
// and a reason naming the flag; --help exits 0. Exits are checked with
// death tests (each runs in a child process).
#include "flowtune/common/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flowtune::cli {
namespace {

constexpr const char* kUsage = "usage: tool [--n N]\n";

// argv built from strings (kept alive by the fixture).
class CliTest : public ::testing::Test {
 protected:
  Args make(std::vector<std::string> a) {
    store_ = std::move(a);
    store_.insert(store_.begin(), "tool");
    ptrs_.clear();
    for (auto& s : store_) ptrs_.push_back(s.data());
    return Args("tool", kUsage, static_cast<int>(ptrs_.size()), ptrs_.data());
  }
  std::vector<std::string> store_;
  std::vector<char*> ptrs_;
};

TEST(SplitCommas, KeepsEveryItemEmptyOnesIncluded) {
  EXPECT_EQ(split_commas("a,b,,c"), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(split_commas("10.0.0.0/8"), (std::vector<std::string>{"10.0.0.0/8"}));
  EXPECT_EQ(split_commas("a,"), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(split_commas(""), (std::vector<std::string>{""}));
}

TEST_F(CliTest, ParsesFlagsValuesAndOperandsInOrder) {
  Args a = make({"--n", "42", "--x", "-2.5e3", "file", "-", "--mode", "b", "--q"});
  std::vector<std::string> seen;
  std::uint64_t n = 0;
  double x = 0;
  int mode = 0;
  while (a.next()) {
    if (a.is("--n")) n = a.count(100);
    else if (a.is("--x")) x = a.number();
    else if (a.is("--mode")) mode = a.choice<int>({{"a", 1}, {"b", 2}});
    else seen.emplace_back(std::string(a.arg()) + (a.is_option() ? ":opt" : ":operand"));
  }
  EXPECT_EQ(n, 42u);
  EXPECT_EQ(x, -2500.0);
  EXPECT_EQ(mode, 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"file:operand", "-:operand", "--q:opt"}));
}

TEST_F(CliTest, HelpAnywherePrintsUsageAndExitsZero) {
  EXPECT_EXIT(
      {
        Args a = make({"--n", "1", "--help"});
        while (a.next()) {
          if (a.is("--n")) a.count();
        }
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CliTest, BadValuesExitTwoNamingTheFlag) {
  auto run = [this](std::vector<std::string> v) {
    Args a = make(std::move(v));
    while (a.next()) {
      if (a.is("--n")) a.count(100);
      else if (a.is("--x")) a.number();
      else if (a.is("--mode")) a.choice<int>({{"a", 1}, {"b", 2}, {"c", 3}});
      else a.unknown("run");
    }
  };
  const auto code = ::testing::ExitedWithCode(kExitUsage);
  EXPECT_EXIT(run({"--n"}), code, "tool: missing value for --n\n\\(run 'tool --help' for usage\\)");
  EXPECT_EXIT(run({"--n", "101"}), code, "--n expects an integer 0-100, got '101'");
  EXPECT_EXIT(run({"--n", "-1"}), code, "--n expects an integer 0-100, got '-1'");
  EXPECT_EXIT(run({"--n", "1x"}), code, "--n expects an integer 0-100");
  EXPECT_EXIT(run({"--x", "abc"}), code, "--x expects a number, got 'abc'");
  EXPECT_EXIT(run({"--x", "nan"}), code, "--x expects a number, got 'nan'");
  EXPECT_EXIT(run({"--x", "1e999"}), code, "--x expects a number");
  EXPECT_EXIT(run({"--x", "0x10"}), code, "--x expects a number, got '0x10'");
  EXPECT_EXIT(run({"--x", "0x1p3"}), code, "--x expects a number, got '0x1p3'");
  EXPECT_EXIT(run({"--x", "inf"}), code, "--x expects a number, got 'inf'");
  EXPECT_EXIT(run({"--mode", "d"}), code, "--mode expects a, b or c, got 'd'");
  EXPECT_EXIT(run({"--frob"}), code, "unknown option '--frob' for run");
}

TEST_F(CliTest, BoundedNumbersNameTheirRange) {
  auto take = [this](std::string v) {
    Args a = make({"--x", std::move(v)});
    EXPECT_TRUE(a.next());
    return a.number(0.5, 1000);
  };
  EXPECT_EQ(take("0.5"), 0.5);
  EXPECT_EQ(take("1e3"), 1000.0);
  const auto code = ::testing::ExitedWithCode(kExitUsage);
  EXPECT_EXIT(take("1e300"), code, "--x expects a number from 0.5 to 1000, got '1e300'");
  EXPECT_EXIT(take("0.4"), code, "--x expects a number from 0.5 to 1000, got '0.4'");
  EXPECT_EXIT(take("-1"), code, "--x expects a number from 0.5 to 1000");
}

TEST_F(CliTest, UnboundedCountsSayNonNegative) {
  Args a = make({"--n", "x"});
  ASSERT_TRUE(a.next());
  EXPECT_EXIT(a.count(), ::testing::ExitedWithCode(kExitUsage),
              "--n expects a non-negative integer, got 'x'");
}

}  // namespace
}  // namespace flowtune::cli
