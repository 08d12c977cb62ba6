// SVG pictures for the seqgrad program: a small document writer (shapes and escaped text), an
// atomic file write, and the two figures it draws: attention heatmaps (`seqgrad attention`) and
// training curves (`seqgrad curves`). No dependencies beyond the standard library.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seqgrad::cli::svg {

// `text` with & < > " ' escaped, safe inside SVG text and attribute values.
std::string escape(std::string_view text);

using Point = std::pair<double, double>;  // (x, y), in pixels once in a Document

enum class Anchor { start, middle, end };

// An SVG document built element by element; str() gives the whole file. Colours are CSS colour
// strings ("#08306b", "none"). Every text passes through escape().
class Document {
public:
    Document(double width, double height);

    // `tooltip`, when given, becomes the element's <title> (shown when the pointer rests on it).
    void rect(double x, double y, double width, double height, const std::string& fill,
              const std::string& stroke = "none", const std::string& tooltip = "");
    void line(Point from, Point to, const std::string& stroke, double stroke_width = 1.0, const std::string& dash = "");
    void polyline(const std::vector<Point>& points, const std::string& stroke, double stroke_width = 2.0);
    void circle(Point centre, double radius, const std::string& fill);
    // Text with its baseline at `at`, turned by `rotate_degrees` about that point.
    void text(Point at, std::string_view text, double size = 12, Anchor anchor = Anchor::start,
              double rotate_degrees = 0, bool bold = false);

    std::string str() const;

private:
    double width_, height_;
    std::string body_;
};

// Writes `contents` to `path` atomically (core's write_file_atomically): a reader never sees half
// a file. Error naming the path (and the system's reason) if it cannot be written; `path` is then
// untouched.
void write_file(const std::string& path, const std::string& contents);

// ---- heatmaps ----

// The colour of a value in [0, 1] (clamped): from near-white at 0 to dark blue at 1, with every
// channel falling, so a darker cell always means a larger value. Grey for NaN.
std::string heat_colour(double value);

struct HeatmapPanel {
    std::string title;                        // "layer 1 head 2"
    std::vector<std::vector<double>> values;  // [rows][columns], in [0, 1]
};

// Panels that share their labels: columns along x, rows down y, one colour scale for all.
struct HeatmapFigure {
    std::string title;
    std::vector<std::string> column_labels;  // e.g. the source letters
    std::vector<std::string> row_labels;     // e.g. the output phones
    std::string column_axis = "source";
    std::string row_axis = "output";
    std::string scale_label = "weight";  // the colour scale's caption
    std::vector<HeatmapPanel> panels;
    size_t panels_per_row = 4;
};

// Error if a panel's values do not match the labels.
std::string heatmap_svg(const HeatmapFigure& figure);

// ---- line charts ----

struct Series {
    std::string label;
    std::vector<Point> points;  // in data units; non-finite values are left out
};

struct LineChart {
    std::string title;
    std::string x_label;
    std::string y_label;
    std::vector<Series> series;
};

// Where a chart puts things: the plot area in pixels, the axes' ranges and ticks in data units.
struct ChartLayout {
    double width = 760, height = 460;
    double plot_left = 0, plot_top = 0, plot_right = 0, plot_bottom = 0;
    double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
    std::vector<double> x_ticks, y_ticks;

    double x_pixel(double x) const;
    double y_pixel(double y) const;
};

// The axes start at 0 and end at a round value above the largest point.
ChartLayout chart_layout(const LineChart& chart);
std::string line_chart_svg(const LineChart& chart);

// About `count` round tick values (steps of 1, 2 or 5 times a power of ten) from `low` or below
// to `high` or above.
std::vector<double> nice_ticks(double low, double high, int count = 5);

}  // namespace seqgrad::cli::svg
