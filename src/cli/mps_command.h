// `gpufrac mps enable|disable --gpu N`: puts an idle GPU in MPS mode (its shares run side by side
// under NVIDIA's Multi-Process Service) or back to shared, through the node service.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace gpufrac::cli {

class MpsCommand {
 public:
  explicit MpsCommand(CLI::App& app);
  bool parsed() const;
  int Run();

 private:
  std::string socket_;
  int gpu_ = -1;
  bool json_ = false;
  CLI::App* mps_;
  CLI::App* enable_;
  CLI::App* disable_;
};

}  // namespace gpufrac::cli
