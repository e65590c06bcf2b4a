// Tests of WritePlotPng: the PNG it writes (signature, size, where each series' colour lands,
// read back through cairo) and the errors it returns for bad input and unwritable paths.
#include <cairo.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "sim/plot.h"

namespace gpufrac::sim {
namespace {

constexpr int kWidth = 1000;
constexpr int kHeight = 650;

// The first palette colours in plot.cc (Tableau 10), as 0xRRGGBB.
constexpr uint32_t kBlue = 0x1f77b4;
constexpr uint32_t kOrange = 0xff7f0e;
constexpr uint32_t kGreen = 0x2ca02c;
constexpr uint32_t kRed = 0xd62728;

class PlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpufrac_plot_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

std::vector<unsigned char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>());
}

uint32_t BigEndian32(const std::vector<unsigned char>& bytes, size_t at) {
  return (uint32_t{bytes[at]} << 24) | (uint32_t{bytes[at + 1]} << 16) |
         (uint32_t{bytes[at + 2]} << 8) | uint32_t{bytes[at + 3]};
}

// Where pixels of one colour are in a decoded image.
struct ColourStats {
  int count = 0;
  double mean_row = 0;
};

class Image {
 public:
  explicit Image(const std::string& path)
      : surface_(cairo_image_surface_create_from_png(path.c_str())) {}
  ~Image() { cairo_surface_destroy(surface_); }
  Image(const Image&) = delete;
  Image& operator=(const Image&) = delete;

  bool ok() const { return cairo_surface_status(surface_) == CAIRO_STATUS_SUCCESS; }
  int width() const { return cairo_image_surface_get_width(surface_); }
  int height() const { return cairo_image_surface_get_height(surface_); }

  uint32_t Rgb(int x, int y) const {
    const unsigned char* row =
        cairo_image_surface_get_data(surface_) + y * cairo_image_surface_get_stride(surface_);
    return reinterpret_cast<const uint32_t*>(row)[x] & 0xffffff;
  }

  // Pixels within 2 per channel of `rgb`: fully covered line pixels are exact, and the slack
  // only guards against rounding in the PNG round trip.
  ColourStats Find(uint32_t rgb) const {
    ColourStats stats;
    double row_sum = 0;
    for (int y = 0; y < height(); ++y) {
      for (int x = 0; x < width(); ++x) {
        uint32_t p = Rgb(x, y);
        bool close = true;
        for (int shift : {0, 8, 16}) {
          int a = (p >> shift) & 0xff, b = (rgb >> shift) & 0xff;
          close = close && std::abs(a - b) <= 2;
        }
        if (close) {
          ++stats.count;
          row_sum += y;
        }
      }
    }
    if (stats.count > 0) stats.mean_row = row_sum / stats.count;
    return stats;
  }

 private:
  cairo_surface_t* surface_;
};

PlotSeries Line(const std::string& name, double x0, double y0, double x1, double y1) {
  return PlotSeries{name, {{x0, y0}, {x1, y1}}};
}

const PlotLabels kLabels{"Allocation against arrived demand", "Arrived GPU demand (%)",
                         "Allocated GPU (%)"};

TEST_F(PlotTest, WritesPngWithSignatureAndSize) {
  std::string path = Path("chart.png");
  ASSERT_TRUE(WritePlotPng(path, {Line("fgd", 0, 0, 100, 90)}, kLabels).ok());

  std::vector<unsigned char> bytes = ReadBytes(path);
  ASSERT_GE(bytes.size(), 24u);
  const unsigned char kSignature[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(std::begin(kSignature), std::end(kSignature), bytes.begin()));
  // The first chunk is IHDR (13 bytes of data): width then height, big-endian.
  EXPECT_EQ(BigEndian32(bytes, 8), 13u);
  EXPECT_EQ(std::string(bytes.begin() + 12, bytes.begin() + 16), "IHDR");
  EXPECT_EQ(BigEndian32(bytes, 16), static_cast<uint32_t>(kWidth));
  EXPECT_EQ(BigEndian32(bytes, 20), static_cast<uint32_t>(kHeight));

  Image image(path);
  ASSERT_TRUE(image.ok());
  EXPECT_EQ(image.width(), kWidth);
  EXPECT_EQ(image.height(), kHeight);
  EXPECT_EQ(image.Rgb(2, 2), 0xffffffu) << "the background is white";
}

TEST_F(PlotTest, EachSeriesIsDrawnInItsOwnColourAtItsHeight) {
  std::string path = Path("three.png");
  std::vector<PlotSeries> series = {
      Line("high", 0, 80, 100, 80),
      Line("low", 0, 20, 100, 20),
      PlotSeries{"rising", {{0, 0}, {50, 40}, {100, 60}}},
  };
  ASSERT_TRUE(WritePlotPng(path, series, kLabels).ok());

  Image image(path);
  ASSERT_TRUE(image.ok());
  ColourStats high = image.Find(kBlue);
  ColourStats low = image.Find(kOrange);
  ColourStats rising = image.Find(kGreen);
  // A legend swatch alone is under 100 pixels; a line across the chart is some 900.
  EXPECT_GT(high.count, 500);
  EXPECT_GT(low.count, 500);
  EXPECT_GT(rising.count, 500);
  EXPECT_EQ(image.Find(kRed).count, 0) << "no fourth series, so no fourth colour";
  // Rows grow downwards: the larger y is drawn higher up.
  EXPECT_LT(high.mean_row, low.mean_row);
  EXPECT_GT(high.mean_row, 30);
  EXPECT_LT(low.mean_row, kHeight - 60);
}

TEST_F(PlotTest, ZeroLineShowsOverTheAxis) {
  std::string path = Path("zero.png");
  ASSERT_TRUE(WritePlotPng(path, {Line("idle", 0, 0, 10, 0)}, PlotLabels{}).ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  EXPECT_GT(image.Find(kBlue).count, 500);
}

TEST_F(PlotTest, NegativeDataExtendsTheAxisBelowZero) {
  // Two lines at +5 and -5: with y from 0 they would be clipped; both must show, the negative
  // one lower down.
  std::string path = Path("negative.png");
  ASSERT_TRUE(
      WritePlotPng(path, {Line("up", 0, 5, 1, 5), Line("down", 0, -5, 1, -5)}, kLabels).ok());
  Image image(path);
  ASSERT_TRUE(image.ok());
  ColourStats up = image.Find(kBlue), down = image.Find(kOrange);
  EXPECT_GT(up.count, 500);
  EXPECT_GT(down.count, 500);
  EXPECT_LT(up.mean_row, down.mean_row);
}

TEST_F(PlotTest, HandlesOddButValidInput) {
  // A single point, a series with no points beside one with some, and more series than colours.
  EXPECT_TRUE(WritePlotPng(Path("one.png"), {PlotSeries{"only", {{3, 7}}}}, kLabels).ok());
  EXPECT_GT(Image(Path("one.png")).Find(kBlue).count, 10);
  EXPECT_TRUE(
      WritePlotPng(Path("mixed.png"), {PlotSeries{"empty", {}}, Line("b", 0, 1, 1, 2)}, kLabels)
          .ok());
  std::vector<PlotSeries> many;
  for (int i = 0; i < 12; ++i) many.push_back(Line("s" + std::to_string(i), 0, i, 1e6, 2 * i));
  EXPECT_TRUE(WritePlotPng(Path("many.png"), many, kLabels).ok());
  EXPECT_TRUE(ReadBytes(Path("many.png")).size() > 8);
}

TEST_F(PlotTest, NoSeriesIsAnErrorNamingThePath) {
  std::string path = Path("none.png");
  Status status = WritePlotPng(path, {}, kLabels);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(PlotTest, SeriesWithoutPointsIsAnErrorNamingThePath) {
  std::string path = Path("empty.png");
  Status status = WritePlotPng(path, {PlotSeries{"a", {}}, PlotSeries{"b", {}}}, kLabels);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(PlotTest, NonFiniteValueIsAnError) {
  std::string path = Path("nan.png");
  Status status = WritePlotPng(
      path, {PlotSeries{"bad", {{0, 1}, {1, std::numeric_limits<double>::quiet_NaN()}}}}, kLabels);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("bad"), std::string::npos) << status;
}

TEST_F(PlotTest, UnwritablePathIsAnErrorNamingThePath) {
  const std::string path = "/nonexistent-dir/x.png";
  Status status = WritePlotPng(path, {Line("a", 0, 0, 1, 1)}, kLabels);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
}

}  // namespace
}  // namespace gpufrac::sim
