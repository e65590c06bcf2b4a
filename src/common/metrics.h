// Prometheus metrics in the text exposition format (version 0.0.4). prometheus-cpp is not
// packaged in Debian 12, so the few types the service needs are written here: gauges and
// counters with labels, and one histogram type. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gpufrac {

using Labels = std::vector<std::pair<std::string, std::string>>;  // name -> value, in order

class Metrics {
 public:
  // Declares a metric family once (HELP and TYPE lines). `type`: "gauge", "counter".
  void Declare(const std::string& name, const std::string& type, const std::string& help);
  // Sets a gauge / adds to a counter. The family must have been declared (calls on an
  // undeclared family, or on a histogram, are ignored).
  void Set(const std::string& name, const Labels& labels, double value);
  void Add(const std::string& name, const Labels& labels, double delta);
  // Drops every sample of a family (before re-setting gauges whose label sets change).
  void Clear(const std::string& name);

  // A histogram with fixed upper bounds (seconds, ascending); +Inf is implied.
  void DeclareHistogram(const std::string& name, const std::string& help,
                        std::vector<double> bounds);
  void Observe(const std::string& name, double value);

  // The whole exposition, families in declaration order, label values escaped.
  std::string Render() const;

 private:
  struct Family {
    std::string type, help;
    std::map<Labels, double> samples;
    std::vector<double> bounds;    // histograms
    std::vector<uint64_t> counts;  // per bound, cumulative at render
    double sum = 0;
    uint64_t count = 0;
  };
  mutable std::mutex mu_;
  std::vector<std::string> order_;
  std::map<std::string, Family> families_;
};

}  // namespace gpufrac
