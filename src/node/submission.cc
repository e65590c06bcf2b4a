// Decoding of a job submission's JSON (see submission.h) with nlohmann::json, without exceptions.
#include "node/submission.h"

#include <nlohmann/json.hpp>
#include <set>

namespace gpufrac::node {
namespace {

using nlohmann::json;

// A request field given as a string or a number ("0.25" or 0.25), as flags are text.
StatusOr<std::string> FlagText(const json& value, const std::string& key) {
  if (value.is_string()) return value.get<std::string>();
  // Above 2^63 an integer is only unsigned: as int64_t, 2^64 - 1 would read as "-1".
  if (value.is_number_unsigned()) return std::to_string(value.get<uint64_t>());
  if (value.is_number_integer()) return std::to_string(value.get<int64_t>());
  if (value.is_number()) return value.dump(-1, ' ', false, json::error_handler_t::replace);
  return InvalidArgumentError("request." + key + " must be a string or a number");
}

StatusOr<GpuRequest> ParseRequestJson(const json& r) {
  if (!r.is_object()) return InvalidArgumentError("request must be an object, e.g. {\"gpus\": 1}");
  GpuRequestText text;
  for (const auto& [key, value] : r.items()) {
    const GpuRequestField* field = FindGpuRequestField(key);
    if (field == nullptr) {
      return InvalidArgumentError("unknown field request." + key +
                                  " (allowed: " + GpuRequestFieldNames() + ")");
    }
    GPUFRAC_ASSIGN_OR_RETURN(text.*field->text, FlagText(value, key));
  }
  return ParseGpuRequest(text);
}

StatusOr<std::vector<std::string>> StringList(const json& body, const char* key) {
  std::vector<std::string> out;
  if (!body.contains(key)) return out;
  const json& list = body[key];
  if (!list.is_array())
    return InvalidArgumentError(std::string(key) + " must be a list of strings");
  for (const json& item : list) {
    if (!item.is_string())
      return InvalidArgumentError(std::string(key) + " must be a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

StatusOr<std::string> OptionalString(const json& body, const char* key) {
  if (!body.contains(key)) return std::string();
  if (!body[key].is_string()) return InvalidArgumentError(std::string(key) + " must be a string");
  return body[key].get<std::string>();
}

}  // namespace

StatusOr<SubmissionBody> ParseSubmission(std::string_view text) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return InvalidArgumentError("the request body must be a JSON object");
  }
  static const std::set<std::string> kAllowed = {"name", "queue", "request", "command",
                                                 "cwd",  "env",   "user"};
  for (const auto& [key, value] : body.items()) {
    if (!kAllowed.count(key)) {
      return InvalidArgumentError("unknown field " + key +
                                  " (allowed: name, queue, request, command, cwd, env, user)");
    }
  }
  SubmissionBody out;
  Submission& s = out.submission;
  GPUFRAC_ASSIGN_OR_RETURN(s.name, OptionalString(body, "name"));
  GPUFRAC_ASSIGN_OR_RETURN(s.queue, OptionalString(body, "queue"));
  GPUFRAC_ASSIGN_OR_RETURN(s.cwd, OptionalString(body, "cwd"));
  GPUFRAC_ASSIGN_OR_RETURN(out.user, OptionalString(body, "user"));
  GPUFRAC_ASSIGN_OR_RETURN(s.command, StringList(body, "command"));
  GPUFRAC_ASSIGN_OR_RETURN(s.env, StringList(body, "env"));
  if (body.contains("request")) {
    GPUFRAC_ASSIGN_OR_RETURN(s.request, ParseRequestJson(body["request"]));
  }
  return out;
}

Status CheckSubmission(const Submission& s) {
  constexpr size_t kMaxCommandArgs = 4096;
  if (s.command.empty() || s.command[0].empty()) {
    return InvalidArgumentError("the job has no command; give one after --, e.g. -- python x.py");
  }
  if (s.command.size() > kMaxCommandArgs) {
    return InvalidArgumentError("the command has more than " + std::to_string(kMaxCommandArgs) +
                                " arguments");
  }
  if (s.cwd.empty() || s.cwd[0] != '/') {
    return InvalidArgumentError("cwd must be an absolute path, not \"" + s.cwd + "\"");
  }
  for (const std::string& e : s.env) {
    size_t eq = e.find('=');
    if (eq == 0 || eq == std::string::npos) {
      return InvalidArgumentError("env entry \"" + e.substr(0, 40) + "\" is not NAME=value");
    }
  }
  for (const auto* text : {&s.name, &s.cwd}) {
    if (text->find('\0') != std::string::npos) {
      return InvalidArgumentError("name and cwd must not contain NUL bytes");
    }
  }
  if (s.name.size() > 128) return InvalidArgumentError("the job name is longer than 128 bytes");
  return OkStatus();
}

}  // namespace gpufrac::node
