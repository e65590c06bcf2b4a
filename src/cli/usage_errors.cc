// Parse errors as one line that names the command, the unknown word and the help to read.
#include "cli/usage_errors.h"

#include "common/text.h"

namespace gpufrac::cli {
namespace {

// "gpufrac mig apply" for the `apply` subcommand of `mig`.
std::string PathOf(const CLI::App* app) {
  std::string path;
  for (; app != nullptr && app->get_parent() != nullptr; app = app->get_parent()) {
    path = " " + app->get_name() + path;
  }
  return "gpufrac" + path;
}

// The commands a user may type at `app`, as its help lists them.
std::string CommandList(const CLI::App* app) {
  std::string list;
  for (const CLI::App* sub : app->get_subcommands(
           [](const CLI::App* s) { return !s->get_name().empty() && !s->get_group().empty(); })) {
    list += (list.empty() ? "" : ", ") + sub->get_name();
  }
  return list;
}

const CLI::App* Subcommand(const CLI::App* app, const std::string& name) {
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty() && sub->check_name(name)) return sub;
  }
  return nullptr;
}

// Follows `args` down the command tree. Returns the command at which a word that is neither an
// option, an option's value nor one of its commands appears (and that word), or the deepest
// command reached (and "").
std::pair<const CLI::App*, std::string> Walk(const CLI::App& root,
                                             const std::vector<std::string>& args) {
  const CLI::App* at = &root;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;
    if (!word.empty() && word[0] == '-') {
      // An option that takes a value in the next word (not written as --name=value).
      if (word.find('=') == std::string::npos) {
        const CLI::Option* option = at->get_option_no_throw(word);
        if (option != nullptr && option->get_items_expected_min() > 0) ++i;
      }
      continue;
    }
    if (CommandList(at).empty()) break;  // A command without subcommands: its own arguments.
    const CLI::App* sub = Subcommand(at, word);
    if (sub == nullptr) return {at, word};
    at = sub;
  }
  return {at, ""};
}

}  // namespace

std::string ExplainParseError(const CLI::App& root, const CLI::ParseError& error,
                              const std::vector<std::string>& args) {
  const std::string what = error.what();
  const bool wants_command = what.find("A subcommand is required") != std::string::npos;
  const bool extras = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr;
  if (wants_command || extras) {
    auto [at, unknown] = Walk(root, args);
    const std::string path = PathOf(at);
    if (!unknown.empty()) {
      return path + ": '" + Printable(unknown) + "' is not a " + path +
             " command; commands: " + CommandList(at) + " (see " + path + " --help)";
    }
    if (wants_command) {
      return path + ": a command is needed: " + CommandList(at) + " (see " + path + " --help)";
    }
  }
  // The deepest command the parser had entered when it failed.
  const CLI::App* at = &root;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().back();
  const std::string path = PathOf(at);
  std::string message = what;
  // CLI11's "Could not convert: id = abc" for a word given where a number belongs.
  constexpr std::string_view kConvert = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr &&
      message.rfind(kConvert, 0) == 0 && message.find(" = ") != std::string::npos) {
    const size_t eq = message.find(" = ");
    const std::string name = message.substr(kConvert.size(), eq - kConvert.size());
    message = name + " is \"" + message.substr(eq + 3) + "\"; expected a whole number";
  }
  return path + ": " + Printable(message) + " (see " + path + " --help)";
}

}  // namespace gpufrac::cli
