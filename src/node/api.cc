// Routes of the node service's API (see api.h): JSON in and out with nlohmann::json, checks of
// who is asking, and the output long poll.
#include "node/api.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <thread>

#include "common/units.h"
#include "node/job_runner.h"
#include "node/job_wire.h"
#include "node/submission.h"

namespace gpufrac::node {
namespace {

using nlohmann::json;

// `value` in JSON, null when there is none.
template <typename T>
json OrNull(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

constexpr size_t kMaxOutputChunk = 256 * 1024;
constexpr int kMaxWaitSeconds = 30;
// Listing reads and decodes the jobs under the service's lock: keep one call bounded.
constexpr unsigned long kMaxListed = 10000;
// A listing's jobs stop at this many bytes of JSON (each user's jobs are bounded, but not their
// number over time).
constexpr size_t kMaxListingBytes = 8 << 20;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse Json(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(body) + "\n";
  return r;
}

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

HttpResponse Error(const Status& status) {
  return Json(HttpStatusOf(status.code()),
              {{"error", status.message()}, {"code", std::string(StatusCodeName(status.code()))}});
}

bool InGroup(uid_t uid, gid_t gid, gid_t group) {
  if (gid == group) return true;
  struct passwd pw, *found = nullptr;
  char buf[4096];
  if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) != 0 || !found) return false;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) return false;
  }
  return std::find(groups.begin(), groups.begin() + n, group) != groups.begin() + n;
}

json JobJson(const Job& job, const std::string& wait_reason) {
  return JobWire::Of(job, wait_reason).ToJson();
}

StatusOr<std::string> OptionalString(const json& body, const char* key) {
  if (!body.contains(key)) return std::string();
  if (!body[key].is_string()) return InvalidArgumentError(std::string(key) + " must be a string");
  return body[key].get<std::string>();
}

class Api {
 public:
  Api(Service* service, ApiOptions options) : service_(service), options_(options) {}

  // The route whose pattern matches the path and whose method is the request's: 405 when only
  // the method differs, 404 when no pattern matches.
  HttpResponse Handle(const HttpRequest& req) {
    std::string allowed;  // Methods of the routes whose pattern matches.
    for (const Route& route : Routes()) {
      std::optional<PathParams> params = Match(route.pattern, req.path);
      if (!params) continue;
      if (route.method == req.method) return (this->*route.handle)(req, *params);
      allowed += (allowed.empty() ? "" : ", ") + std::string(route.method);
    }
    if (!allowed.empty()) {
      HttpResponse r =
          Json(405, {{"error", req.method + " is not allowed on " + req.path + "; use " + allowed},
                     {"code", "INVALID_ARGUMENT"}});
      r.headers.push_back({"Allow", allowed});
      return r;
    }
    return Error(NotFoundError("no such API path: " + req.method + " " + req.path));
  }

  // Values of a pattern's {name} segments.
  using PathParams = std::map<std::string, std::string>;

  struct Route {
    std::string_view method;
    std::string_view pattern;  // "/v1/jobs/{id}/cancel": {name} takes one non-empty segment.
    HttpResponse (Api::*handle)(const HttpRequest&, const PathParams&);
  };

  // The API, one row per route (defined after the class).
  static std::span<const Route> Routes();

  static std::optional<PathParams> Match(std::string_view pattern, std::string_view path) {
    PathParams params;
    while (!pattern.empty() || !path.empty()) {
      if (pattern.empty() || path.empty() || pattern[0] != '/' || path[0] != '/') {
        return std::nullopt;
      }
      pattern.remove_prefix(1);
      path.remove_prefix(1);
      const std::string_view want = pattern.substr(0, pattern.find('/'));
      const std::string_view got = path.substr(0, path.find('/'));
      if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
        if (got.empty()) return std::nullopt;
        params[std::string(want.substr(1, want.size() - 2))] = std::string(got);
      } else if (want != got) {
        return std::nullopt;
      }
      pattern.remove_prefix(want.size());
      path.remove_prefix(got.size());
    }
    return params;
  }

 private:
  // A job id in a path: digits only.
  static StatusOr<int64_t> JobId(const PathParams& params) {
    const std::string& id = params.at("id");
    if (id.empty() || id.size() > 18 || !std::all_of(id.begin(), id.end(), ::isdigit)) {
      return InvalidArgumentError("job id must be a number, not \"" + id + "\"");
    }
    return static_cast<int64_t>(std::stoll(id));
  }

  HttpResponse Metrics(const HttpRequest&, const PathParams&) {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = service_->RenderMetrics();
    return r;
  }

  HttpResponse Health(const HttpRequest&, const PathParams&) {
    return Json(200, {{"ok", true}, {"simulated", service_->simulated()}});
  }

  bool IsAdmin(const Caller& c) const {
    if (c.tcp || c.uid == 0) return true;
    return options_.admin_group && InGroup(c.uid, c.gid, *options_.admin_group);
  }

  // The job, if the caller may see it.
  StatusOr<Job> Visible(const Caller& caller, int64_t id) {
    GPUFRAC_ASSIGN_OR_RETURN(Job job, service_->GetJob(id));
    if (!IsAdmin(caller) && job.spec.uid != caller.uid) {
      return PermissionDeniedError("job " + std::to_string(id) + " belongs to " + job.spec.user +
                                   "; only its owner or an admin may see or cancel it");
    }
    return job;
  }

  HttpResponse Submit(const HttpRequest& req, const PathParams&) {
    StatusOr<SubmissionBody> body = ParseSubmission(req.body);
    if (!body.ok()) return Error(body.status());
    const Submission& s = body->submission;
    const std::string& user = body->user;
    uid_t uid = req.caller.uid;
    gid_t gid = req.caller.gid;
    if (req.caller.tcp && getuid() == 0 && user.empty()) {
      return Error(
          InvalidArgumentError("over TCP, name the user the job runs as: add \"user\": \"NAME\""));
    }
    if (!user.empty()) {
      if (!req.caller.tcp) {
        return Error(
            InvalidArgumentError("user is only for TCP callers; over the unix socket "
                                 "jobs run as the caller"));
      }
      struct passwd pw, *found = nullptr;
      char buf[4096];
      if (getpwnam_r(user.c_str(), &pw, buf, sizeof(buf), &found) != 0 || !found) {
        return Error(InvalidArgumentError("no user called " + user + " on this machine"));
      }
      uid = pw.pw_uid;
      gid = pw.pw_gid;
      if (uid == 0) {
        return Error(PermissionDeniedError("jobs submitted over TCP may not run as root"));
      }
      const TcpUsers& allowed = options_.tcp_users;
      if (allowed.group && !InGroup(uid, gid, *allowed.group)) {
        return Error(
            PermissionDeniedError("jobs submitted over TCP may run only as members of "
                                  "group " +
                                  allowed.group_name + "; " + user + " is not one"));
      }
      if (!allowed.group && (uid < allowed.min_uid || uid > allowed.max_uid)) {
        return Error(PermissionDeniedError(
            "jobs submitted over TCP may run only as users with uid " +
            std::to_string(allowed.min_uid) + "-" + std::to_string(allowed.max_uid) + "; " + user +
            " is uid " + std::to_string(uid) + " (see gpufracd --tcp-users, --tcp-group)"));
      }
    }
    if (getuid() != 0 && uid != getuid()) {
      return Error(PermissionDeniedError(
          "this gpufracd runs as uid " + std::to_string(getuid()) +
          " and can only run that user's jobs; ask an administrator for a system service"));
    }
    auto job = service_->Submit(s, uid, gid);
    if (!job.ok()) return Error(job.status());
    return Json(201, JobJson(*job, service_->WaitReason(job->id)));
  }

  HttpResponse List(const HttpRequest& req, const PathParams&) {
    JobFilter filter;
    bool all = req.query.count("all") && req.query.at("all") == "1";
    if (all && !IsAdmin(req.caller)) {
      return Error(
          PermissionDeniedError("only root and members of the admin group may list all "
                                "users' jobs; drop --all"));
    }
    if (!all) filter.uid = req.caller.uid;
    if (req.query.count("active")) filter.include_final = req.query.at("active") != "1";
    if (req.query.count("limit")) {
      const std::string& l = req.query.at("limit");
      if (l.empty() || l.size() > 5 || !std::all_of(l.begin(), l.end(), ::isdigit) ||
          std::stoul(l) > kMaxListed) {
        return Error(
            InvalidArgumentError("limit must be a number from 1 to " + std::to_string(kMaxListed)));
      }
      filter.limit = std::max<size_t>(1, std::stoul(l));
    }
    // Newest first, and no more than kMaxListingBytes of them (read, then sent): "truncated"
    // says some were left out.
    filter.max_bytes = kMaxListingBytes;
    bool truncated = false;
    auto jobs = service_->ListJobs(filter, &truncated);
    if (!jobs.ok()) return Error(jobs.status());
    json list = json::array();
    size_t bytes = 0;
    for (const Job& job : *jobs) {
      json item = JobJson(job, service_->WaitReason(job.id));
      bytes += item.dump().size();
      if (bytes > kMaxListingBytes && !list.empty()) {
        truncated = true;
        break;
      }
      list.push_back(std::move(item));
    }
    json out = {{"jobs", std::move(list)}};
    if (truncated) out["truncated"] = true;
    return Json(200, out);
  }

  HttpResponse GetJob(const HttpRequest& req, const PathParams& params) {
    StatusOr<int64_t> id = JobId(params);
    if (!id.ok()) return Error(id.status());
    auto job = Visible(req.caller, *id);
    if (!job.ok()) return Error(job.status());
    return Json(200, JobJson(*job, service_->WaitReason(*id)));
  }

  HttpResponse Cancel(const HttpRequest& req, const PathParams& params) {
    StatusOr<int64_t> id = JobId(params);
    if (!id.ok()) return Error(id.status());
    auto visible = Visible(req.caller, *id);
    if (!visible.ok()) return Error(visible.status());
    auto job = service_->Cancel(*id);
    if (!job.ok()) return Error(job.status());
    return Json(200, JobJson(*job, ""));
  }

  static std::string ReadFrom(const std::string& path, uint64_t offset) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "";
    in.seekg(static_cast<std::streamoff>(offset));
    if (!in) return "";
    std::string data(kMaxOutputChunk, '\0');
    in.read(data.data(), static_cast<std::streamsize>(data.size()));
    data.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
    return data;
  }

  static StatusOr<uint64_t> Offset(const HttpRequest& req, const char* key) {
    if (!req.query.count(key)) return uint64_t{0};
    const std::string& v = req.query.at(key);
    if (v.empty() || v.size() > 15 || !std::all_of(v.begin(), v.end(), ::isdigit)) {
      return InvalidArgumentError(std::string(key) + " must be a byte offset (a whole number)");
    }
    return static_cast<uint64_t>(std::stoull(v));
  }

  HttpResponse Output(const HttpRequest& req, const PathParams& params) {
    StatusOr<int64_t> job_id = JobId(params);
    if (!job_id.ok()) return Error(job_id.status());
    const int64_t id = *job_id;
    auto job = Visible(req.caller, id);
    if (!job.ok()) return Error(job.status());
    auto out_offset = Offset(req, "stdout");
    auto err_offset = Offset(req, "stderr");
    auto wait = Offset(req, "wait");
    for (const Status* st : {&out_offset.status(), &err_offset.status(), &wait.status()}) {
      if (!st->ok()) return Error(*st);
    }
    std::string dir = service_->JobDir(id);
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::seconds(std::min<uint64_t>(*wait, kMaxWaitSeconds));
    std::string out, err;
    JobState state = job->state;
    while (true) {
      // The state is read before the files, so that output written before the job ended is
      // never missed by a client that stops at the final state.
      auto now_job = service_->GetJob(id);
      if (now_job.ok()) state = now_job->state;
      out = ReadFrom(dir + "/" + JobRunner::kStdout, *out_offset);
      err = ReadFrom(dir + "/" + JobRunner::kStderr, *err_offset);
      if (!out.empty() || !err.empty() || IsFinal(state) ||
          std::chrono::steady_clock::now() >= deadline) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    HttpResponse r;
    r.content_type = "application/octet-stream";
    r.headers = {{"X-Gpufrac-Stdout-Bytes", std::to_string(out.size())},
                 {"X-Gpufrac-Stderr-Bytes", std::to_string(err.size())},
                 {"X-Gpufrac-State", std::string(JobStateName(state))}};
    r.body = out + err;
    return r;
  }

  HttpResponse StatusView(const HttpRequest&, const PathParams&) {
    json gpus = json::array();
    for (const GpuStatus& g : service_->Gpus()) {
      json workloads = json::array();
      for (const WorkloadStatus& w : g.workloads) {
        workloads.push_back(
            {{"job", w.job},
             {"user", w.user},
             {"share", w.milli / 1000.0},
             {"compute_limit", w.compute ? json(w.compute->limit_milli / 1000.0) : json(nullptr)},
             {"memory_limit", w.memory_limit},
             {"memory_used", w.memory_used},
             {"gpu_seconds", OrNull(w.gpu_seconds)},
             {"charged_seconds", OrNull(w.charged_seconds)},
             {"measured_share", OrNull(w.measured_share)},
             {"over_share", w.over_share == ComputeGuard::Over::kNo
                                ? json(nullptr)
                                : json(OverName(w.over_share))},
             {"compute_held", w.held}});
        // Under MPS, its share of the SMs (its compute limit) and its pinned-memory limit.
        if (w.mps_thread_percentage) {
          workloads.back()["mps_thread_percentage"] = *w.mps_thread_percentage;
          workloads.back()["mps_pinned_memory"] = w.memory_limit;
        }
      }
      json entry = {
          {"index", g.gpu.index},
          {"mode", gpu::GpuModeName(g.gpu.mode)},
          {"uuid", g.gpu.uuid},
          {"model", g.gpu.model},
          {"memory_total", g.gpu.memory_bytes},
          {"allocated_share", g.allocated_milli / 1000.0},
          {"free_share", (kMilliPerGpu - std::min(g.allocated_milli, kMilliPerGpu)) / 1000.0},
          {"allocated_memory", g.allocated_memory},
          {"used_memory", g.used_memory},
          {"workloads", workloads}};
      entry["reserved_for"] = OrNull(g.reserved_for);
      entry["compute_in_use"] = OrNull(g.compute_in_use);
      gpus.push_back(entry);
    }
    json mig = json::array();
    for (const MigScheduler::SliceView& v : service_->MigSlices()) {
      json instances = json::array();
      for (const MigScheduler::SliceView::Item& i : v.instances) {
        instances.push_back({{"gpu", v.gpu},
                             {"profile", i.profile},
                             {"start", i.placement.start},
                             {"size", i.placement.size},
                             {"uuid", i.uuid},
                             {"job", i.job > 0 ? json(i.job) : json(nullptr)},
                             {"in_use", i.in_use},
                             {"pids", i.pids}});
      }
      mig.push_back({{"gpu", v.gpu},
                     {"model", v.model},
                     {"memory_slices", v.memory_slices},
                     {"instances", instances}});
    }
    return Json(200, {{"gpus", gpus}, {"mig", mig}, {"simulated", service_->simulated()}});
  }

  StatusOr<json> AdminBody(const HttpRequest& req) {
    if (!IsAdmin(req.caller)) {
      return PermissionDeniedError(
          "only root and members of the admin group may change GPU modes and MIG");
    }
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return InvalidArgumentError("the request body must be a JSON object");
    }
    return body;
  }

  // The GPU and the switch of POST /v1/gpus/N/{mig,mps} {"enabled": bool} (admins only).
  struct ModeChange {
    int gpu = 0;
    bool enabled = false;
  };
  StatusOr<ModeChange> ReadModeChange(const HttpRequest& req, const PathParams& params) {
    const std::string& index = params.at("gpu");
    if (index.size() > 3 || !std::all_of(index.begin(), index.end(), ::isdigit)) {
      return NotFoundError("no such API path: POST " + req.path);
    }
    GPUFRAC_ASSIGN_OR_RETURN(json body, AdminBody(req));
    if (!body.contains("enabled") || !body["enabled"].is_boolean() || body.size() != 1) {
      return InvalidArgumentError("the body must be {\"enabled\": true|false}");
    }
    return ModeChange{std::stoi(index), body["enabled"].get<bool>()};
  }

  // POST /v1/gpus/N/mig {"enabled": bool}
  HttpResponse MigMode(const HttpRequest& req, const PathParams& params) {
    auto change = ReadModeChange(req, params);
    if (!change.ok()) return Error(change.status());
    auto reset = service_->SetMigMode(change->gpu, change->enabled);
    if (!reset.ok()) return Error(reset.status());
    return Json(200,
                {{"gpu", change->gpu}, {"mig_enabled", change->enabled}, {"reset_needed", *reset}});
  }

  // POST /v1/gpus/N/mps {"enabled": bool}
  HttpResponse MpsMode(const HttpRequest& req, const PathParams& params) {
    auto change = ReadModeChange(req, params);
    if (!change.ok()) return Error(change.status());
    auto changed = service_->SetMpsMode(change->gpu, change->enabled);
    if (!changed.ok()) return Error(changed.status());
    return Json(200,
                {{"gpu", change->gpu}, {"mps_enabled", change->enabled}, {"changed", *changed}});
  }

  // POST /v1/mig/apply {"yaml": "...", "config": "name"}
  HttpResponse MigApply(const HttpRequest& req, const PathParams&) {
    auto body = AdminBody(req);
    if (!body.ok()) return Error(body.status());
    auto yaml = OptionalString(*body, "yaml");
    auto config = OptionalString(*body, "config");
    if (!yaml.ok()) return Error(yaml.status());
    if (!config.ok()) return Error(config.status());
    if (yaml->empty()) {
      return Error(InvalidArgumentError("the body needs \"yaml\": the mig-parted file"));
    }
    auto applied = service_->ApplyMigParted(*yaml, *config);
    if (!applied.ok()) return Error(applied.status());
    return Json(200, {{"applied", *applied}});
  }

  HttpResponse MigExport(const HttpRequest& req, const PathParams&) {
    std::string name = req.query.count("name") ? req.query.at("name") : "current";
    if (name.empty() || name.size() > 63) {
      return Error(InvalidArgumentError("name must be 1 to 63 characters"));
    }
    auto text = service_->ExportMigParted(name);
    if (!text.ok()) return Error(text.status());
    HttpResponse r;
    r.content_type = "application/yaml";
    r.body = *text;
    return r;
  }

  HttpResponse QueuesView(const HttpRequest&, const PathParams&) {
    json queues = json::array();
    const QueueConfig& config = service_->queue_config();
    int priority = 0;
    for (const QueueScheduler::QueueView& q : service_->Queues()) {
      const QueueSpec* spec = nullptr;
      for (const QueueSpec& s : config.queues) {
        if (s.name == q.name) spec = &s;
      }
      queues.push_back({{"name", q.name},
                        {"priority", priority++},
                        {"default", spec ? FormatGpuRequest(spec->default_request) : ""},
                        {"quota", spec ? spec->quota : 1.0},
                        {"quota_share", q.quota_milli / 1000.0},
                        {"share_in_use", q.milli_in_use / 1000.0},
                        {"pending", q.pending},
                        {"running", q.running}});
    }
    return Json(200, {{"queues", queues}});
  }

  Service* service_;
  ApiOptions options_;
};

}  // namespace

// api.h's list is checked against this table (ApiRoutes).
std::span<const Api::Route> Api::Routes() {
  static const Route kRoutes[] = {
      {"GET", "/v1/health", &Api::Health},
      {"POST", "/v1/jobs", &Api::Submit},
      {"GET", "/v1/jobs", &Api::List},
      {"GET", "/v1/jobs/{id}", &Api::GetJob},
      {"POST", "/v1/jobs/{id}/cancel", &Api::Cancel},
      {"GET", "/v1/jobs/{id}/output", &Api::Output},
      {"GET", "/v1/status", &Api::StatusView},
      {"POST", "/v1/gpus/{gpu}/mig", &Api::MigMode},
      {"POST", "/v1/gpus/{gpu}/mps", &Api::MpsMode},
      {"POST", "/v1/mig/apply", &Api::MigApply},
      {"GET", "/v1/mig/export", &Api::MigExport},
      {"GET", "/v1/queues", &Api::QueuesView},
      {"GET", "/metrics", &Api::Metrics},
  };
  return kRoutes;
}

std::vector<std::string> ApiRoutes() {
  std::vector<std::string> out;
  for (const Api::Route& route : Api::Routes()) {
    out.push_back(std::string(route.method) + " " + std::string(route.pattern));
  }
  return out;
}

HttpHandler MakeApiHandler(Service* service, ApiOptions options) {
  auto api = std::make_shared<Api>(service, options);
  return [api](const HttpRequest& req) { return api->Handle(req); };
}

}  // namespace gpufrac::node
