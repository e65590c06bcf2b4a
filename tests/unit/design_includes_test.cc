// The module table is real: every #include from one module of src/ into another follows the rules
// in docs/architecture.md (which module may include which), and a file that breaks them is named
// with its line. The checker is also run on a small tree with a forbidden include, so that it is
// known to catch one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gpufrac {
namespace {

namespace fs = std::filesystem;

// Module -> what it may include: "mod" (all of a module) or "mod/file.h".
using Rules = std::map<std::string, std::set<std::string>>;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The table between the include-rules markers: | `module` | ... | `a`, `b/c.h` |.
Rules ParseRules(const std::string& markdown, std::string* error) {
  Rules rules;
  const size_t begin = markdown.find("<!-- include-rules: begin -->");
  const size_t end = markdown.find("<!-- include-rules: end -->");
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    *error = "no include-rules table";
    return rules;
  }
  std::istringstream lines(markdown.substr(begin, end - begin));
  const std::regex name("`([^`]+)`");
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 3) continue;
    std::smatch m;
    if (!std::regex_search(cells[0], m, name)) continue;
    std::set<std::string>& allowed = rules[m[1]];
    const std::string& last = cells.back().find_first_not_of(' ') == std::string::npos
                                  ? cells[cells.size() - 2]
                                  : cells.back();
    for (std::sregex_iterator it(last.begin(), last.end(), name), done; it != done; ++it) {
      allowed.insert((*it)[1]);
    }
  }
  return rules;
}

// "path:line includes x/y.h, which module m may not include (it may include: ...)", one per
// violation, for every source file under `src`.
std::vector<std::string> Violations(const fs::path& src, const Rules& rules) {
  std::vector<std::string> out;
  std::set<std::string> modules;
  for (const auto& entry : fs::directory_iterator(src)) {
    if (entry.is_directory()) modules.insert(entry.path().filename());
  }
  for (const std::string& module : modules) {
    if (!rules.count(module)) {
      out.push_back("src/" + module + " has no row in docs/architecture.md's module table");
    }
  }
  const std::regex include("^\\s*#\\s*include\\s+\"([a-z0-9_]+)/([^\"]+)\"");
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const std::string ext = entry.path().extension();
    if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc" && ext != ".inc")) continue;
    const std::string module = fs::relative(entry.path(), src).begin()->string();
    auto rule = rules.find(module);
    if (rule == rules.end()) continue;
    std::ifstream in(entry.path());
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      std::smatch m;
      if (!std::regex_search(line, m, include)) continue;
      const std::string target = m[1], header = std::string(m[1]) + "/" + std::string(m[2]);
      if (target == module || !modules.count(target)) continue;  // Own or third-party.
      if (rule->second.count(target) || rule->second.count(header)) continue;
      std::string may;
      for (const std::string& a : rule->second) may += (may.empty() ? "" : ", ") + a;
      out.push_back(fs::relative(entry.path(), src.parent_path()).string() + ":" +
                    std::to_string(line_no) + " includes " + header + ", which module " + module +
                    " may not include (it may include: " + (may.empty() ? "nothing" : may) + ")");
    }
  }
  return out;
}

TEST(DesignIncludesTest, EveryIncludeBetweenModulesFollowsTheTable) {
  const fs::path root = GPUFRAC_SOURCE_DIR;
  std::string error;
  Rules rules = ParseRules(ReadFile(root / "docs" / "architecture.md"), &error);
  ASSERT_TRUE(error.empty()) << error;
  ASSERT_GE(rules.size(), 10u);
  EXPECT_TRUE(rules.at("common").empty());
  EXPECT_TRUE(rules.at("limiter").count("abi"));
  std::vector<std::string> violations = Violations(root / "src", rules);
  for (const std::string& v : violations) ADD_FAILURE() << v;
}

TEST(DesignIncludesTest, AForbiddenIncludeIsNamedWithItsFileAndLine) {
  const fs::path dir = fs::temp_directory_path() / ("gpufrac-includes-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "src" / "low");
  fs::create_directories(dir / "src" / "high");
  fs::create_directories(dir / "src" / "other");
  std::ofstream(dir / "src" / "low" / "a.h") << "#pragma once\n#include <vector>\n";
  std::ofstream(dir / "src" / "high" / "b.cc") << "#include \"high/b.h\"\n#include \"low/a.h\"\n";
  std::ofstream(dir / "src" / "low" / "c.cc")
      << "// low may not use high\n#include \"low/a.h\"\n#include \"nlohmann/json.hpp\"\n"
         "  #  include \"high/b.h\"\n";
  std::string error;
  Rules rules = ParseRules(
      "<!-- include-rules: begin -->\n| module | owns | may include |\n|---|---|---|\n"
      "| `low` | x | — |\n| `high` | y | `low/a.h` |\n<!-- include-rules: end -->\n",
      &error);
  ASSERT_TRUE(error.empty()) << error;
  std::vector<std::string> violations = Violations(dir / "src", rules);
  fs::remove_all(dir);
  ASSERT_EQ(violations.size(), 2u);
  EXPECT_EQ(violations[0], "src/other has no row in docs/architecture.md's module table");
  EXPECT_EQ(violations[1],
            "src/low/c.cc:4 includes high/b.h, which module low may not include (it may include: "
            "nothing)");
}

}  // namespace
}  // namespace gpufrac
