// SVG pictures: the document writer, the atomic file write, attention heatmaps and line charts.
#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "seqgrad/core/error.h"
#include "seqgrad/core/files.h"

namespace seqgrad::cli::svg {
namespace {

// A coordinate or size with at most two decimals and no trailing zeros: "12", "12.5".
std::string number(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2f", value);
    std::string text = buffer;
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
    return text == "-0" ? "0" : text;
}

const char* anchor_name(Anchor anchor) {
    switch (anchor) {
        case Anchor::middle: return "middle";
        case Anchor::end: return "end";
        default: return "start";
    }
}

// Roughly how wide a label is in a sans-serif font of `size` pixels: enough to lay out margins.
double text_width(std::string_view text, double size) {
    size_t characters = 0;
    for (unsigned char c : text) characters += (c & 0xC0) != 0x80;  // count UTF-8 code points
    return static_cast<double>(characters) * size * 0.6;
}

double widest(const std::vector<std::string>& labels, double size) {
    double width = 0;
    for (const std::string& label : labels) width = std::max(width, text_width(label, size));
    return width;
}

// A tick's label with as many decimals as the step between ticks needs.
std::string tick_label(double value, double step) {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

// Tableau's ten colours: distinct from one another, and readable on white.
const char* series_colour(size_t i) {
    static const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                           "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
    return kPalette[i % std::size(kPalette)];
}

}  // namespace

std::string escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&apos;"; break;
            default: out += c;
        }
    }
    return out;
}

// ---- the document ----

namespace {

// ` name="value"` for each pair, the values escaped.
std::string attributes(std::initializer_list<std::pair<std::string_view, std::string>> pairs) {
    std::string out;
    for (const auto& [name, value] : pairs) {
        out += ' ';
        out += name;
        out += "=\"";
        out += escape(value);
        out += '"';
    }
    return out;
}

}  // namespace

Document::Document(double width, double height) : width_(width), height_(height) {}

void Document::rect(double x, double y, double width, double height, const std::string& fill, const std::string& stroke,
                    const std::string& tooltip) {
    body_ += "<rect";
    body_ += attributes(
        {{"x", number(x)}, {"y", number(y)}, {"width", number(width)}, {"height", number(height)}, {"fill", fill}});
    if (stroke != "none") body_ += attributes({{"stroke", stroke}});
    if (tooltip.empty()) {
        body_ += "/>\n";
    } else {
        body_ += "><title>";
        body_ += escape(tooltip);
        body_ += "</title></rect>\n";
    }
}

void Document::line(Point from, Point to, const std::string& stroke, double stroke_width, const std::string& dash) {
    body_ += "<line";
    body_ += attributes({{"x1", number(from.first)},
                         {"y1", number(from.second)},
                         {"x2", number(to.first)},
                         {"y2", number(to.second)},
                         {"stroke", stroke},
                         {"stroke-width", number(stroke_width)}});
    if (!dash.empty()) body_ += attributes({{"stroke-dasharray", dash}});
    body_ += "/>\n";
}

void Document::polyline(const std::vector<Point>& points, const std::string& stroke, double stroke_width) {
    std::string coordinates;
    for (const Point& p : points) {
        if (!coordinates.empty()) coordinates += ' ';
        coordinates += number(p.first);
        coordinates += ',';
        coordinates += number(p.second);
    }
    body_ += "<polyline";
    body_ += attributes({{"points", coordinates},
                         {"fill", "none"},
                         {"stroke", stroke},
                         {"stroke-width", number(stroke_width)},
                         {"stroke-linejoin", "round"}});
    body_ += "/>\n";
}

void Document::circle(Point centre, double radius, const std::string& fill) {
    body_ += "<circle";
    body_ += attributes(
        {{"cx", number(centre.first)}, {"cy", number(centre.second)}, {"r", number(radius)}, {"fill", fill}});
    body_ += "/>\n";
}

void Document::text(Point at, std::string_view text, double size, Anchor anchor, double rotate_degrees, bool bold) {
    body_ += "<text";
    body_ += attributes({{"x", number(at.first)}, {"y", number(at.second)}, {"font-size", number(size)}});
    if (anchor != Anchor::start) body_ += attributes({{"text-anchor", anchor_name(anchor)}});
    if (rotate_degrees != 0)
        body_ += attributes({{"transform", "rotate(" + number(rotate_degrees) + " " + number(at.first) + " " +
                                               number(at.second) + ")"}});
    if (bold) body_ += attributes({{"font-weight", "bold"}});
    body_ += '>';
    body_ += escape(text);
    body_ += "</text>\n";
}

std::string Document::str() const {
    const std::string w = number(width_), h = number(height_);
    std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg";
    out += attributes({{"xmlns", "http://www.w3.org/2000/svg"},
                       {"width", w},
                       {"height", h},
                       {"viewBox", "0 0 " + w + " " + h},
                       {"font-family", "sans-serif"}});
    out += ">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    out += body_;
    out += "</svg>\n";
    return out;
}

// ---- files ----

void write_file(const std::string& path, const std::string& contents) {
    check(!path.empty(), "svg", "no output path given");
    write_file_atomically(path, contents);
}

// ---- heatmaps ----

std::string heat_colour(double value) {
    if (std::isnan(value)) return "#cccccc";
    const double t = std::clamp(value, 0.0, 1.0);
    // Three stops of ColorBrewer's "Blues"; each channel falls from one stop to the next.
    struct Rgb {
        double r, g, b;
    };
    static const Rgb kStops[] = {{247, 251, 255}, {107, 174, 214}, {8, 48, 107}};
    const double position = t * 2;
    const int segment = std::min(1, static_cast<int>(position));
    const double f = position - segment;
    const Rgb& a = kStops[segment];
    const Rgb& b = kStops[segment + 1];
    char buffer[8];
    std::snprintf(buffer, sizeof buffer, "#%02x%02x%02x", static_cast<int>(std::lround(a.r + (b.r - a.r) * f)),
                  static_cast<int>(std::lround(a.g + (b.g - a.g) * f)),
                  static_cast<int>(std::lround(a.b + (b.b - a.b) * f)));
    return buffer;
}

std::string heatmap_svg(const HeatmapFigure& figure) {
    const size_t rows = figure.row_labels.size(), columns = figure.column_labels.size();
    check(!figure.panels.empty(), "heatmap", "no panels to draw");
    check(rows > 0 && columns > 0, "heatmap", "needs at least one row and one column, got ", rows, " and ", columns);
    for (const HeatmapPanel& panel : figure.panels) {
        check(panel.values.size() == rows, "heatmap", "panel \"", panel.title, "\" has ", panel.values.size(),
              " rows for ", rows, " row labels");
        for (const auto& row : panel.values)
            check(row.size() == columns, "heatmap", "panel \"", panel.title, "\" has a row of ", row.size(),
                  " values for ", columns, " column labels");
    }

    // Cells shrink for long sequences so that a panel stays around 400 pixels at most.
    const double cell = std::clamp(400.0 / static_cast<double>(std::max(rows, columns)), 10.0, 28.0);
    const double label_size = std::min(12.0, cell * 0.6);
    const double row_label_width = widest(figure.row_labels, label_size) + 10;
    const double title_height = 20, column_label_height = label_size + 8, gap = 28;
    const double grid_width = cell * static_cast<double>(columns), grid_height = cell * static_cast<double>(rows);
    double panel_width = row_label_width + grid_width + gap;
    for (const HeatmapPanel& panel : figure.panels)
        panel_width = std::max(panel_width, text_width(panel.title, 12) + gap);
    const double panel_height = title_height + column_label_height + grid_height + gap;
    const size_t per_row = std::max<size_t>(1, std::min(figure.panels_per_row, figure.panels.size()));
    const size_t panel_rows = (figure.panels.size() + per_row - 1) / per_row;

    const double margin = 16, header = 58;
    const double scale_width = std::max(70.0, text_width(figure.scale_label, 11) + 30);
    const double width = std::max(margin * 2 + panel_width * static_cast<double>(per_row) + scale_width,
                                  text_width(figure.title, 16) + 2 * margin);
    const double scale_height = std::min(200.0, std::max(80.0, grid_height));
    const double height = std::max(header + panel_height * static_cast<double>(panel_rows), header + scale_height + 40);
    Document doc(width, height);
    doc.text({margin, 26}, figure.title, 16, Anchor::start, 0, true);
    doc.text({margin, 46}, "columns: " + figure.column_axis + ", rows: " + figure.row_axis, 12);

    for (size_t p = 0; p < figure.panels.size(); ++p) {
        const HeatmapPanel& panel = figure.panels[p];
        const double left = margin + panel_width * static_cast<double>(p % per_row);
        const double top = header + panel_height * static_cast<double>(p / per_row);
        const double grid_left = left + row_label_width, grid_top = top + title_height + column_label_height;
        doc.text({grid_left, top + 14}, panel.title, 12, Anchor::start, 0, true);
        for (size_t c = 0; c < columns; ++c)
            doc.text({grid_left + (static_cast<double>(c) + 0.5) * cell, grid_top - 6}, figure.column_labels[c],
                     label_size, Anchor::middle);
        for (size_t r = 0; r < rows; ++r) {
            const double y = grid_top + static_cast<double>(r) * cell;
            doc.text({grid_left - 6, y + cell / 2 + label_size * 0.35}, figure.row_labels[r], label_size, Anchor::end);
            for (size_t c = 0; c < columns; ++c) {
                const double value = panel.values[r][c];
                char shown[32];
                std::snprintf(shown, sizeof shown, "%.3f", value);
                doc.rect(grid_left + static_cast<double>(c) * cell, y, cell, cell, heat_colour(value), "none",
                         figure.row_axis + " " + figure.row_labels[r] + ", " + figure.column_axis + " " +
                             figure.column_labels[c] + ": " + shown);
            }
        }
        doc.rect(grid_left, grid_top, grid_width, grid_height, "none", "#888888");
    }

    // The colour scale, shared by every panel: values 0 (bottom) to 1 (top).
    const double scale_left = width - scale_width + 20, scale_top = header + 20, bar_width = 16;
    const int segments = 50;
    for (int i = 0; i < segments; ++i) {
        const double value = 1.0 - (i + 0.5) / segments;
        doc.rect(scale_left, scale_top + scale_height * i / segments, bar_width, scale_height / segments + 0.5,
                 heat_colour(value));
    }
    doc.rect(scale_left, scale_top, bar_width, scale_height, "none", "#888888");
    for (double value : {0.0, 0.5, 1.0}) {
        const double y = scale_top + scale_height * (1.0 - value);
        doc.line({scale_left + bar_width, y}, {scale_left + bar_width + 4, y}, "#444444");
        doc.text({scale_left + bar_width + 7, y + 4}, tick_label(value, 0.5), 11);
    }
    doc.text({scale_left, scale_top - 8}, figure.scale_label, 11);
    return doc.str();
}

// ---- line charts ----

std::vector<double> nice_ticks(double low, double high, int count) {
    check(std::isfinite(low) && std::isfinite(high), "nice_ticks", "the range must be finite, got ", low, " to ", high);
    if (!(high > low)) high = low + 1;
    const double raw_step = (high - low) / std::max(1, count);
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw_step)));
    const double residual = raw_step / magnitude;
    const double step = magnitude * (residual <= 1 ? 1 : residual <= 2 ? 2 : residual <= 5 ? 5 : 10);
    const double first = std::floor(low / step + 1e-9) * step;
    const long steps = std::lround(std::ceil(high / step - 1e-9) - first / step);
    std::vector<double> ticks;
    for (long i = 0; i <= steps; ++i) {
        const double tick = first + static_cast<double>(i) * step;
        ticks.push_back(std::fabs(tick) < step * 1e-9 ? 0.0 : tick);
    }
    return ticks;
}

double ChartLayout::x_pixel(double x) const {
    return plot_left + (x - x_min) / (x_max - x_min) * (plot_right - plot_left);
}

double ChartLayout::y_pixel(double y) const {
    return plot_bottom - (y - y_min) / (y_max - y_min) * (plot_bottom - plot_top);
}

ChartLayout chart_layout(const LineChart& chart) {
    ChartLayout layout;
    double x_high = 0, y_high = 0;
    std::vector<std::string> labels;
    for (const Series& series : chart.series) {
        labels.push_back(series.label);
        for (const auto& [x, y] : series.points)
            if (std::isfinite(x) && std::isfinite(y)) {
                x_high = std::max(x_high, x);
                y_high = std::max(y_high, y);
            }
    }
    layout.x_ticks = nice_ticks(0, x_high > 0 ? x_high : 1);
    layout.y_ticks = nice_ticks(0, y_high > 0 ? y_high : 1);
    layout.x_min = layout.x_ticks.front();
    layout.x_max = layout.x_ticks.back();
    layout.y_min = layout.y_ticks.front();
    layout.y_max = layout.y_ticks.back();
    const double legend_width = widest(labels, 12) + 44;
    layout.width = std::max(760.0, 480 + legend_width);
    layout.plot_left = 72;
    layout.plot_top = 52;
    layout.plot_right = layout.width - legend_width - 16;
    layout.plot_bottom = layout.height - 62;
    return layout;
}

std::string line_chart_svg(const LineChart& chart) {
    const ChartLayout layout = chart_layout(chart);
    Document doc(layout.width, layout.height);
    doc.text({layout.width / 2, 28}, chart.title, 16, Anchor::middle, 0, true);

    const double x_step = layout.x_ticks.size() > 1 ? layout.x_ticks[1] - layout.x_ticks[0] : 1;
    const double y_step = layout.y_ticks.size() > 1 ? layout.y_ticks[1] - layout.y_ticks[0] : 1;
    for (double tick : layout.y_ticks) {
        const double y = layout.y_pixel(tick);
        doc.line({layout.plot_left, y}, {layout.plot_right, y}, "#e4e4e4");
        doc.line({layout.plot_left - 5, y}, {layout.plot_left, y}, "#333333");
        doc.text({layout.plot_left - 8, y + 4}, tick_label(tick, y_step), 11, Anchor::end);
    }
    for (double tick : layout.x_ticks) {
        const double x = layout.x_pixel(tick);
        doc.line({x, layout.plot_top}, {x, layout.plot_bottom}, "#e4e4e4");
        doc.line({x, layout.plot_bottom}, {x, layout.plot_bottom + 5}, "#333333");
        doc.text({x, layout.plot_bottom + 19}, tick_label(tick, x_step), 11, Anchor::middle);
    }
    doc.line({layout.plot_left, layout.plot_top}, {layout.plot_left, layout.plot_bottom}, "#333333");
    doc.line({layout.plot_left, layout.plot_bottom}, {layout.plot_right, layout.plot_bottom}, "#333333");
    doc.text({(layout.plot_left + layout.plot_right) / 2, layout.plot_bottom + 44}, chart.x_label, 13, Anchor::middle);
    doc.text({24, (layout.plot_top + layout.plot_bottom) / 2}, chart.y_label, 13, Anchor::middle, -90);

    for (size_t i = 0; i < chart.series.size(); ++i) {
        const Series& series = chart.series[i];
        const std::string colour = series_colour(i);
        std::vector<Point> pixels;
        for (const auto& [x, y] : series.points)
            if (std::isfinite(x) && std::isfinite(y)) pixels.push_back({layout.x_pixel(x), layout.y_pixel(y)});
        if (pixels.size() > 1) doc.polyline(pixels, colour);
        for (const Point& p : pixels) doc.circle(p, 3, colour);

        const double legend_y = layout.plot_top + 12 + 22 * static_cast<double>(i);
        doc.line({layout.plot_right + 16, legend_y - 4}, {layout.plot_right + 40, legend_y - 4}, colour, 3);
        doc.text({layout.plot_right + 46, legend_y}, series.label, 12);
    }
    return doc.str();
}

}  // namespace seqgrad::cli::svg
