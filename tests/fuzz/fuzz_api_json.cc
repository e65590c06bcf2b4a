// The node API's JSON, both ways: a POST /v1/jobs body as the service decodes it
// (ParseSubmission), and a job answer as the command line reads it (JobWire::FromJson). Neither
// may crash or throw; an accepted request prints as flags that read back to it, and a job that
// reads writes back to JSON that reads to the same job.
#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "node/job_wire.h"
#include "node/submission.h"

using gpufrac::StatusCode;
using gpufrac::StatusOr;
using gpufrac::node::JobWire;
using gpufrac::node::ParseSubmission;
using gpufrac::node::SubmissionBody;
using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = gpufrac::fuzz::AsText(data, size);

  StatusOr<SubmissionBody> body = ParseSubmission(text);
  if (!body.ok()) {
    FUZZ_CHECK(body.status().code() == StatusCode::kInvalidArgument, body.status().ToString());
  } else if (body->submission.request) {
    gpufrac::fuzz::CheckRequestRoundTrip(*body->submission.request);
  }

  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  StatusOr<JobWire> job = JobWire::FromJson(j);
  if (job.ok()) {
    const json again = job->ToJson();
    StatusOr<JobWire> back = JobWire::FromJson(again);
    FUZZ_CHECK(back.ok(), back.status().ToString());
    FUZZ_CHECK(back->ToJson() == again, again.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return 0;
}
