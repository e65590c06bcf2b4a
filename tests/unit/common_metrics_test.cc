// Metrics: the exact text a Prometheus scraper reads (format 0.0.4): HELP/TYPE lines, label
// escaping, value formatting, histogram buckets, and that misuse is ignored.
#include <gtest/gtest.h>

#include <limits>
#include <thread>
#include <vector>

#include "common/metrics.h"

namespace gpufrac {
namespace {

TEST(Metrics, EmptyRendersNothing) { EXPECT_EQ(Metrics().Render(), ""); }

TEST(Metrics, GaugeAndCounterWithoutLabels) {
  Metrics m;
  m.Declare("gpufrac_jobs_running", "gauge", "Jobs running now.");
  m.Declare("gpufrac_jobs_started_total", "counter", "Jobs started since the service began.");
  m.Set("gpufrac_jobs_running", {}, 3);
  m.Add("gpufrac_jobs_started_total", {}, 1);
  m.Add("gpufrac_jobs_started_total", {}, 2);
  EXPECT_EQ(m.Render(),
            "# HELP gpufrac_jobs_running Jobs running now.\n"
            "# TYPE gpufrac_jobs_running gauge\n"
            "gpufrac_jobs_running 3\n"
            "# HELP gpufrac_jobs_started_total Jobs started since the service began.\n"
            "# TYPE gpufrac_jobs_started_total counter\n"
            "gpufrac_jobs_started_total 3\n");
}

TEST(Metrics, FamiliesInDeclarationOrderWithHeadersEvenWithoutSamples) {
  Metrics m;
  m.Declare("zeta", "gauge", "Z.");
  m.Declare("alpha", "counter", "A.");
  m.Set("alpha", {}, 1);
  EXPECT_EQ(m.Render(),
            "# HELP zeta Z.\n"
            "# TYPE zeta gauge\n"
            "# HELP alpha A.\n"
            "# TYPE alpha counter\n"
            "alpha 1\n");
}

TEST(Metrics, LabelsInGivenOrderAndSamplesSorted) {
  Metrics m;
  m.Declare("gpu_memory_bytes", "gauge", "Memory per GPU.");
  m.Set("gpu_memory_bytes", {{"gpu", "1"}, {"kind", "used"}}, 1048576);
  m.Set("gpu_memory_bytes", {{"gpu", "0"}, {"kind", "used"}}, 4294967296);
  m.Set("gpu_memory_bytes", {{"gpu", "0"}, {"kind", "used"}}, 8589934592);  // Replaces.
  EXPECT_EQ(m.Render(),
            "# HELP gpu_memory_bytes Memory per GPU.\n"
            "# TYPE gpu_memory_bytes gauge\n"
            "gpu_memory_bytes{gpu=\"0\",kind=\"used\"} 8589934592\n"
            "gpu_memory_bytes{gpu=\"1\",kind=\"used\"} 1048576\n");
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  Metrics m;
  m.Declare("m", "gauge", "Back\\slash, \"quotes\" and a\nnewline.");
  m.Set("m", {{"path", "C:\\dir"}, {"say", "\"hi\"\nthere"}}, 1);
  EXPECT_EQ(m.Render(),
            "# HELP m Back\\\\slash, \"quotes\" and a\\nnewline.\n"
            "# TYPE m gauge\n"
            "m{path=\"C:\\\\dir\",say=\"\\\"hi\\\"\\nthere\"} 1\n");
}

TEST(Metrics, ValuesIntegersLookLikeIntegersAndDoublesRoundTrip) {
  Metrics m;
  m.Declare("v", "gauge", "Values.");
  m.Set("v", {{"k", "a"}}, 0.1);
  m.Set("v", {{"k", "b"}}, -2);
  m.Set("v", {{"k", "c"}}, 1e6);
  m.Set("v", {{"k", "d"}}, 0.25);
  m.Set("v", {{"k", "e"}}, 1.0 / 3.0);
  m.Set("v", {{"k", "f"}}, 1e300);
  m.Set("v", {{"k", "g"}}, std::numeric_limits<double>::infinity());
  m.Set("v", {{"k", "h"}}, -std::numeric_limits<double>::infinity());
  m.Set("v", {{"k", "i"}}, std::numeric_limits<double>::quiet_NaN());
  m.Set("v", {{"k", "j"}}, 0);
  EXPECT_EQ(m.Render(),
            "# HELP v Values.\n"
            "# TYPE v gauge\n"
            "v{k=\"a\"} 0.1\n"
            "v{k=\"b\"} -2\n"
            "v{k=\"c\"} 1000000\n"
            "v{k=\"d\"} 0.25\n"
            "v{k=\"e\"} 0.3333333333333333\n"
            "v{k=\"f\"} 1e+300\n"
            "v{k=\"g\"} +Inf\n"
            "v{k=\"h\"} -Inf\n"
            "v{k=\"i\"} NaN\n"
            "v{k=\"j\"} 0\n");
}

TEST(Metrics, CounterAddsPerLabelSet) {
  Metrics m;
  m.Declare("req_total", "counter", "Requests.");
  m.Add("req_total", {{"code", "200"}}, 1);
  m.Add("req_total", {{"code", "404"}}, 1);
  m.Add("req_total", {{"code", "200"}}, 1.5);
  EXPECT_EQ(m.Render(),
            "# HELP req_total Requests.\n"
            "# TYPE req_total counter\n"
            "req_total{code=\"200\"} 2.5\n"
            "req_total{code=\"404\"} 1\n");
}

TEST(Metrics, ClearDropsSamplesButKeepsTheFamily) {
  Metrics m;
  m.Declare("g", "gauge", "G.");
  m.Set("g", {{"gpu", "0"}}, 1);
  m.Set("g", {{"gpu", "1"}}, 2);
  m.Clear("g");
  EXPECT_EQ(m.Render(), "# HELP g G.\n# TYPE g gauge\n");
  m.Set("g", {{"gpu", "1"}}, 5);
  EXPECT_EQ(m.Render(), "# HELP g G.\n# TYPE g gauge\ng{gpu=\"1\"} 5\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeWithSumAndCount) {
  Metrics m;
  m.DeclareHistogram("wait_seconds", "Time in queue.", {0.25, 1, 10});
  m.Observe("wait_seconds", 0.125);
  m.Observe("wait_seconds", 0.25);  // On a bound: counts in that bucket (le is "<=").
  m.Observe("wait_seconds", 0.5);
  m.Observe("wait_seconds", 30);
  EXPECT_EQ(m.Render(),
            "# HELP wait_seconds Time in queue.\n"
            "# TYPE wait_seconds histogram\n"
            "wait_seconds_bucket{le=\"0.25\"} 2\n"
            "wait_seconds_bucket{le=\"1\"} 3\n"
            "wait_seconds_bucket{le=\"10\"} 3\n"
            "wait_seconds_bucket{le=\"+Inf\"} 4\n"
            "wait_seconds_sum 30.875\n"
            "wait_seconds_count 4\n");
}

TEST(Metrics, EmptyHistogramAndClear) {
  Metrics m;
  m.DeclareHistogram("h", "H.", {1});
  const std::string empty =
      "# HELP h H.\n"
      "# TYPE h histogram\n"
      "h_bucket{le=\"1\"} 0\n"
      "h_bucket{le=\"+Inf\"} 0\n"
      "h_sum 0\n"
      "h_count 0\n";
  EXPECT_EQ(m.Render(), empty);
  m.Observe("h", 2);
  m.Clear("h");
  EXPECT_EQ(m.Render(), empty);
}

TEST(Metrics, MisuseIsIgnored) {
  Metrics m;
  m.Set("undeclared", {}, 1);
  m.Add("undeclared", {{"a", "b"}}, 1);
  m.Observe("undeclared", 1);
  m.Clear("undeclared");
  m.Declare("g", "gauge", "G.");
  m.Observe("g", 1);  // Not a histogram.
  m.DeclareHistogram("h", "H.", {1});
  m.Set("h", {}, 1);  // Not a gauge.
  EXPECT_EQ(m.Render(),
            "# HELP g G.\n# TYPE g gauge\n"
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(Metrics, RedeclaringKeepsOrderAndSamples) {
  Metrics m;
  m.Declare("a", "counter", "A.");
  m.Declare("b", "counter", "B.");
  m.Add("a", {}, 4);
  m.Declare("a", "counter", "A, reworded.");
  EXPECT_EQ(m.Render(),
            "# HELP a A, reworded.\n# TYPE a counter\na 4\n"
            "# HELP b B.\n# TYPE b counter\n");
}

TEST(Metrics, ConcurrentAddsAreNotLost) {
  Metrics m;
  m.Declare("n", "counter", "N.");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 10000; ++i) m.Add("n", {}, 1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(m.Render(), "# HELP n N.\n# TYPE n counter\nn 40000\n");
}

}  // namespace
}  // namespace gpufrac
