// Tests of Status and StatusOr: codes, messages, value access and the propagation macros.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpufrac {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s, OkStatus());
}

TEST(StatusTest, ErrorKeepsCodeAndMessage) {
  Status s(StatusCode::kNotFound, "no GPU with index 3");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no GPU with index 3");
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no GPU with index 3");
}

TEST(StatusTest, OkCodeDropsMessage) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, HelpersMakeTheirCodes) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const std::vector<Case> cases = {
      {InvalidArgumentError("m"), StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {NotFoundError("m"), StatusCode::kNotFound, "NOT_FOUND"},
      {FailedPreconditionError("m"), StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {ResourceExhaustedError("m"), StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
      {UnavailableError("m"), StatusCode::kUnavailable, "UNAVAILABLE"},
      {InternalError("m"), StatusCode::kInternal, "INTERNAL"},
      {PermissionDeniedError("m"), StatusCode::kPermissionDenied, "PERMISSION_DENIED"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.code) << c.name;
    EXPECT_EQ(c.status.message(), "m") << c.name;
    EXPECT_EQ(StatusCodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
  EXPECT_EQ(StatusCodeName(StatusCode::kOk), "OK");
}

TEST(StatusTest, Equality) {
  EXPECT_EQ(NotFoundError("a"), NotFoundError("a"));
  EXPECT_NE(NotFoundError("a"), NotFoundError("b"));
  EXPECT_NE(NotFoundError("a"), InternalError("a"));
  EXPECT_NE(NotFoundError("a"), OkStatus());
}

TEST(StatusTest, WithContextPrefixesErrorsOnly) {
  EXPECT_EQ(InvalidArgumentError("size is empty").WithContext("--gpu-memory"),
            InvalidArgumentError("--gpu-memory: size is empty"));
  EXPECT_TRUE(OkStatus().WithContext("anything").ok());
  EXPECT_EQ(OkStatus().WithContext("anything").message(), "");
}

TEST(StatusOrTest, HoldsValue) {
  StatusOr<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v.status().ok());
  EXPECT_EQ(v.value(), 42);
  EXPECT_EQ(*v, 42);
  *v = 7;
  EXPECT_EQ(v.value(), 7);
  EXPECT_EQ(v.value_or(3), 7);
}

TEST(StatusOrTest, HoldsError) {
  StatusOr<int> v = ResourceExhaustedError("GPU 0 is full");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status(), ResourceExhaustedError("GPU 0 is full"));
  EXPECT_EQ(v.value_or(3), 3);
}

TEST(StatusOrTest, OkStatusBecomesInternalError) {
  StatusOr<int> v = OkStatus();
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

TEST(StatusOrTest, ArrowAndMoveOnlyValues) {
  StatusOr<std::string> s = std::string("H100");
  EXPECT_EQ(s->size(), 4u);
  StatusOr<std::string> from_literal = "A100";
  EXPECT_EQ(*from_literal, "A100");

  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(5);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 5);
}

TEST(StatusOrTest, ConvertsCompatibleValues) {
  StatusOr<uint64_t> bytes = 4;  // int -> uint64_t
  EXPECT_EQ(*bytes, 4u);
}

TEST(StatusOrDeathTest, ValueOfErrorAborts) {
  StatusOr<int> v = NotFoundError("no GPU with index 3");
  EXPECT_DEATH((void)v.value(), "NOT_FOUND: no GPU with index 3");
  EXPECT_DEATH((void)*v, "no GPU with index 3");
}

Status FailsWhen(bool fail) { return fail ? UnavailableError("down") : OkStatus(); }

Status UsesReturnIfError(bool fail, int* reached) {
  GPUFRAC_RETURN_IF_ERROR(FailsWhen(fail));
  ++*reached;
  return OkStatus();
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  GPUFRAC_ASSIGN_OR_RETURN(int half, Half(x));
  GPUFRAC_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusMacrosTest, ReturnIfError) {
  int reached = 0;
  EXPECT_TRUE(UsesReturnIfError(false, &reached).ok());
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(UsesReturnIfError(true, &reached), UnavailableError("down"));
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, AssignOrReturn) {
  EXPECT_EQ(*Quarter(12), 3);
  EXPECT_EQ(Quarter(6).status(), InvalidArgumentError("odd"));
  EXPECT_EQ(Quarter(5).status(), InvalidArgumentError("odd"));
}

}  // namespace
}  // namespace gpufrac
