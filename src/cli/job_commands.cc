// submit, run, ps, logs, cancel, status and queues: thin clients of the node service's API.
#include "cli/job_commands.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/request_flags.h"
#include "cli/service_client.h"
#include "cli/watch.h"
#include "common/text.h"
#include "common/units.h"
#include "mig/backend.h"
#include "node/job_wire.h"

namespace gpufrac::cli {
namespace {

using nlohmann::json;

int Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "gpufrac %s: %s\n", what.c_str(), Printable(status.message()).c_str());
  return ExitCodeFor(status);
}

void PrintJson(const json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

std::string Str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

int64_t Int(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<int64_t>() : 0;
}

std::optional<double> OptionalNum(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? std::optional(j[key].get<double>()) : std::nullopt;
}

double Num(const json& j, const char* key) { return OptionalNum(j, key).value_or(0); }

// A table cell: `s` made safe to print (another user's job name or command may hold newlines or
// terminal escapes), then cut to `width` bytes without splitting a character.
std::string Cell(const std::string& text, size_t width = std::string::npos) {
  std::string s = Printable(text);
  if (s.size() > width) {
    size_t cut = width - 3;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
    s = s.substr(0, cut) + "...";
  }
  return s;
}

std::string Age(int64_t since_ms) {
  if (since_ms <= 0) return "-";
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  int64_t s = std::max<int64_t>(0, (now - since_ms) / 1000);
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 7200) {
    std::snprintf(buf, sizeof(buf), "%lldm", static_cast<long long>(s / 60));
  } else if (s < 172800) {
    std::snprintf(buf, sizeof(buf), "%lldh", static_cast<long long>(s / 3600));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd", static_cast<long long>(s / 86400));
  }
  return buf;
}

std::string Share(double share) { return FormatMilli(static_cast<uint32_t>(share * 1000 + 0.5)); }

// A share of a GPU's time as "request..limit" ("0.3..0.6": guaranteed 0.3 when others compete,
// at most 0.6); the request alone where the node does not arbitrate it (no limit).
std::string ComputeText(double share, std::optional<double> limit) {
  return limit ? Share(share) + ".." + Share(*limit) : Share(share);
}

// A job's compute on its shared GPUs (alike on each), "-" for whole GPUs, MIG instances and
// jobs not started.
std::string JobComputeText(const std::vector<node::JobWire::Gpu>& gpus) {
  for (const node::JobWire::Gpu& g : gpus) {
    if (g.share < 1 && g.uuid.rfind("MIG-", 0) != 0) return ComputeText(g.share, g.compute_limit);
  }
  return "-";
}

std::string GpusText(const std::vector<node::JobWire::Gpu>& gpus) {
  std::string out;
  for (const node::JobWire::Gpu& g : gpus) {
    out += (out.empty() ? "" : ",") + std::to_string(g.index);
    if (g.share < 1) out += "(" + Share(g.share) + ")";
  }
  return out.empty() ? "-" : out;
}

std::string CommandText(const node::JobWire& job) {
  std::string out;
  for (const std::string& a : job.command) out += (out.empty() ? "" : " ") + a;
  return out;
}

// A job the service sent, or an error saying the answer was not one.
StatusOr<node::JobWire> ReadJob(const StatusOr<json>& answer) {
  if (!answer.ok()) return answer.status();
  StatusOr<node::JobWire> job = node::JobWire::FromJson(*answer);
  if (!job.ok()) return UnavailableError("gpufracd sent no job: " + job.status().message());
  return job;
}

volatile sig_atomic_t g_interrupts = 0;
void OnInterrupt(int) { g_interrupts = g_interrupts + 1; }

void WriteAll(FILE* f, const std::string& data) {
  if (data.empty()) return;
  std::fwrite(data.data(), 1, data.size(), f);
  std::fflush(f);
}

}  // namespace

JobCommands::JobCommands(CLI::App& app) {
  auto socket = [this](CLI::App* cmd) {
    cmd->add_option("--socket", o_.socket,
                    "The service's unix socket (default: $GPUFRAC_SOCKET, the system service, "
                    "else your own, started when needed)");
  };
  auto json_flag = [this](CLI::App* cmd) {
    cmd->add_flag("--json", o_.json, "Print JSON for machines instead of a table");
  };
  auto job_flags = [&](CLI::App* cmd) {
    AddGpuRequestFlags(cmd, &o_.request);
    cmd->add_option("--queue,-q", o_.queue, "Queue (default: the first in the queue file)");
    cmd->add_option("--name", o_.name, "A label for the job");
    cmd->add_option("command", o_.command, "The command and its arguments, after --")->required();
    socket(cmd);
  };
  submit_ = app.add_subcommand("submit", "Queue a command on the node's GPUs and return");
  job_flags(submit_);
  json_flag(submit_);
  submit_->footer("Example: gpufrac submit --gpu-memory 4G -- python train.py");
  run_ = app.add_subcommand(
      "run", "Queue a command, stream its output and exit with its status (Ctrl-C cancels it)");
  job_flags(run_);
  run_->footer("Example: gpufrac run --gpu-fraction 0.25 -- python infer.py");

  ps_ = app.add_subcommand("ps", "List your jobs (newest first)");
  ps_->add_flag("--all,-a", o_.all, "Every user's jobs (root and the admin group)");
  ps_->add_flag("--active", o_.active, "Only pending and running jobs");
  ps_->add_option("-n,--limit", o_.limit, "At most this many (default 50)")
      ->check(CLI::Range(1, 10000));
  json_flag(ps_);
  socket(ps_);
  watch_flags_.push_back(AddWatchFlag(ps_, &o_.watch));

  logs_ = app.add_subcommand("logs", "Print a job's output (stdout and stderr)");
  logs_->add_option("id", o_.ids, "Job id")->required()->expected(1);
  logs_->add_flag("-f,--follow", o_.follow, "Keep printing until the job ends");
  socket(logs_);

  cancel_ = app.add_subcommand("cancel", "Cancel jobs (SIGTERM, then SIGKILL after a grace)");
  cancel_->add_option("ids", o_.ids, "Job ids")->required();
  json_flag(cancel_);
  socket(cancel_);

  status_ = app.add_subcommand("status", "The node's GPUs: allocations, use, free share");
  json_flag(status_);
  socket(status_);
  watch_flags_.push_back(AddWatchFlag(status_, &o_.watch));
  status_->footer("Example: gpufrac status --watch 5");
  queues_ = app.add_subcommand("queues", "The queues: priority, default request, quota, jobs");
  json_flag(queues_);
  socket(queues_);
  watch_flags_.push_back(AddWatchFlag(queues_, &o_.watch));
}

bool JobCommands::parsed() const {
  for (const CLI::App* c : {submit_, run_, ps_, logs_, cancel_, status_, queues_}) {
    if (c->parsed()) return true;
  }
  return false;
}

namespace {

StatusOr<json> Submit(ServiceClient& client, const JobCommandOptions& o) {
  json body = {{"command", o.command}};
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof(cwd))) return UnavailableError("cannot read the current directory");
  body["cwd"] = cwd;
  json env = json::array();
  for (char** e = environ; *e; ++e) env.push_back(*e);
  body["env"] = env;
  if (!o.queue.empty()) body["queue"] = o.queue;
  if (!o.name.empty()) body["name"] = o.name;
  const GpuRequestText& r = o.request;
  // Without request flags the job gets its queue's default; Run checked them before sending.
  if (!r.empty()) {
    json request = json::object();
    for (const GpuRequestField& field : GpuRequestFields()) {
      if (!(r.*field.text).empty()) request[std::string(field.name)] = r.*field.text;
    }
    body["request"] = request;
  }
  return client.Post("/v1/jobs", body);
}

Status PrintJobs(FILE* out, const json& jobs) {
  if (!jobs.is_array()) return UnavailableError("gpufracd sent no job list");
  std::fprintf(out, "%-6s %-10s %-12s %-10s %-28s %-12s %-10s %5s  %-30s %s\n", "ID", "USER",
               "QUEUE", "STATE", "REQUEST", "GPUS", "COMPUTE", "AGE", "COMMAND", "NOTE");
  for (const json& item : jobs) {
    GPUFRAC_ASSIGN_OR_RETURN(node::JobWire j, ReadJob(item));
    std::fprintf(out, "%-6lld %-10s %-12s %-10s %-28s %-12s %-10s %5s  %-30s %s\n",
                 static_cast<long long>(j.id), Cell(j.user, 10).c_str(), Cell(j.queue, 12).c_str(),
                 std::string(node::JobStateName(j.state)).c_str(), Cell(j.request, 28).c_str(),
                 GpusText(j.gpus).c_str(), JobComputeText(j.gpus).c_str(),
                 Age(j.submitted_ms).c_str(), Cell(CommandText(j), 30).c_str(),
                 Cell(j.Note()).c_str());
  }
  return OkStatus();
}

// One workload line of `status`: its share, memory, what it got of the GPU's time lately, and
// whether it is over its share or held for it.
void PrintWorkload(FILE* out, const json& w) {
  // Under MPS a job's compute is its share of the SMs.
  const std::string compute =
      w.contains("mps_thread_percentage")
          ? "sm " + std::to_string(Int(w, "mps_thread_percentage")) + "%"
          : "compute " + ComputeText(Num(w, "share"), OptionalNum(w, "compute_limit"));
  // And what it got of the GPU's time lately, as measured (measured_share).
  std::string used = FormatSize(Int(w, "memory_used"));
  if (std::optional<double> got = OptionalNum(w, "measured_share")) {
    used.resize(std::max<size_t>(used.size(), 10), ' ');
    used += " got " + Share(*got);
  }
  // Over its share, as the service judged what the driver measured; and held for it.
  if (w.contains("over_share") && w["over_share"].is_string()) {
    used += " OVER its " + Str(w, "over_share");
  }
  if (std::optional<double> held = OptionalNum(w, "compute_held"); held && *held > 0) {
    used += " held " + std::to_string(static_cast<int>(*held * 100 + 0.5)) + "%";
  }
  std::fprintf(out, "     job %-6lld %-10s %-18s memory %-10s used %s\n",
               static_cast<long long>(Int(w, "job")), Cell(Str(w, "user"), 10).c_str(),
               compute.c_str(), FormatSize(Int(w, "memory_limit")).c_str(), used.c_str());
}

void PrintStatus(FILE* out, const json& status) {
  // A GPU's share is of its time: allocated_share is the sum of its jobs' compute requests.
  std::fprintf(out, "%-4s %-18s %-40s %10s %10s %10s %13s %12s\n", "GPU", "MODEL", "UUID", "MEMORY",
               "MEM-ALLOC", "MEM-USED", "COMPUTE-ALLOC", "COMPUTE-FREE");
  for (const json& g : status["gpus"]) {
    std::string model = Str(g, "model").empty() ? "?" : Cell(Str(g, "model"));
    if (Str(g, "mode") == "whole") model += " (whole)";
    if (Str(g, "mode") == "mps") model += " (mps)";
    std::fprintf(out, "%-4lld %-18s %-40s %10s %10s %10s %13s %12s\n",
                 static_cast<long long>(Int(g, "index")), model.c_str(),
                 Cell(Str(g, "uuid"), 40).c_str(), FormatSize(Int(g, "memory_total")).c_str(),
                 FormatSize(Int(g, "allocated_memory")).c_str(),
                 FormatSize(Int(g, "used_memory")).c_str(),
                 Share(Num(g, "allocated_share")).c_str(), Share(Num(g, "free_share")).c_str());
    for (const json& w : g["workloads"]) PrintWorkload(out, w);
    if (g.contains("reserved_for") && g["reserved_for"].is_number()) {
      std::fprintf(out, "     reserved for pending job %lld\n",
                   static_cast<long long>(g["reserved_for"].get<int64_t>()));
    }
  }
  if (status.contains("mig") && status["mig"].is_array()) {
    for (const json& g : status["mig"]) {
      int slices = static_cast<int>(Int(g, "memory_slices"));
      // One character per memory slice: the instance's letter (upper case when it serves a job
      // or holds a process gpufrac did not start, lower case when idle) or '.' for a free slice.
      std::string map(static_cast<size_t>(std::max(slices, 0)), '.');
      std::string lines;
      char letter = 'a';
      for (const json& i : g["instances"]) {
        bool busy = i.contains("job") && i["job"].is_number();
        bool foreign = i.value("in_use", false);
        std::vector<unsigned> pids;
        if (i.contains("pids") && i["pids"].is_array()) {
          for (const json& p : i["pids"]) {
            if (p.is_number_unsigned()) pids.push_back(p.get<unsigned>());
          }
        }
        std::string use = busy      ? "job " + std::to_string(Int(i, "job"))
                          : foreign ? mig::ForeignUseText(pids)
                                    : std::string("idle");
        char c = busy || foreign ? static_cast<char>(letter - 'a' + 'A') : letter;
        for (int s = 0; s < Int(i, "size"); ++s) {
          size_t at = static_cast<size_t>(Int(i, "start") + s);
          if (at < map.size()) map[at] = c;
        }
        char line[256];
        std::snprintf(line, sizeof(line), "     %c %-10s slices %lld-%lld  %s  %s\n", c,
                      Cell(Str(i, "profile")).c_str(), static_cast<long long>(Int(i, "start")),
                      static_cast<long long>(Int(i, "start") + Int(i, "size") - 1),
                      Cell(Str(i, "uuid")).c_str(), Cell(use).c_str());
        lines += line;
        letter = letter == 'z' ? 'a' : static_cast<char>(letter + 1);
      }
      std::fprintf(out, "%-4lld %-12s MIG [%s]\n%s", static_cast<long long>(Int(g, "gpu")),
                   Cell(Str(g, "model")).c_str(), map.c_str(), lines.c_str());
    }
  }
  if (status.value("simulated", false)) std::fprintf(out, "(simulated GPUs)\n");
}

void PrintQueues(FILE* out, const json& queues) {
  std::fprintf(out, "%-16s %8s %-28s %6s %8s %8s %8s\n", "QUEUE", "PRIORITY", "DEFAULT", "QUOTA",
               "IN-USE", "PENDING", "RUNNING");
  for (const json& q : queues["queues"]) {
    std::fprintf(out, "%-16s %8lld %-28s %6s %8s %8lld %8lld\n", Cell(Str(q, "name"), 16).c_str(),
                 static_cast<long long>(Int(q, "priority")), Cell(Str(q, "default"), 28).c_str(),
                 Share(Num(q, "quota")).c_str(), Share(Num(q, "share_in_use")).c_str(),
                 static_cast<long long>(Int(q, "pending")),
                 static_cast<long long>(Int(q, "running")));
  }
}

// Prints output from the offsets on; with `follow`, until the job has ended and all is printed.
// Ctrl-C during `run` cancels the job (once) and keeps printing until it ends.
StatusOr<node::JobWire> Stream(ServiceClient& client, int64_t id, bool follow,
                               bool cancel_on_interrupt) {
  uint64_t out = 0, err = 0;
  bool cancelled = false;
  int reconnects = 0;
  constexpr int kMaxReconnects = 150;  // 30 s
  while (true) {
    if (cancel_on_interrupt && g_interrupts > 0 && !cancelled) {
      cancelled = true;
      std::fprintf(stderr, "gpufrac: cancelling job %lld (Ctrl-C again to stop waiting)\n",
                   static_cast<long long>(id));
      auto c = client.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
      if (!c.ok() && c.status().code() != StatusCode::kFailedPrecondition) return c.status();
    }
    if (cancel_on_interrupt && g_interrupts > 1) {
      return UnavailableError("stopped waiting; job " + std::to_string(id) + " is being cancelled");
    }
    auto chunk = client.ReadOutput(id, out, err, follow ? 1 : 0);
    if (!chunk.ok() && chunk.status().code() == StatusCode::kUnavailable && follow &&
        ++reconnects <= kMaxReconnects) {
      // The service restarts (and re-adopts the job): keep following.
      if (reconnects == 1) std::fprintf(stderr, "gpufrac: lost gpufracd; reconnecting...\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    if (!chunk.ok()) return chunk.status();
    reconnects = 0;
    WriteAll(stdout, chunk->out);
    WriteAll(stderr, chunk->err);
    out += chunk->out.size();
    err += chunk->err.size();
    bool drained = chunk->out.empty() && chunk->err.empty();
    std::optional<node::JobState> state = node::ParseJobState(chunk->state);
    if (drained && (!follow || (state && node::IsFinal(*state)))) break;
  }
  return ReadJob(client.Get("/v1/jobs/" + std::to_string(id)));
}

// What ps, status or queues (`what`) shows now: the table, or with --json the API's JSON (on
// one line when `one_line_json`, as a watch prints one document per round).
StatusOr<std::string> Listing(ServiceClient& client, const JobCommandOptions& o,
                              std::string_view what, bool one_line_json) {
  std::string path = what == "status" ? "/v1/status" : what == "queues" ? "/v1/queues" : "";
  if (what == "ps") {
    path = "/v1/jobs?limit=" + std::to_string(o.limit);
    if (o.all) path += "&all=1";
    if (o.active) path += "&active=1";
  }
  StatusOr<json> view = client.Get(path);
  if (!view.ok()) return view.status();
  if (o.json) {
    return view->dump(one_line_json ? -1 : 2, ' ', false, json::error_handler_t::replace) + "\n";
  }
  char* buffer = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buffer, &size);
  if (out == nullptr) return UnavailableError("out of memory");
  Status printed = OkStatus();
  if (what == "ps") {
    printed = PrintJobs(out, (*view)["jobs"]);
  } else if (what == "status") {
    PrintStatus(out, *view);
  } else {
    PrintQueues(out, *view);
  }
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  if (!printed.ok()) return printed;
  return text;
}

// `gpufrac submit`: queues the job and says where.
int SubmitJob(ServiceClient& c, const JobCommandOptions& o, const char* what) {
  auto answer = Submit(c, o);
  auto job = ReadJob(answer);
  if (!job.ok()) return Fail(what, job.status());
  if (o.json) {
    PrintJson(*answer);
  } else {
    std::printf("submitted job %lld to queue %s (%s)\n", static_cast<long long>(job->id),
                Cell(job->queue).c_str(), Cell(job->request).c_str());
  }
  return 0;
}

// `gpufrac run`: queues the job, streams its output until it ends (an interrupt cancels it), and
// exits as it did.
int RunJob(ServiceClient& c, const JobCommandOptions& o, const char* what) {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  auto job = ReadJob(Submit(c, o));
  if (!job.ok()) return Fail(what, job.status());
  int64_t id = job->id;
  if (job->state == node::JobState::kPending) {
    std::fprintf(stderr, "gpufrac: job %lld queued in %s (%s)\n", static_cast<long long>(id),
                 Cell(job->queue).c_str(), Cell(job->request).c_str());
  }
  auto final_job = Stream(c, id, /*follow=*/true, /*cancel_on_interrupt=*/true);
  if (!final_job.ok()) {
    int rc = Fail(what, final_job.status());
    return g_interrupts > 1 ? 130 : rc;
  }
  const node::JobState state = final_job->state;
  const std::string note = Cell(final_job->Note());
  if (state != node::JobState::kSucceeded) {
    std::fprintf(stderr, "gpufrac: job %lld %s%s\n", static_cast<long long>(id),
                 std::string(node::JobStateName(state)).c_str(),
                 note.empty() ? "" : (": " + note).c_str());
  }
  if (state == node::JobState::kCancelled && g_interrupts > 0) return 130;
  return final_job->ExitStatus();
}

// `gpufrac ps`, `status` and `queues`: the listing once, or redrawn every `interval` seconds
// when `watching`.
int ShowListing(ServiceClient& c, const JobCommandOptions& o, const char* what, bool watching,
                const StatusOr<double>& interval) {
  if (watching) {
    return Watch(*interval, std::string("gpufrac ") + what, o.json, [&] {
      // A failed round is shown and the watch goes on (the service may be restarting).
      StatusOr<std::string> text = Listing(c, o, what, /*one_line_json=*/true);
      return text.ok() ? *text
                       : "gpufrac " + std::string(what) + ": " +
                             Printable(text.status().message()) + "\n";
    });
  }
  StatusOr<std::string> text = Listing(c, o, what, /*one_line_json=*/false);
  if (!text.ok()) return Fail(what, text.status());
  WriteAll(stdout, *text);
  return 0;
}

// `gpufrac cancel`: every job named, each said apart; the worst exit code of them.
int CancelJobs(ServiceClient& c, const JobCommandOptions& o, const char* what) {
  int rc = 0;
  json results = json::array();
  for (int64_t id : o.ids) {
    auto answer = c.Post("/v1/jobs/" + std::to_string(id) + "/cancel", json::object());
    auto job = ReadJob(answer);
    if (!job.ok()) {
      rc = std::max(rc, Fail(what, job.status()));
      continue;
    }
    results.push_back(*answer);
    if (!o.json) {
      std::printf(
          "job %lld: %s\n", static_cast<long long>(id),
          job->state == node::JobState::kCancelled ? "cancelled" : "cancelling (SIGTERM sent)");
    }
  }
  if (o.json) PrintJson(json{{"jobs", results}});
  return rc;
}

}  // namespace

int JobCommands::Run() {
  const char* what = submit_->parsed()   ? "submit"
                     : run_->parsed()    ? "run"
                     : ps_->parsed()     ? "ps"
                     : logs_->parsed()   ? "logs"
                     : cancel_->parsed() ? "cancel"
                     : status_->parsed() ? "status"
                                         : "queues";
  if (submit_->parsed() || run_->parsed()) {
    // A typo is reported before a service is looked for (or started).
    StatusOr<GpuRequest> check = ParseGpuRequest(o_.request);
    if (!o_.request.empty() && !check.ok()) return Fail(what, check.status());
  }
  const bool watching = std::any_of(watch_flags_.begin(), watch_flags_.end(),
                                    [](const CLI::Option* flag) { return flag->count() > 0; });
  StatusOr<double> interval = WatchInterval(o_.watch);
  if (watching && !interval.ok()) return Fail(what, interval.status());
  // A service that hangs up mid-request is an error to report, not a reason to die.
  signal(SIGPIPE, SIG_IGN);
  auto client = ServiceClient::Connect(o_.socket);
  if (!client.ok()) return Fail(what, client.status());
  ServiceClient& c = **client;

  if (submit_->parsed()) return SubmitJob(c, o_, what);
  if (run_->parsed()) return RunJob(c, o_, what);
  if (ps_->parsed() || status_->parsed() || queues_->parsed()) {
    return ShowListing(c, o_, what, watching, interval);
  }
  if (logs_->parsed()) {
    auto job = Stream(c, o_.ids[0], o_.follow, /*cancel_on_interrupt=*/false);
    if (!job.ok()) return Fail(what, job.status());
    return 0;
  }
  if (cancel_->parsed()) return CancelJobs(c, o_, what);
  return 0;
}

}  // namespace gpufrac::cli
