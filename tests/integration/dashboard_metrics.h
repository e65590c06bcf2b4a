// What the Grafana dashboard under deploy/grafana queries, and what a /metrics page declares, so
// tests can check that every metric the dashboard draws is one the project exports.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

namespace gpufrac::testing {

inline const std::string kDashboard =
    std::string(GPUFRAC_SOURCE_DIR) + "/deploy/grafana/gpufrac-dashboard.json";

// The gpufrac_* names in every "expr" of the dashboard (panels, rows, variables), those
// starting with `prefix` ("" for all).
inline std::set<std::string> DashboardMetrics(std::string_view prefix = "") {
  std::ifstream in(kDashboard);
  nlohmann::json dashboard = nlohmann::json::parse(in);
  std::set<std::string> names;
  const std::regex name("gpufrac_[a-z0-9_]+");
  auto walk = [&](const nlohmann::json& j, auto& self) -> void {
    if (j.is_object()) {
      for (const auto& [key, value] : j.items()) {
        if ((key == "expr" || key == "query" || key == "definition") && value.is_string()) {
          const std::string expr = value.template get<std::string>();
          for (std::sregex_iterator it(expr.begin(), expr.end(), name), end; it != end; ++it) {
            if (it->str().rfind(prefix, 0) == 0) names.insert(it->str());
          }
        } else {
          self(value, self);
        }
      }
    } else if (j.is_array()) {
      for (const nlohmann::json& item : j) self(item, self);
    }
  };
  walk(dashboard, walk);
  return names;
}

// The series names a Prometheus text page declares ("# TYPE name type"), a histogram's
// _bucket, _sum and _count included.
inline std::set<std::string> ExportedMetrics(const std::string& page) {
  std::set<std::string> names;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string hash, type_word, metric, type;
    if (!(words >> hash >> type_word >> metric >> type) || hash != "#" || type_word != "TYPE") {
      continue;
    }
    names.insert(metric);
    if (type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(metric + suffix);
    }
  }
  return names;
}

}  // namespace gpufrac::testing
