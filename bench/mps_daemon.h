// An MPS control daemon for one benchmark run: started in a pipe and a log directory of its own,
// asked what clients its server has, and quit (killed, with its servers, if it will not go).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "machine/mps_control.h"

namespace gpufrac::bench {

class MpsDaemon {
 public:
  // `control` is the nvidia-cuda-mps-control program; `dir` an existing directory that will hold
  // the pipe and log directories. The simulated machine comes from the environment.
  MpsDaemon(std::string control, const std::string& dir);
  ~MpsDaemon() { Quit(); }
  MpsDaemon(const MpsDaemon&) = delete;
  MpsDaemon& operator=(const MpsDaemon&) = delete;

  // Runs `control -d`; false (with the reason in `error`) if the daemon did not start.
  bool Start(std::string* error);
  // The pipe directory its clients must name in CUDA_MPS_PIPE_DIRECTORY.
  const std::string& pipe_directory() const { return pipe_; }
  // The pids of the clients of its servers (the front end's get_server_list, get_client_list).
  std::vector<pid_t> Clients();
  // Sends quit and waits up to 5 s for the daemon and its servers to exit; kills what is left.
  void Quit();

 private:
  // The front end with `commands` on its standard input (machine/mps_control.h); returns what
  // it printed, "" when it failed.
  std::string Ask(const std::string& commands);
  machine::MpsControlOptions Control() const;

  std::string control_;
  std::string pipe_;
  std::string log_;
  pid_t daemon_ = 0;
};

}  // namespace gpufrac::bench
