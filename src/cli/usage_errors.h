// What a command-line parse error tells the user: the command it happened in, a word the CLI
// does not know as a command (with the commands it does know), and which --help to read.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace gpufrac::cli {

// One line for `error`, thrown by root.parse(args) (args without the program name):
//   gpufrac: 'bogus' is not a gpufrac command; commands: exec, sim, ... (see gpufrac --help)
//   gpufrac mig: a command is needed: mode, apply, export (see gpufrac mig --help)
//   gpufrac logs: id is required (see gpufrac logs --help)
// Words shown come from the user's own arguments and are made printable first.
std::string ExplainParseError(const CLI::App& root, const CLI::ParseError& error,
                              const std::vector<std::string>& args);

}  // namespace gpufrac::cli
