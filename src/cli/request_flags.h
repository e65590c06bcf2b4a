// The request grammar's fields as command-line flags (--gpu-memory, --gpu-fraction, ...), read
// from the one table in common/gpu_request.h, for every command that takes a request.
#pragma once

#include <CLI/CLI.hpp>

#include "common/gpu_request.h"

namespace gpufrac::cli {

// Adds a flag for each request field to `cmd`, storing what the user wrote in `text`.
void AddGpuRequestFlags(CLI::App* cmd, GpuRequestText* text);

}  // namespace gpufrac::cli
