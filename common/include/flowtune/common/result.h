// Result<T>: the value of an operation that can be refused or can fail in an
// expected way, or why it was not (tier two of the error model written at the
// top of flowtune/common/assert.h). It replaces "an empty string means OK"
// returns and `std::string* why` out-parameters.
//
//   Result<KeyPair> k = read_key(path);
//   if (!k) return Error{k.error().cause, "the allocator's key: " + k.error().message};
//   use(*k);
//
// A Result holds exactly one of a T or an Error. Reading the value of a
// failed Result (or the error of a successful one) is a bug and FT_ASSERTs.
// Result<void> carries only success or an Error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "flowtune/common/assert.h"

namespace flowtune {

// What kind of failure an Error reports, so a caller can act on it without
// parsing the message.
enum class ErrorCause : std::uint8_t {
  kInvalid,      // the input is malformed or out of range
  kNotFound,     // a named thing (file, key, entry) does not exist
  kIo,           // a system call failed (the message names errno's text)
  kTooLarge,     // the input exceeds a stated bound
  kRefused,      // the request is well formed but not allowed (permissions, policy)
  kUnavailable,  // a peer or resource is not there now; a retry may succeed
};

// A short lower-case name for an ErrorCause ("invalid", "io", ...).
constexpr std::string_view cause_name(ErrorCause c) {
  switch (c) {
    case ErrorCause::kInvalid:
      return "invalid";
    case ErrorCause::kNotFound:
      return "not found";
    case ErrorCause::kIo:
      return "io";
    case ErrorCause::kTooLarge:
      return "too large";
    case ErrorCause::kRefused:
      return "refused";
    case ErrorCause::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

// Why an operation failed: an ErrorCause to branch on and a message for a person,
// which names what failed (a path, a field, a key) without a trailing period.
struct Error {
  ErrorCause cause = ErrorCause::kInvalid;
  std::string message;

  // The same error with `context` and ": " before its message.
  [[nodiscard]] Error with_context(std::string_view context) const {
    return Error{cause, std::string(context) + ": " + message};
  }
};

template <typename T>
class [[nodiscard]] Result {
 public:
  using value_type = T;

  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}      // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  [[nodiscard]] T& value() & {
    FT_ASSERT(ok(), error_message());
    return std::get<0>(v_);
  }
  [[nodiscard]] const T& value() const& {
    FT_ASSERT(ok(), error_message());
    return std::get<0>(v_);
  }
  [[nodiscard]] T&& value() && {
    FT_ASSERT(ok(), error_message());
    return std::get<0>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The value, or `fallback` when this failed.
  template <typename U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? std::get<0>(v_) : static_cast<T>(std::forward<U>(fallback));
  }

  [[nodiscard]] const Error& error() const& {
    FT_ASSERT(!ok(), "Result::error() on a success");
    return std::get<1>(v_);
  }
  [[nodiscard]] Error&& error() && {
    FT_ASSERT(!ok(), "Result::error() on a success");
    return std::get<1>(std::move(v_));
  }

 private:
  [[nodiscard]] std::string_view error_message() const noexcept {
    return ok() ? std::string_view() : std::string_view(std::get<1>(v_).message);
  }

  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;

  Result() = default;
  Result(Error e) : error_(std::move(e)), ok_(false) {}  // NOLINT: implicit by design

  [[nodiscard]] bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }

  [[nodiscard]] const Error& error() const& {
    FT_ASSERT(!ok_, "Result::error() on a success");
    return error_;
  }
  [[nodiscard]] Error&& error() && {
    FT_ASSERT(!ok_, "Result::error() on a success");
    return std::move(error_);
  }

 private:
  Error error_;
  bool ok_ = true;
};

// Success of a Result<void>: `return ok();`.
inline Result<void> ok() { return {}; }

// Shorthand for a failed Result of any T: `return fail(ErrorCause::kIo, path + ": ...");`.
inline Error fail(ErrorCause cause, std::string message) {
  return Error{cause, std::move(message)};
}

}  // namespace flowtune
