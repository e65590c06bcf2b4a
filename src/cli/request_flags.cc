// Request flags from the grammar's field table (see request_flags.h).
#include "cli/request_flags.h"

#include <string>

namespace gpufrac::cli {

void AddGpuRequestFlags(CLI::App* cmd, GpuRequestText* text) {
  for (const GpuRequestField& field : GpuRequestFields()) {
    cmd->add_option("--" + std::string(field.name), text->*field.text, std::string(field.help))
        ->type_name(std::string(field.placeholder));
  }
}

}  // namespace gpufrac::cli
