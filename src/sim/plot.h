// Line charts of simulation results (e.g. allocation curves of several policies) as PNG files,
// so a run can be looked at without exporting its numbers to another tool.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpufrac::sim {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
};

struct PlotLabels {
  std::string title;
  std::string x_label;
  std::string y_label;
};

// Draws the series as lines (one colour each, with a legend) on one chart and writes a PNG.
// Axis ranges cover all points (y from 0 unless data is negative), with tick labels. Errors: no
// series or no points, a path that cannot be written -> InvalidArgumentError naming the path.
// A series without points still gets a legend entry as long as some other series has points;
// a point that is NaN or infinite is an InvalidArgumentError too.
Status WritePlotPng(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotLabels& labels);

}  // namespace gpufrac::sim
