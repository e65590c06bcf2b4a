// `--watch [SECONDS]`: a view redrawn every interval until Ctrl-C, as `watch` and `nvidia-smi -l`
// do. On a terminal each round replaces the last (one write per round, so it does not flicker);
// elsewhere (a pipe, a file) rounds follow each other, each under its time line.
#pragma once

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "common/status.h"

namespace gpufrac::cli {

// Adds `--watch [SECONDS]` to `command`; `seconds` receives the text given ("" without one).
CLI::Option* AddWatchFlag(CLI::App* command, std::string* seconds);

// The interval a --watch value asks for: 2 s when empty; kInvalidArgument, one line, for
// anything but a number of seconds from 0.1 to 86400.
StatusOr<double> WatchInterval(const std::string& seconds);

// One round's text (a table, or an error line: the watch goes on through a service restart).
using WatchFrame = std::function<std::string()>;

// Shows frame() every `seconds` until SIGINT or SIGTERM, then returns 0. `title` heads each
// round on a terminal ("Every 2s: gpufrac status"); with `plain` (--json) rounds are printed
// one after the other with no title or screen control, whatever stdout is.
int Watch(double seconds, const std::string& title, bool plain, const WatchFrame& frame);

}  // namespace gpufrac::cli
