// The redraw loop behind --watch.
#include "cli/watch.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <thread>

namespace gpufrac::cli {
namespace {

std::atomic<bool> g_stop{false};

void OnStop(int) { g_stop = true; }

std::string Now() {
  std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

void WriteAll(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

CLI::Option* AddWatchFlag(CLI::App* command, std::string* seconds) {
  return command
      ->add_option("--watch,-w", *seconds,
                   "Redraw every SECONDS (default 2) until Ctrl-C, like watch or nvidia-smi -l")
      ->expected(0, 1)
      ->type_name("[SECONDS]");
}

StatusOr<double> WatchInterval(const std::string& seconds) {
  if (seconds.empty()) return 2.0;
  char* end = nullptr;
  double value = std::strtod(seconds.c_str(), &end);
  if (end == seconds.c_str() || *end != '\0' || !std::isfinite(value) || value < 0.1 ||
      value > 86400) {
    return InvalidArgumentError("--watch is \"" + seconds +
                                "\"; give the seconds between redraws, from 0.1 to 86400 "
                                "(e.g. --watch 5)");
  }
  return value;
}

int Watch(double seconds, const std::string& title, bool plain, const WatchFrame& frame) {
  struct sigaction sa {};
  sa.sa_handler = OnStop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool terminal = !plain && isatty(STDOUT_FILENO) == 1;
  char interval[32];
  std::snprintf(interval, sizeof(interval), "%g", seconds);
  const auto period = std::chrono::duration<double>(seconds);
  while (!g_stop) {
    const auto round_start = std::chrono::steady_clock::now();
    std::string body = frame();
    std::string head = "Every " + std::string(interval) + "s: " + title + "    " + Now() + "\n\n";
    if (terminal) {
      // Cursor home and clear the screen, then the round, in one write.
      WriteAll("\033[H\033[2J" + head + body);
    } else if (plain) {
      WriteAll(body);
    } else {
      WriteAll(head + body + "\n");
    }
    while (!g_stop && std::chrono::steady_clock::now() - round_start < period) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (terminal) WriteAll("\n");
  return 0;
}

}  // namespace gpufrac::cli
