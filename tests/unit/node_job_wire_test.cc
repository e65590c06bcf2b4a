// The job's JSON shape on the API: what the service writes reads back to the same job on the
// command line's side, and an answer that is not a job is an error naming what is wrong.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "node/job_wire.h"

namespace gpufrac::node {
namespace {

using nlohmann::json;

Job EndedJob() {
  Job job;
  job.id = 42;
  job.spec.name = "train";
  job.spec.queue = "batch";
  job.spec.user = "alice";
  job.spec.uid = 1001;
  job.spec.request = GpuRequest::Memory(uint64_t{4} << 30);
  job.spec.command = {"python3", "train.py"};
  job.spec.cwd = "/home/alice";
  job.state = JobState::kFailed;
  job.submitted_ms = 1000;
  job.started_ms = 2000;
  job.ended_ms = 3000;
  job.gpus = {{0, "GPU-0b6e6d0e-1111-2222-3333-444455556666", 250, uint64_t{4} << 30}};
  job.exit_code = 3;
  job.reason = "exit code 3";
  return job;
}

TEST(JobWireTest, WhatTheServiceWritesReadsBackToTheSameJob) {
  JobWire sent = JobWire::Of(EndedJob(), "");
  json j = sent.ToJson();
  EXPECT_EQ(j["state"], "failed");
  EXPECT_EQ(j["request"], "--gpu-memory 4GiB");
  EXPECT_EQ(j["gpus"][0]["share"], 0.25);
  EXPECT_FALSE(j.contains("waiting_for"));
  StatusOr<JobWire> read = JobWire::FromJson(j);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->ToJson(), j);
  EXPECT_EQ(read->id, 42);
  EXPECT_EQ(read->state, JobState::kFailed);
  EXPECT_EQ(read->exit_code, 3);
  EXPECT_EQ(read->ExitStatus(), 3);
  EXPECT_EQ(read->Note(), "exit code 3");
  ASSERT_EQ(read->gpus.size(), 1u);
  EXPECT_EQ(read->gpus[0].memory_limit, uint64_t{4} << 30);
}

TEST(JobWireTest, APendingJobSaysWhatItWaitsForAndHasNoEndYet) {
  Job job = EndedJob();
  job.state = JobState::kPending;
  json j = JobWire::Of(job, "GPU 0 is full").ToJson();
  EXPECT_FALSE(j.contains("exit_code"));
  EXPECT_FALSE(j.contains("reason"));
  StatusOr<JobWire> read = JobWire::FromJson(j);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->Note(), "GPU 0 is full");
  EXPECT_FALSE(read->exit_code.has_value());
  EXPECT_EQ(read->ExitStatus(), 1);
}

TEST(JobWireTest, ExitStatusIsTheJobsOwnOrTheSignals) {
  JobWire w;
  w.state = JobState::kSucceeded;
  EXPECT_EQ(w.ExitStatus(), 0);
  w.state = JobState::kFailed;
  w.signal = 9;
  EXPECT_EQ(w.ExitStatus(), 137);
  w.signal = 0;
  w.exit_code = 0;
  EXPECT_EQ(w.ExitStatus(), 1);  // Failed without a code: still a failure.
  w.state = JobState::kCancelled;
  EXPECT_EQ(w.ExitStatus(), 1);
}

TEST(JobWireTest, AnAnswerThatIsNotAJobIsAnError) {
  EXPECT_FALSE(JobWire::FromJson(json::array()).ok());
  EXPECT_NE(JobWire::FromJson(json{{"state", "running"}}).status().message().find("\"id\""),
            std::string::npos);
  EXPECT_NE(
      JobWire::FromJson(json{{"id", 1}, {"state", "sleeping"}}).status().message().find("sleeping"),
      std::string::npos);
  EXPECT_NE(JobWire::FromJson(json{{"id", "one"}, {"state", "running"}})
                .status()
                .message()
                .find("wrong type"),
            std::string::npos);
  EXPECT_TRUE(JobWire::FromJson(json{{"id", 1}, {"state", "running"}}).ok());
}

// Found by tests/fuzz/fuzz_api_json (corpus/api_json/regression-id-too-large.json): a number
// that does not fit the field was cast to it, which for a float is undefined behaviour.
TEST(JobWireTest, ANumberThatDoesNotFitItsFieldIsAnError) {
  for (const json& bad : {json(2.2e38), json(1.5), json(uint64_t{1} << 63)}) {
    EXPECT_EQ(JobWire::FromJson(json{{"id", bad}, {"state", "running"}}).status().message(),
              "the job's \"id\" is not a whole number in range")
        << bad;
  }
  EXPECT_FALSE(JobWire::FromJson(json{{"id", 1}, {"state", "running"}, {"uid", -1}}).ok());
  EXPECT_FALSE(JobWire::FromJson(json{{"id", 1}, {"state", "running"}, {"exit_code", 1e10}}).ok());
  EXPECT_FALSE(
      JobWire::FromJson(json{{"id", 1}, {"state", "running"}, {"gpus", {{{"index", 1ll << 40}}}}})
          .ok());
  StatusOr<JobWire> largest = JobWire::FromJson(
      json{{"id", INT64_MAX},
           {"state", "running"},
           {"gpus", {{{"index", 0}, {"memory_limit", UINT64_MAX}, {"share", 1}}}}});
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->id, INT64_MAX);
  EXPECT_EQ(largest->gpus[0].memory_limit, UINT64_MAX);
}

}  // namespace
}  // namespace gpufrac::node
