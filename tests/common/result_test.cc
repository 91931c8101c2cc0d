// Result<T> and Result<void> (flowtune/common/result.h): which side a Result
// holds, what it hands back, and that misuse is caught as a bug.
#include "flowtune/common/result.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace flowtune {
namespace {

Result<int> parse_digit(char c) {
  if (c < '0' || c > '9') return fail(ErrorCause::kInvalid, std::string("not a digit: ") + c);
  return c - '0';
}

Result<void> check_even(int n) {
  if (n % 2 != 0) return fail(ErrorCause::kRefused, std::to_string(n) + " is odd");
  return ok();
}

TEST(Result, HoldsTheValueOnSuccess) {
  const Result<int> r = parse_digit('7');
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(r.value_or(-1), 7);
}

TEST(Result, HoldsCauseAndMessageOnFailure) {
  const Result<int> r = parse_digit('x');
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().cause, ErrorCause::kInvalid);
  EXPECT_EQ(r.error().message, "not a digit: x");
  EXPECT_EQ(r.value_or(-1), -1);
}

TEST(Result, VoidResultReportsSuccessOrError) {
  EXPECT_TRUE(check_even(4).ok());
  const Result<void> r = check_even(3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().cause, ErrorCause::kRefused);
  EXPECT_EQ(r.error().message, "3 is odd");
}

TEST(Result, ContextIsPrefixedAndCauseKept) {
  const Error e = parse_digit('?').error().with_context("key file");
  EXPECT_EQ(e.cause, ErrorCause::kInvalid);
  EXPECT_EQ(e.message, "key file: not a digit: ?");
}

TEST(Result, MovesOutMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(42);
  ASSERT_TRUE(r);
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 42);
}

TEST(Result, MemberAccessThroughArrow) {
  const Result<std::string> r = std::string("flowlet");
  EXPECT_EQ(r->size(), 7U);
}

TEST(Result, CauseNamesAreDistinct) {
  EXPECT_EQ(cause_name(ErrorCause::kIo), "io");
  EXPECT_EQ(cause_name(ErrorCause::kTooLarge), "too large");
  EXPECT_NE(cause_name(ErrorCause::kRefused), cause_name(ErrorCause::kUnavailable));
}

TEST(ResultDeathTest, ReadingTheValueOfAFailureIsABug) {
  const Result<int> r = parse_digit('x');
  EXPECT_DEATH((void)r.value(), "assertion failed.*not a digit: x");
}

TEST(ResultDeathTest, ReadingTheErrorOfASuccessIsABug) {
  const Result<int> r = parse_digit('1');
  EXPECT_DEATH((void)r.error(), "assertion failed");
}

}  // namespace
}  // namespace flowtune
