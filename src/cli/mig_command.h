// `gpufrac mig`: MIG mode, mig-parted configurations and their export, through the node service.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace gpufrac::cli {

class MigCommand {
 public:
  explicit MigCommand(CLI::App& app);
  bool parsed() const;
  int Run();

 private:
  std::string socket_;
  int gpu_ = -1;
  std::string file_;
  std::string config_;
  bool json_ = false;
  CLI::App* mig_;
  CLI::App* enable_;
  CLI::App* disable_;
  CLI::App* apply_;
  CLI::App* export_;
};

}  // namespace gpufrac::cli
