// Metrics: gauges, counters and a fixed-bucket histogram rendered in Prometheus's text
// exposition format 0.0.4.
#include "common/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <system_error>
#include <utility>

namespace gpufrac {
namespace {

constexpr const char kHistogram[] = "histogram";

// HELP text: backslash and newline are escaped (double quotes are not, per the format).
std::string EscapeHelp(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// Label values additionally escape the double quote that delimits them.
std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// Integral values print as integers ("1048576", never "1.048576e+06") because most of ours are
// counts and bytes; anything else prints in the shortest form that reads back to the same
// double.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // 2^63 is exactly representable; integral doubles below it convert to int64 without loss.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (value == std::trunc(value) && value < kTwo63 && value >= -kTwo63) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (error != std::errc()) return "NaN";  // Cannot happen with 64 bytes; stay well-formed.
  return std::string(buffer, end);
}

void AppendSample(std::string& out, const std::string& name, const Labels& labels,
                  const std::string& value) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [label, label_value] : labels) {
      if (!first) out += ',';
      first = false;
      out += label;
      out += "=\"";
      out += EscapeLabelValue(label_value);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

void Metrics::Declare(const std::string& name, const std::string& type, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) order_.push_back(name);
  Family& family = it->second;
  if (!inserted && family.type != type) family = Family();  // A different kind: start over.
  family.type = type;
  family.help = help;
}

// Set/Add/Observe on a family that was never declared (or is of the other kind) is a programming
// error; it is ignored in every build type rather than asserted, so that a typo in a metric name
// can never take the node service down.
void Metrics::Set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type == kHistogram) return;
  it->second.samples[labels] = value;
}

void Metrics::Add(const std::string& name, const Labels& labels, double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type == kHistogram) return;
  it->second.samples[labels] += delta;  // A new label set starts from 0.
}

void Metrics::Clear(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  Family& family = it->second;
  family.samples.clear();
  family.counts.assign(family.bounds.size(), 0);
  family.sum = 0;
  family.count = 0;
}

void Metrics::DeclareHistogram(const std::string& name, const std::string& help,
                               std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) order_.push_back(name);
  Family& family = it->second;
  if (!inserted && (family.type != kHistogram || family.bounds != bounds)) family = Family();
  family.type = kHistogram;
  family.help = help;
  family.counts.resize(bounds.size(), 0);
  family.bounds = std::move(bounds);
}

void Metrics::Observe(const std::string& name, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != kHistogram) return;
  Family& family = it->second;
  // Counts are kept per bucket (the first bound that holds the value) and summed at render.
  for (size_t i = 0; i < family.bounds.size(); ++i) {
    if (value <= family.bounds[i]) {
      ++family.counts[i];
      break;
    }
  }
  family.sum += value;
  ++family.count;
}

std::string Metrics::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const std::string& name : order_) {
    const Family& family = families_.at(name);
    out += "# HELP " + name + " " + EscapeHelp(family.help) + "\n";
    out += "# TYPE " + name + " " + family.type + "\n";
    if (family.type != kHistogram) {
      for (const auto& [labels, value] : family.samples) {
        AppendSample(out, name, labels, FormatValue(value));
      }
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < family.bounds.size(); ++i) {
      cumulative += family.counts[i];
      AppendSample(out, name + "_bucket", {{"le", FormatValue(family.bounds[i])}},
                   std::to_string(cumulative));
    }
    AppendSample(out, name + "_bucket", {{"le", "+Inf"}}, std::to_string(family.count));
    AppendSample(out, name + "_sum", {}, FormatValue(family.sum));
    AppendSample(out, name + "_count", {}, std::to_string(family.count));
  }
  return out;
}

}  // namespace gpufrac
