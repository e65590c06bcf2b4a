// A job as a caller submits it, and the body of POST /v1/jobs decoded into one. Decoding needs no
// service, so what a caller sends is checked (and fuzzed: tests/fuzz/) apart from what the
// service then does with it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/gpu_request.h"
#include "common/status.h"

namespace gpufrac::node {

// What a submission carries besides who sent it.
struct Submission {
  std::string name;
  std::string queue;                  // Empty: the first (highest-priority) queue.
  std::optional<GpuRequest> request;  // Empty: the queue's default.
  std::vector<std::string> command;
  std::string cwd;
  std::vector<std::string> env;
};

// The body of POST /v1/jobs: {"command": [...], "cwd": "/abs", "env": [...], "queue"?, "name"?,
// "request"?: {"gpu-memory": "4G", ...: the fields of common/gpu_request.h, each a string or a
// number}, "user"?}.
struct SubmissionBody {
  Submission submission;
  std::string user;  // "" when not given; the API decides who may name one.
};

// Decodes a POST /v1/jobs body. Anything else (not a JSON object, an unknown key, a value of the
// wrong type, a request the grammar refuses) is kInvalidArgument with one line saying what to fix.
// What the values mean (a command that exists, a queue that does) is the service's to check.
StatusOr<SubmissionBody> ParseSubmission(std::string_view body);

// Whether `submission` is one a job can be made of, whoever sends it: a command, an absolute
// cwd, NAME=value environment entries, no NUL bytes in the name or cwd, a name of at most 128
// bytes. kInvalidArgument says what to fix. (Service::Submit checks it.)
Status CheckSubmission(const Submission& submission);

}  // namespace gpufrac::node
