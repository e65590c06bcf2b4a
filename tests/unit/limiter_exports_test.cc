// libgpufrac.so is a guest in other processes: it exports exactly the hooked entry points of the
// hook table (plus dlsym) and depends on nothing but the C library.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "limiter/hook_table.h"

namespace {

std::string Library() { return std::string(GPUFRAC_BUILD_DIR) + "/lib/libgpufrac.so"; }

std::set<std::string> Lines(const std::string& command) {
  std::set<std::string> lines;
  FILE* p = popen(command.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) {
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) lines.insert(s);
  }
  if (p) pclose(p);
  return lines;
}

TEST(LimiterExportsTest, ExportsExactlyTheHookTable) {
  std::set<std::string> expected = {"dlsym"};
#define GPUFRAC_NAME(lib, sym, opt) expected.insert(#sym);
  GPUFRAC_HOOKS(GPUFRAC_NAME)
#undef GPUFRAC_NAME
  std::set<std::string> exported =
      Lines("nm -D --defined-only " + Library() + " | awk '{print $3}'");
  EXPECT_EQ(exported, expected);
}

TEST(LimiterExportsTest, NeedsOnlyTheCLibrary) {
  std::set<std::string> needed =
      Lines("readelf -d " + Library() + " | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'");
  ASSERT_FALSE(needed.empty());
  for (const std::string& lib : needed) {
    EXPECT_TRUE(lib == "libc.so.6" || lib == "libdl.so.2" || lib == "libpthread.so.0" ||
                lib.rfind("ld-linux", 0) == 0)
        << lib;
  }
  // No C++ runtime or heap use that could collide with the host program's.
  std::set<std::string> undefined =
      Lines("nm -D --undefined-only " + Library() + " | awk '{print $2}' | sed 's/@.*//'");
  for (const char* forbidden :
       {"malloc", "free", "calloc", "realloc", "_Znwm", "_ZdlPv", "__cxa_throw"}) {
    EXPECT_EQ(undefined.count(forbidden), 0u) << forbidden;
  }
}

}  // namespace
