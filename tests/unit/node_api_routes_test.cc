// The API's route list in node/api.h is the route table the service dispatches on, no more and
// no less: a route added to one and not the other fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "node/api.h"

namespace gpufrac::node {
namespace {

TEST(ApiRoutesTest, TheHeaderListsExactlyTheRouteTable) {
  std::ifstream header(std::string(GPUFRAC_SOURCE_DIR) + "/src/node/api.h");
  ASSERT_TRUE(header) << "cannot read src/node/api.h";
  const std::regex listed(R"(^//   (GET|POST|PUT|DELETE)\s+(/\S*))");
  std::multiset<std::string> documented;
  for (std::string line; std::getline(header, line);) {
    std::smatch m;
    if (std::regex_search(line, m, listed)) documented.insert(m[1].str() + " " + m[2].str());
  }
  std::vector<std::string> table = ApiRoutes();
  EXPECT_EQ(documented, std::multiset<std::string>(table.begin(), table.end()));
  EXPECT_EQ(std::set<std::string>(table.begin(), table.end()).size(), table.size());
}

}  // namespace
}  // namespace gpufrac::node
