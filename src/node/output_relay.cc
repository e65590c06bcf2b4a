// The shim's relay of a job's output into its logs, with the cap on what they keep (see
// output_relay.h).
#include "node/output_relay.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "common/units.h"

namespace gpufrac::node {
namespace {

constexpr size_t kChunk = 64 * 1024;
// Reads per pipe in one Pump: 1 MiB.
constexpr int kReadsPerPump = 16;

// Writes all of `data`; a log the disk refuses loses the rest of this piece (the job's output
// would have been lost as much had it written to the file itself).
void WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

int64_t NowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

int OutputRelay::Open(int stdout_log, int stderr_log, uint64_t max_bytes) {
  logs_[kStdout].Reset(stdout_log);
  logs_[kStderr].Reset(stderr_log);
  max_bytes_ = max_bytes;
  buffer_.resize(kChunk);
  for (int stream : {kStdout, kStderr}) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) return errno;
    read_ends_[stream].Reset(ends[0]);
    write_ends_[stream].Reset(ends[1]);
    // Only the shim's end: the job's stays blocking, as a pipe or file it was given would be.
    int flags = fcntl(ends[0], F_GETFL);
    if (flags < 0 || fcntl(ends[0], F_SETFL, flags | O_NONBLOCK) != 0) return errno;
  }
  return 0;
}

void OutputRelay::CloseJobEnds() {
  for (UniqueFd& fd : write_ends_) fd.Reset();
}

void OutputRelay::AddPollFds(std::vector<pollfd>* fds) const {
  for (const UniqueFd& fd : read_ends_) {
    if (fd.valid()) fds->push_back({fd.get(), POLLIN, 0});
  }
}

void OutputRelay::Pump() {
  for (Stream stream : {kStdout, kStderr}) {
    for (int i = 0; i < kReadsPerPump && ReadOnce(stream); ++i) {
    }
  }
}

bool OutputRelay::ReadOnce(Stream stream) {
  UniqueFd& fd = read_ends_[stream];
  if (!fd.valid()) return false;
  ssize_t n = read(fd.get(), buffer_.data(), buffer_.size());
  if (n < 0 && errno == EINTR) return true;
  if (n < 0 && errno == EAGAIN) return false;
  if (n <= 0) {  // Every writer has closed it (or it broke): nothing more will come.
    fd.Reset();
    return false;
  }
  Keep(stream, buffer_.data(), static_cast<size_t>(n));
  return true;
}

void OutputRelay::Keep(Stream stream, const char* data, size_t size) {
  const uint64_t room = max_bytes_ - kept_;
  const size_t keep = size < room ? size : static_cast<size_t>(room);
  if (keep > 0) {
    WriteAll(logs_[stream].get(), data, keep);
    kept_ += keep;
    if (stream == kStderr) stderr_at_line_start_ = data[keep - 1] == '\n';
  }
  if (keep == size) return;
  if (dropped_[kStdout] + dropped_[kStderr] == 0) {
    Note(("this job's output passed " + FormatSize(max_bytes_) +
          "; the rest is dropped (gpufracd --max-log-bytes)")
             .c_str());
  }
  dropped_[stream] += size - keep;
}

void OutputRelay::Note(const char* text) {
  std::string line = stderr_at_line_start_ ? "" : "\n";
  line += std::string("[gpufrac: ") + text + "]\n";
  WriteAll(logs_[kStderr].get(), line.data(), line.size());
  stderr_at_line_start_ = true;
}

void OutputRelay::Finish(std::chrono::milliseconds limit) {
  const int64_t deadline = NowMs() + limit.count();
  for (;;) {
    std::vector<pollfd> fds;
    AddPollFds(&fds);
    const int64_t left = deadline - NowMs();
    if (fds.empty() || left <= 0) break;
    if (poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    Pump();
  }
  for (UniqueFd& fd : read_ends_) fd.Reset();
  std::string what;
  for (Stream stream : {kStdout, kStderr}) {
    if (dropped_[stream] == 0) continue;
    if (!what.empty()) what += " and ";
    what +=
        std::to_string(dropped_[stream]) + " bytes of " + (stream == kStdout ? "stdout" : "stderr");
  }
  if (!what.empty()) Note(("dropped " + what).c_str());
}

}  // namespace gpufrac::node
