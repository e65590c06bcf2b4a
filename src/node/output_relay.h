// The shim's relay of a job's output: the job writes into two pipes and the shim appends what
// arrives to the job's stdout and stderr logs, keeping at most a fixed number of bytes of the two
// together, so that no job can fill the service's disk.
#pragma once

#include <poll.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/posix.h"

namespace gpufrac::node {

// Contract:
//  - Bytes are relayed in the order the job wrote them into each pipe; stdout and stderr stay
//    separate. Until the cap is reached every byte is kept.
//  - Once `max_bytes` have been kept (both logs together), the rest is read and dropped: the job
//    is never blocked, nor sent SIGPIPE, because of the cap. One line on stderr.log, at the start
//    of a line, says the cap was reached, and Finish appends one saying how much was dropped.
//    These lines are not counted against the cap.
//  - Nothing blocks: the pipes are read without blocking and only what is waiting is taken.
// Single-threaded; made in the shim before the job is forked.
class OutputRelay {
 public:
  enum Stream { kStdout = 0, kStderr = 1 };

  OutputRelay() = default;
  ~OutputRelay() = default;  // Closes every descriptor it still holds.
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Takes over the two log files (open for appending; closed with the relay) and makes the
  // pipes. 0, or an errno.
  int Open(int stdout_log, int stderr_log, uint64_t max_bytes);
  // The write end of a pipe, to become the job's fd 1 or 2 (close-on-exec, so dup2 it there).
  int job_end(Stream stream) const { return write_ends_[stream].get(); }
  // Closes the write ends once the job has its copies: the pipes end when the job's copies do.
  void CloseJobEnds();

  // Appends a POLLIN entry for each pipe still open.
  void AddPollFds(std::vector<pollfd>* fds) const;
  // Moves what is waiting in the pipes to the logs. Takes at most about 1 MiB from each pipe, so
  // that a job writing without end cannot keep the caller from its other work.
  void Pump();
  // Once the job has ended: pumps until every pipe is at its end or `limit` has passed (a
  // process that escaped the job may hold a pipe open), closes the pipes, and says on stderr.log
  // how much output was dropped, if any.
  void Finish(std::chrono::milliseconds limit);

 private:
  // Reads one chunk from `stream`'s pipe; false when nothing more is waiting there now.
  bool ReadOnce(Stream stream);
  void Keep(Stream stream, const char* data, size_t size);
  void Note(const char* text);

  std::array<UniqueFd, 2> logs_;
  std::array<UniqueFd, 2> read_ends_;
  std::array<UniqueFd, 2> write_ends_;
  uint64_t max_bytes_ = 0;
  uint64_t kept_ = 0;
  std::array<uint64_t, 2> dropped_{0, 0};
  bool stderr_at_line_start_ = true;  // Where the next note must begin a line of its own.
  std::vector<char> buffer_;
};

}  // namespace gpufrac::node
