// A POST /v1/jobs body decoded without the service: every key lands in the submission, a request
// field may be a string or a number, and a body of the wrong shape is one error saying what to fix.
#include <gtest/gtest.h>

#include "node/submission.h"

namespace gpufrac::node {
namespace {

std::string Error(std::string_view body) {
  StatusOr<SubmissionBody> s = ParseSubmission(body);
  EXPECT_FALSE(s.ok()) << body;
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  return s.status().message();
}

TEST(Submission, EveryKeyLandsInTheSubmission) {
  StatusOr<SubmissionBody> s = ParseSubmission(
      R"({"name": "train", "queue": "batch", "command": ["python3", "train.py"], "cwd": "/w",
          "env": ["A=1"], "request": {"gpu-memory": "4G", "gpu-model": "H100-80GB"},
          "user": "alice"})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->submission.name, "train");
  EXPECT_EQ(s->submission.queue, "batch");
  EXPECT_EQ(s->submission.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(s->submission.cwd, "/w");
  EXPECT_EQ(s->submission.env, (std::vector<std::string>{"A=1"}));
  EXPECT_EQ(s->submission.request, GpuRequest::Memory(uint64_t{4} << 30).OnModel("H100-80GB"));
  EXPECT_EQ(s->user, "alice");
}

TEST(Submission, RequestFieldsMayBeNumbersAndTheRequestMayBeLeftOut) {
  StatusOr<SubmissionBody> s = ParseSubmission(R"({"command": ["x"], "request": {"gpus": 2}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->submission.request, GpuRequest::Whole(2));
  s = ParseSubmission(R"({"command": ["x"], "request": {"gpu-fraction": 0.25}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->submission.request, GpuRequest::Fraction(250));
  s = ParseSubmission(R"({"command": ["x"]})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->submission.request.has_value());
  EXPECT_EQ(s->user, "");
}

TEST(Submission, ABodyOfTheWrongShapeSaysWhatToFix) {
  EXPECT_EQ(Error("[1]"), "the request body must be a JSON object");
  EXPECT_EQ(Error("{\"command\": [\"x\"]"), "the request body must be a JSON object");
  EXPECT_EQ(Error(R"({"cmd": ["x"]})"),
            "unknown field cmd (allowed: name, queue, request, command, cwd, env, user)");
  EXPECT_EQ(Error(R"({"command": "x"})"), "command must be a list of strings");
  EXPECT_EQ(Error(R"({"env": [1]})"), "env must be a list of strings");
  EXPECT_EQ(Error(R"({"cwd": 1})"), "cwd must be a string");
  EXPECT_EQ(Error(R"({"request": 1})"), "request must be an object, e.g. {\"gpus\": 1}");
  EXPECT_EQ(Error(R"({"request": {"memory": "4G"}})"),
            "unknown field request.memory (allowed: gpu-memory, gpu-fraction, gpus, mig-profile, "
            "gpu-model, gpu-compute, gpu-compute-limit)");
  EXPECT_EQ(Error(R"({"request": {"gpus": [1]}})"), "request.gpus must be a string or a number");
  EXPECT_EQ(Error(R"({"request": {"gpus": 0}})").rfind("--gpus is \"0\"", 0), 0u);
}

// Found while writing tests/fuzz/fuzz_api_json: integers above 2^63 were read as int64_t, so
// 2^64 - 1 bytes was refused as "-1", negative.
TEST(Submission, LargeIntegersAreReadAsTheyAreWritten) {
  EXPECT_EQ(Error(R"({"request": {"gpus": 18446744073709551615}})")
                .rfind("--gpus is \"18446744073709551615\"", 0),
            0u);
  StatusOr<SubmissionBody> s =
      ParseSubmission(R"({"request": {"gpu-memory": 18446744073709551615}})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->submission.request, GpuRequest::Memory(UINT64_MAX));
  EXPECT_EQ(Error(R"({"request": {"gpu-memory": -1}})"),
            "--gpu-memory: size \"-1\" is negative (sizes must be greater than zero, e.g. 4G)");
}

}  // namespace
}  // namespace gpufrac::node
