// Status and StatusOr<T>: how gpufrac reports expected failures (bad input, busy or full GPU,
// missing driver) as values with a message a user can act on, instead of exceptions.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace gpufrac {

// Each code tells a caller what it can do next (Abseil's rule): retry the same call
// (kUnavailable), retry at a higher level, reading again first (kAborted), retry once something is
// freed (kResourceExhausted), or not retry until someone fixes the input (kInvalidArgument,
// kNotFound), the state of the system (kFailedPrecondition), who asks (kPermissionDenied) or the
// code (kInternal). Pick the code by that, not by how the failure looks: a full disk is
// kResourceExhausted, not kUnavailable; a directory others can write is kFailedPrecondition.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,     // The input is wrong whatever the state (a size, a share, a name); fix
                        // the input.
  kNotFound,            // Something named does not exist (a GPU, an allocation, a profile, a
                        // file); name another, or make it first.
  kFailedPrecondition,  // The system is not in a state where this can work (MIG disabled, a
                        // directory others can write, a file in the way); do not retry until
                        // that state is fixed.
  kResourceExhausted,   // Not enough of something right now (memory, GPUs, slices, disk space,
                        // descriptors); retry once some is freed.
  kUnavailable,         // Transient, or a dependency missing or down (no driver, daemon
                        // unreachable, an interrupted call); retry the same call, with backoff.
  kInternal,            // A bug or an unexpected answer from below; not the user's fault, and
                        // retrying will not help.
  kPermissionDenied,    // The caller may not do this (e.g. NVML needs root for MIG changes);
                        // retrying as the same caller will not help.
  kAborted,             // A concurrent change won (e.g. a write conflict); retry at a higher
                        // level: read again, then redo the whole change.
};

// "OK", "INVALID_ARGUMENT", ... for logs and --json output.
std::string_view StatusCodeName(StatusCode code);

// A success, or an error code with a one-line message. The message says what went wrong and,
// where possible, what to do about it; it does not repeat the code.
class [[nodiscard]] Status {
 public:
  // OK.
  Status() = default;
  // An error. Passing kOk yields OK and drops the message.
  Status(StatusCode code, std::string message);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }
  // "OK" or "NOT_FOUND: no GPU with index 3".
  std::string ToString() const;

  // A copy whose message reads "<context>: <message>", for adding where a failure happened.
  // OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Writes ToString(); lets test frameworks print a Status.
std::ostream& operator<<(std::ostream& out, const Status& status);

inline Status OkStatus() { return Status(); }
Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status InternalError(std::string message);
Status PermissionDeniedError(std::string message);
Status AbortedError(std::string message);

namespace internal {
// Reading the value of a failed StatusOr is a programming error: report it and abort.
[[noreturn]] void DieOnBadStatusOrAccess(const Status& status);
}  // namespace internal

// Either a T or a non-OK Status. Constructing one from an OK Status is a programming error and
// yields a kInternal error instead. value(), operator* and operator-> require ok(); calling
// them otherwise aborts the process with the status in the message.
template <typename T>
class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::remove_cv_t<T>, Status>, "StatusOr<Status> is not allowed");

 public:
  StatusOr(const T& value) : value_(value) {}             // NOLINT: implicit, like absl::StatusOr.
  StatusOr(T&& value) : value_(std::move(value)) {}       // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) {
      status_ = Status(StatusCode::kInternal, "StatusOr constructed from an OK status");
    }
  }
  // Converting construction from a value of another type (e.g. a derived pointer).
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status> &&
                                                    !std::is_same_v<std::decay_t<U>, StatusOr<T>>>>
  StatusOr(U&& value) : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  // OK when a value is held.
  const Status& status() const { return status_; }

  const T& value() const& { return Checked(); }
  T& value() & { return Checked(); }
  T&& value() && { return std::move(Checked()); }

  const T& operator*() const& { return Checked(); }
  T& operator*() & { return Checked(); }
  T&& operator*() && { return std::move(Checked()); }
  const T* operator->() const { return &Checked(); }
  T* operator->() { return &Checked(); }

  // The value, or `fallback` when there is none.
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  const T& Checked() const {
    if (!value_) internal::DieOnBadStatusOrAccess(status_);
    return *value_;
  }
  T& Checked() {
    if (!value_) internal::DieOnBadStatusOrAccess(status_);
    return *value_;
  }

  Status status_;  // OK exactly when value_ holds a value.
  std::optional<T> value_;
};

}  // namespace gpufrac

// Returns from the enclosing function (which must return Status or StatusOr<U>) when `expr`,
// a Status, is not OK.
#define GPUFRAC_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::gpufrac::Status gpufrac_status_ = (expr);        \
    if (!gpufrac_status_.ok()) return gpufrac_status_; \
  } while (false)

// `GPUFRAC_ASSIGN_OR_RETURN(auto x, F());` declares/assigns x from the StatusOr F() returns,
// or returns its error from the enclosing function.
#define GPUFRAC_ASSIGN_OR_RETURN(lhs, expr) \
  GPUFRAC_ASSIGN_OR_RETURN_IMPL_(GPUFRAC_STATUS_CONCAT_(gpufrac_statusor_, __LINE__), lhs, expr)
#define GPUFRAC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
#define GPUFRAC_STATUS_CONCAT_(a, b) GPUFRAC_STATUS_CONCAT_INNER_(a, b)
#define GPUFRAC_STATUS_CONCAT_INNER_(a, b) a##b
