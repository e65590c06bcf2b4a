// Renders line charts with cairo's image surface and PNG writer: axes on "nice" tick steps, a
// grid, the series on top, and a legend in whichever corner hides the least data.
#include "sim/plot.h"

#include <cairo.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>

namespace gpufrac::sim {
namespace {

constexpr int kWidth = 1000;
constexpr int kHeight = 650;
// Installed by fonts-dejavu-core; fontconfig substitutes a similar face if it is missing.
constexpr char kFontFamily[] = "DejaVu Sans";
constexpr double kTitleFontSize = 20;
constexpr double kAxisLabelFontSize = 15;
constexpr double kTickFontSize = 13;
constexpr double kLegendFontSize = 13;
constexpr double kSeriesLineWidth = 2.5;  // Over 2 px, so every line fully covers some pixels.
constexpr double kLegendMaxNameWidth = 320;

struct Rgb {
  double r, g, b;
};

// The Tableau 10 colours: told apart easily (also by most colour-blind readers) and dark enough
// to read on white. Series past the tenth reuse them with a dash pattern.
constexpr std::array<Rgb, 10> kPalette = {{
    {31 / 255.0, 119 / 255.0, 180 / 255.0},   // blue
    {255 / 255.0, 127 / 255.0, 14 / 255.0},   // orange
    {44 / 255.0, 160 / 255.0, 44 / 255.0},    // green
    {214 / 255.0, 39 / 255.0, 40 / 255.0},    // red
    {148 / 255.0, 103 / 255.0, 189 / 255.0},  // purple
    {140 / 255.0, 86 / 255.0, 75 / 255.0},    // brown
    {227 / 255.0, 119 / 255.0, 194 / 255.0},  // pink
    {127 / 255.0, 127 / 255.0, 127 / 255.0},  // grey
    {188 / 255.0, 189 / 255.0, 34 / 255.0},   // olive
    {23 / 255.0, 190 / 255.0, 207 / 255.0},   // cyan
}};

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* cr) const { cairo_destroy(cr); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using ContextPtr = std::unique_ptr<cairo_t, ContextDeleter>;

// One axis: lo and hi are multiples of step, so the ends carry ticks.
struct Axis {
  double lo;
  double hi;
  double step;
  int TickCount() const {
    // Bounded so that a pathological range cannot make the tick loops run away.
    return static_cast<int>(std::min(200.0, std::round((hi - lo) / step))) + 1;
  }
  double Tick(int i) const { return lo + i * step; }  // Not accumulated: no drift.
};

// The smallest of 1, 2, 5 times a power of ten that is at least `raw`.
double NiceStepAtLeast(double raw) {
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double fraction = raw / magnitude;
  double nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  return nice * magnitude;
}

Axis AxisWithStep(double lo, double hi, double step) {
  // The slack keeps lo = 3 * step from snapping down to 2 * step through rounding error.
  return Axis{std::floor(lo / step + 1e-9) * step, std::ceil(hi / step - 1e-9) * step, step};
}

// About `target_ticks` intervals covering [lo, hi], which must satisfy lo < hi.
Axis MakeAxis(double lo, double hi, int target_ticks) {
  return AxisWithStep(lo, hi, NiceStepAtLeast((hi - lo) / target_ticks));
}

std::string FormatTick(double value, double step) {
  if (std::abs(value) < step * 1e-6) value = 0;  // Avoids "-0.0" from lo + i * step.
  int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char text[64];
  if (std::abs(value) >= 1e7 || decimals > 6) {
    std::snprintf(text, sizeof(text), "%g", value);
  } else {
    std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  }
  return text;
}

void SetFont(cairo_t* cr, double size, bool bold = false) {
  cairo_select_font_face(cr, kFontFamily, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double TextWidth(cairo_t* cr, const std::string& text) {
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  return extents.x_advance;
}

enum class VAlign { kTop, kMiddle, kBaseline };

// Draws `text` with its horizontal anchor at fraction `h` of its width (0 left, 0.5 centre,
// 1 right) on x. Vertical placement uses the font's ascent and descent rather than the string's
// own extents, so that labels in one row share a baseline whatever their letters.
void DrawText(cairo_t* cr, const std::string& text, double x, double y, double h, VAlign v) {
  cairo_font_extents_t font;
  cairo_font_extents(cr, &font);
  double baseline = y;
  if (v == VAlign::kTop) baseline = y + font.ascent;
  if (v == VAlign::kMiddle) baseline = y + (font.ascent - font.descent) / 2;
  cairo_move_to(cr, x - h * TextWidth(cr, text), baseline);
  cairo_show_text(cr, text.c_str());
}

// `text` shortened with an ellipsis to fit `max_width` at the current font.
std::string FitText(cairo_t* cr, std::string text, double max_width) {
  if (TextWidth(cr, text) <= max_width) return text;
  const std::string ellipsis = "\xE2\x80\xA6";
  while (!text.empty() && TextWidth(cr, text + ellipsis) > max_width) {
    // Drop one whole UTF-8 character: continuation bytes first, then its lead byte.
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) {
      text.pop_back();
    }
    if (!text.empty()) text.pop_back();
  }
  return text + ellipsis;
}

// Sets colour and dash of series `index`; its line width is the caller's.
void SetSeriesStyle(cairo_t* cr, size_t index) {
  const Rgb& c = kPalette[index % kPalette.size()];
  cairo_set_source_rgb(cr, c.r, c.g, c.b);
  static const double kDashed[] = {9, 4};
  static const double kDotted[] = {2, 4};
  static const double kDashDot[] = {9, 4, 2, 4};
  switch ((index / kPalette.size()) % 4) {
    case 0:
      cairo_set_dash(cr, nullptr, 0, 0);
      break;
    case 1:
      cairo_set_dash(cr, kDashed, 2, 0);
      break;
    case 2:
      cairo_set_dash(cr, kDotted, 2, 0);
      break;
    default:
      cairo_set_dash(cr, kDashDot, 4, 0);
      break;
  }
}

struct Rect {
  double x, y, w, h;
  bool Contains(double px, double py) const {
    return px >= x && px <= x + w && py >= y && py <= y + h;
  }
};

// Pixel-space mapping of the data ranges onto the plot area.
struct Frame {
  Rect area;
  Axis x;
  Axis y;
  double X(double v) const { return area.x + (v - x.lo) / (x.hi - x.lo) * area.w; }
  double Y(double v) const { return area.y + area.h - (v - y.lo) / (y.hi - y.lo) * area.h; }
};

// How much of the drawn data `box` would cover, by sampling each segment every few pixels.
int DataUnder(const Frame& frame, const std::vector<PlotSeries>& series, const Rect& box) {
  int hits = 0;
  for (const PlotSeries& s : series) {
    for (size_t i = 0; i < s.points.size(); ++i) {
      double x0 = frame.X(s.points[i].first), y0 = frame.Y(s.points[i].second);
      if (i + 1 == s.points.size()) {
        hits += box.Contains(x0, y0);
        break;
      }
      double x1 = frame.X(s.points[i + 1].first), y1 = frame.Y(s.points[i + 1].second);
      int samples = std::max(1, static_cast<int>(std::hypot(x1 - x0, y1 - y0) / 4));
      for (int k = 0; k < samples; ++k) {
        double t = static_cast<double>(k) / samples;
        hits += box.Contains(x0 + t * (x1 - x0), y0 + t * (y1 - y0));
      }
    }
  }
  return hits;
}

void DrawAxes(cairo_t* cr, const Frame& f) {
  const Rect& a = f.area;
  // Integer coordinates plus half a pixel keep 1 px lines sharp instead of smeared over two.
  auto crisp = [](double v) { return std::round(v) + 0.5; };
  cairo_set_line_width(cr, 1);

  cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
  for (int i = 0; i < f.x.TickCount(); ++i) {
    double px = crisp(f.X(f.x.Tick(i)));
    cairo_move_to(cr, px, a.y);
    cairo_line_to(cr, px, a.y + a.h);
  }
  for (int i = 0; i < f.y.TickCount(); ++i) {
    double py = crisp(f.Y(f.y.Tick(i)));
    cairo_move_to(cr, a.x, py);
    cairo_line_to(cr, a.x + a.w, py);
  }
  cairo_stroke(cr);

  cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
  cairo_rectangle(cr, crisp(a.x), crisp(a.y), std::round(a.w), std::round(a.h));
  for (int i = 0; i < f.x.TickCount(); ++i) {
    double px = crisp(f.X(f.x.Tick(i)));
    cairo_move_to(cr, px, a.y + a.h);
    cairo_line_to(cr, px, a.y + a.h + 5);
  }
  for (int i = 0; i < f.y.TickCount(); ++i) {
    double py = crisp(f.Y(f.y.Tick(i)));
    cairo_move_to(cr, a.x - 5, py);
    cairo_line_to(cr, a.x, py);
  }
  cairo_stroke(cr);

  SetFont(cr, kTickFontSize);
  for (int i = 0; i < f.x.TickCount(); ++i) {
    DrawText(cr, FormatTick(f.x.Tick(i), f.x.step), f.X(f.x.Tick(i)), a.y + a.h + 8, 0.5,
             VAlign::kTop);
  }
  for (int i = 0; i < f.y.TickCount(); ++i) {
    DrawText(cr, FormatTick(f.y.Tick(i), f.y.step), a.x - 8, f.Y(f.y.Tick(i)), 1, VAlign::kMiddle);
  }
}

void DrawSeries(cairo_t* cr, const Frame& f, const std::vector<PlotSeries>& series) {
  cairo_set_line_width(cr, kSeriesLineWidth);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& points = series[i].points;
    if (points.empty()) continue;
    SetSeriesStyle(cr, i);
    if (points.size() == 1) {
      // A lone point makes no line; a dot shows it exists.
      cairo_arc(cr, f.X(points[0].first), f.Y(points[0].second), 3.5, 0, 2 * std::numbers::pi);
      cairo_fill(cr);
      continue;
    }
    cairo_move_to(cr, f.X(points[0].first), f.Y(points[0].second));
    for (size_t k = 1; k < points.size(); ++k) {
      cairo_line_to(cr, f.X(points[k].first), f.Y(points[k].second));
    }
    cairo_stroke(cr);
  }
  cairo_set_dash(cr, nullptr, 0, 0);
}

void DrawLegend(cairo_t* cr, const Frame& f, const std::vector<PlotSeries>& series) {
  constexpr double kPad = 8, kSwatch = 28, kGap = 8, kRow = 20, kInset = 10;
  SetFont(cr, kLegendFontSize);
  std::vector<std::string> names;
  double name_width = 0;
  for (const PlotSeries& s : series) {
    names.push_back(FitText(cr, s.name, kLegendMaxNameWidth));
    name_width = std::max(name_width, TextWidth(cr, names.back()));
  }
  double w = std::round(kPad + kSwatch + kGap + name_width + kPad + 2);
  double h = std::round(2 * kPad + kRow * series.size());
  const Rect& a = f.area;
  // In order of preference; ties keep the earlier corner.
  const std::array<Rect, 4> corners = {{
      {a.x + a.w - kInset - w, a.y + kInset, w, h},
      {a.x + kInset, a.y + kInset, w, h},
      {a.x + a.w - kInset - w, a.y + a.h - kInset - h, w, h},
      {a.x + kInset, a.y + a.h - kInset - h, w, h},
  }};
  Rect box = corners[0];
  int best = DataUnder(f, series, box);
  for (size_t i = 1; i < corners.size() && best > 0; ++i) {
    int hits = DataUnder(f, series, corners[i]);
    if (hits < best) {
      best = hits;
      box = corners[i];
    }
  }

  cairo_rectangle(cr, box.x + 0.5, box.y + 0.5, box.w, box.h);
  cairo_set_source_rgba(cr, 1, 1, 1, 0.92);
  cairo_fill_preserve(cr);
  cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);

  cairo_set_line_width(cr, kSeriesLineWidth);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_BUTT);
  for (size_t i = 0; i < series.size(); ++i) {
    double cy = box.y + kPad + kRow * (i + 0.5);
    SetSeriesStyle(cr, i);
    cairo_move_to(cr, box.x + kPad, cy);
    cairo_line_to(cr, box.x + kPad + kSwatch, cy);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    DrawText(cr, names[i], box.x + kPad + kSwatch + kGap, cy, 0, VAlign::kMiddle);
  }
  cairo_set_dash(cr, nullptr, 0, 0);
}

// What the series span: x from their least to their greatest point, y always from 0.
struct DataRange {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = 0, y_max = 0;
};

// The series' range, widened where it is a single x or all-zero y so the axes have a span.
Status FindDataRange(const std::string& where, const std::vector<PlotSeries>& series,
                     DataRange* r) {
  for (const PlotSeries& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        return InvalidArgumentError(where + ": series '" + s.name +
                                    "' has a point that is not a finite number");
      }
      r->x_min = std::min(r->x_min, x);
      r->x_max = std::max(r->x_max, x);
      r->y_min = std::min(r->y_min, y);
      r->y_max = std::max(r->y_max, y);
    }
  }
  if (r->x_min > r->x_max) {
    return InvalidArgumentError(where + ": none of the " + std::to_string(series.size()) +
                                " series has any points");
  }
  if (r->x_min == r->x_max) {
    double pad = r->x_min == 0 ? 1 : std::abs(r->x_min) * 0.05;
    r->x_min -= pad;
    r->x_max += pad;
  }
  if (r->y_min == r->y_max) r->y_max = 1;  // All zero: show 0 at the bottom of a unit range.
  return OkStatus();
}

// The axes and the plot area between the margins that the labels need.
Frame LayOutFrame(cairo_t* cr, const DataRange& r, const PlotLabels& labels) {
  // The left margin depends on how wide the y tick labels are, so the y axis comes first.
  Frame frame;
  frame.y = MakeAxis(r.y_min, r.y_max, 6);
  SetFont(cr, kTickFontSize);
  double y_tick_width = 0;
  for (int i = 0; i < frame.y.TickCount(); ++i) {
    y_tick_width = std::max(y_tick_width, TextWidth(cr, FormatTick(frame.y.Tick(i), frame.y.step)));
  }
  double left = std::round(12 + (labels.y_label.empty() ? 0 : 28) + y_tick_width + 10);
  double top = labels.title.empty() ? 24 : 56;
  double bottom = 36 + (labels.x_label.empty() ? 0 : 28) + 8;
  double right = 30;
  frame.area = Rect{left, top, kWidth - left - right, kHeight - top - bottom};

  // Widen the x step until its labels no longer run into each other.
  frame.x = MakeAxis(r.x_min, r.x_max, 8);
  for (int tries = 0; tries < 10; ++tries) {
    double widest = 0;
    for (int i = 0; i < frame.x.TickCount(); ++i) {
      widest = std::max(widest, TextWidth(cr, FormatTick(frame.x.Tick(i), frame.x.step)));
    }
    if (frame.area.w / (frame.x.TickCount() - 1) >= widest + 12) break;
    frame.x = AxisWithStep(r.x_min, r.x_max, NiceStepAtLeast(frame.x.step * 1.01));
  }
  return frame;
}

// The title above the plot and the axes' labels beside them.
void DrawLabels(cairo_t* cr, const Frame& frame, const PlotLabels& labels) {
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  if (!labels.title.empty()) {
    SetFont(cr, kTitleFontSize, /*bold=*/true);
    DrawText(cr, FitText(cr, labels.title, kWidth - 40), kWidth / 2.0, 16, 0.5, VAlign::kTop);
  }
  SetFont(cr, kAxisLabelFontSize);
  if (!labels.x_label.empty()) {
    DrawText(cr, FitText(cr, labels.x_label, frame.area.w), frame.area.x + frame.area.w / 2,
             kHeight - 12, 0.5, VAlign::kBaseline);
  }
  if (!labels.y_label.empty()) {
    cairo_save(cr);
    cairo_translate(cr, 12, frame.area.y + frame.area.h / 2);
    // A quarter turn anticlockwise: the text reads bottom to top and its top faces left.
    cairo_rotate(cr, -std::numbers::pi / 2);
    DrawText(cr, FitText(cr, labels.y_label, frame.area.h), 0, 0, 0.5, VAlign::kTop);
    cairo_restore(cr);
  }
}

// Writes the drawn surface to `path` as a PNG.
Status WritePng(cairo_surface_t* surface, const std::string& path, const std::string& where) {
  cairo_surface_flush(surface);
  // cairo reports only "write error"; errno, set by the failing fopen or fwrite, says why.
  errno = 0;
  cairo_status_t written = cairo_surface_write_to_png(surface, path.c_str());
  if (written != CAIRO_STATUS_SUCCESS) {
    std::string reason = cairo_status_to_string(written);
    if (errno != 0) reason += std::string(" (") + std::strerror(errno) + ")";
    return InvalidArgumentError("cannot write " + where + ": " + reason);
  }
  return OkStatus();
}

}  // namespace

Status WritePlotPng(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotLabels& labels) {
  const std::string where = "plot '" + path + "'";
  if (series.empty()) return InvalidArgumentError(where + ": no series to draw");
  DataRange range;
  GPUFRAC_RETURN_IF_ERROR(FindDataRange(where, series, &range));

  SurfacePtr surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, kWidth, kHeight));
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return InternalError(where + ": cannot create a drawing surface: " +
                         cairo_status_to_string(cairo_surface_status(surface.get())));
  }
  ContextPtr context(cairo_create(surface.get()));
  cairo_t* cr = context.get();
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);

  const Frame frame = LayOutFrame(cr, range, labels);
  DrawAxes(cr, frame);
  DrawSeries(cr, frame, series);
  DrawLegend(cr, frame, series);
  DrawLabels(cr, frame, labels);

  if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
    return InternalError(where + ": drawing failed: " + cairo_status_to_string(cairo_status(cr)));
  }
  return WritePng(surface.get(), path, where);
}

}  // namespace gpufrac::sim
