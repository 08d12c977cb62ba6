// The program's SVG writer (cli/svg.h): escaping, well-formed documents, the heatmap's colour
// scale and panels, the line chart's geometry, round ticks, and atomic writes with clear errors.
#include "helpers.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../cli/svg.h"

using namespace seqgrad;
using namespace seqgrad::cli;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// Whether `name` (the text between '&' and ';') names an XML entity: a predefined one, or a
// decimal or hexadecimal character reference.
bool entity_name_ok(const std::string& name) {
    if (name == "amp" || name == "lt" || name == "gt" || name == "quot" || name == "apos") return true;
    if (name.size() < 2 || name[0] != '#') return false;
    const bool hex = name[1] == 'x';
    const std::string digits = name.substr(hex ? 2 : 1);
    if (digits.empty()) return false;
    for (const char c : digits)
        if (!(hex ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c))))
            return false;
    return true;
}

// Whether every '&' in `text` starts an entity.
bool entities_ok(const std::string& text) {
    for (size_t at = text.find('&'); at != std::string::npos; at = text.find('&', at + 1)) {
        const size_t semicolon = text.find(';', at);
        if (semicolon == std::string::npos || !entity_name_ok(text.substr(at + 1, semicolon - at - 1))) return false;
    }
    return true;
}

// A parse-free well-formedness check: the XML declaration, then tags that close in order under
// one <svg> root, no '<' inside attribute values, and '&' only as an entity. Returns the first
// problem found, or "".
std::string xml_problem(const std::string& document) {
    const std::string declaration = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    if (document.rfind(declaration, 0) != 0) return "no XML declaration";
    std::vector<std::string> open;
    bool had_root = false;
    size_t i = declaration.size();
    while (i < document.size()) {
        const size_t lt = document.find('<', i);
        const std::string content = document.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
        if (!entities_ok(content) || content.find('>') != std::string::npos) return "bad text: " + content;
        if (lt == std::string::npos) break;
        if (open.empty() && had_root) return "content after the root element";
        // The tag runs to the first '>' outside quotes.
        size_t gt = lt + 1;
        char quote = 0;
        for (; gt < document.size(); ++gt) {
            const char c = document[gt];
            if (quote) {
                if (c == quote) quote = 0;
                else if (c == '<') return "'<' in an attribute value";
            } else if (c == '"' || c == '\'') {
                quote = c;
            } else if (c == '>') {
                break;
            }
        }
        if (gt == document.size()) return "unterminated tag";
        const std::string tag = document.substr(lt + 1, gt - lt - 1);
        if (!entities_ok(tag)) return "bad entity in <" + tag + ">";
        if (tag.front() == '/') {
            if (open.empty() || open.back() != tag.substr(1)) return "unexpected <" + tag + ">";
            open.pop_back();
        } else {
            const std::string name = tag.substr(0, tag.find_first_of(" /"));
            if (!had_root && name != "svg") return "the root is <" + name + ">";
            had_root = true;
            if (tag.back() != '/') open.push_back(name);
        }
        i = gt + 1;
    }
    if (!open.empty()) return "<" + open.back() + "> is never closed";
    return had_root ? "" : "no root element";
}

// How bright a "#rrggbb" colour looks (Rec. 709 weights).
double luminance(const std::string& colour) {
    REQUIRE(colour.size() == 7);
    REQUIRE(colour[0] == '#');
    for (size_t i = 1; i < 7; ++i) REQUIRE(std::isxdigit(static_cast<unsigned char>(colour[i])));
    const auto channel = [&](int at) { return std::stoi(colour.substr(static_cast<size_t>(at), 2), nullptr, 16); };
    return 0.2126 * channel(1) + 0.7152 * channel(3) + 0.0722 * channel(5);
}

// The value of the attribute whose opening quote ends just before `begin`: the text up to the next '"'.
std::string quoted_from(const std::string& text, size_t begin) {
    const size_t end = text.find('"', begin);
    REQUIRE(end != std::string::npos);
    return text.substr(begin, end - begin);
}

// Every (x, y) a chart draws: polyline vertices and circle centres.
std::vector<svg::Point> drawn_points(const std::string& document) {
    std::vector<svg::Point> points;
    const std::string polyline = "points=\"";
    for (size_t at = document.find(polyline); at != std::string::npos; at = document.find(polyline, at + 1)) {
        std::istringstream pairs(quoted_from(document, at + polyline.size()));
        for (std::string pair; pairs >> pair;) {
            const size_t comma = pair.find(',');
            points.push_back({std::stod(pair.substr(0, comma)), std::stod(pair.substr(comma + 1))});
        }
    }
    const std::string circle = "<circle cx=\"", then_cy = "\" cy=\"";
    for (size_t at = document.find(circle); at != std::string::npos; at = document.find(circle, at + 1)) {
        const std::string cx = quoted_from(document, at + circle.size());
        const size_t cy_at = at + circle.size() + cx.size();
        REQUIRE(document.compare(cy_at, then_cy.size(), then_cy) == 0);
        points.push_back({std::stod(cx), std::stod(quoted_from(document, cy_at + then_cy.size()))});
    }
    return points;
}

size_t count_of(const std::string& text, const std::string& part) {
    size_t n = 0;
    for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
}

std::string read_all(const fs::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("svg escapes the five XML special characters and nothing else", "[svg]") {
    CHECK(svg::escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
    CHECK(svg::escape("ʃ → é") == "ʃ → é");
    CHECK(svg::escape("") == "");
}

TEST_CASE("svg documents are well-formed whatever their text says", "[svg]") {
    svg::Document doc(100, 50);
    doc.text({10, 20}, "<script>alert('x') & \"y\"</script>", 12, svg::Anchor::middle, -90, true);
    doc.rect(0, 0, 10, 10, "#ffffff", "#000000", "tip <b> & 'c'");
    doc.line({0, 0}, {10, 10}, "red", 1, "4 2");
    doc.polyline({{0, 0}, {5, 5.125}, {2.5, 1.0 / 3}}, "blue");
    doc.circle({3, 3}, 2, "green");
    const std::string text = doc.str();
    INFO(text);
    CHECK(xml_problem(text).empty());
    CHECK(text.find("<script") == std::string::npos);
    CHECK(text.find("&lt;script&gt;alert(&apos;x&apos;) &amp; &quot;y&quot;&lt;/script&gt;") != std::string::npos);
    CHECK(text.find("<title>tip &lt;b&gt; &amp; &apos;c&apos;</title>") != std::string::npos);
    CHECK(text.find("points=\"0,0 5,5.12 2.5,0.33\"") != std::string::npos);  // at most two decimals
    CHECK(text.find("transform=\"rotate(-90 10 20)\"") != std::string::npos);
    // The checker itself notices what it should.
    CHECK_FALSE(xml_problem("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg><g></svg>").empty());
    CHECK_FALSE(xml_problem("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg>a & b</svg>").empty());
}

TEST_CASE("heat colours darken steadily as values grow", "[svg]") {
    std::string previous = svg::heat_colour(0.0);
    for (int i = 1; i <= 100; ++i) {
        const std::string colour = svg::heat_colour(i / 100.0);
        INFO(i << ": " << previous << " -> " << colour);
        for (int at : {1, 3, 5})  // no channel ever gets brighter
            CHECK(std::stoi(colour.substr(static_cast<size_t>(at), 2), nullptr, 16) <=
                  std::stoi(previous.substr(static_cast<size_t>(at), 2), nullptr, 16));
        CHECK(luminance(colour) <= luminance(previous));
        previous = colour;
    }
    CHECK(luminance(svg::heat_colour(1.0)) < luminance(svg::heat_colour(0.5)) - 50);
    CHECK(luminance(svg::heat_colour(0.5)) < luminance(svg::heat_colour(0.0)) - 50);
    CHECK(svg::heat_colour(-3) == svg::heat_colour(0));  // clamped
    CHECK(svg::heat_colour(7) == svg::heat_colour(1));
    CHECK(svg::heat_colour(std::nan("")) == "#cccccc");
}

TEST_CASE("heatmaps draw one cell per value, titled panels and escaped labels", "[svg]") {
    svg::HeatmapFigure figure;
    figure.title = "\"cat\" \u2192 K AE T";
    figure.column_labels = {"c", "a", "t", "<unk>"};
    figure.row_labels = {"K", "AE", "T"};
    const std::vector<std::vector<double>> values = {{1, 0, 0, 0}, {0, 0.25, 0.5, 0.25}, {0, 0.1, 0.3, 0.6}};
    figure.panels = {{"layer 1 head 1", values}, {"layer 1 head 2", values}};
    figure.panels_per_row = 2;
    const std::string text = svg::heatmap_svg(figure);
    INFO(text);
    CHECK(xml_problem(text).empty());
    CHECK(text.find(">layer 1 head 1</text>") != std::string::npos);
    CHECK(text.find(">layer 1 head 2</text>") != std::string::npos);
    CHECK(text.find(">&lt;unk&gt;</text>") != std::string::npos);
    CHECK(text.find("&quot;cat&quot; \u2192 K AE T") != std::string::npos);
    CHECK(count_of(text, "<title>") == 2 * 3 * 4);  // a cell per value, each with its value on hover
    CHECK(text.find("<title>output AE, source t: 0.500</title>") != std::string::npos);

    // Within a row, a larger weight is a darker cell.
    const std::string fill = "fill=\"", row_t = "\"><title>output T, source ";
    std::vector<double> row_luminance;
    for (size_t at = text.find(row_t); at != std::string::npos; at = text.find(row_t, at + 1)) {
        const size_t colour_at = at - 7;  // "#rrggbb"
        REQUIRE(text.compare(colour_at - fill.size(), fill.size(), fill) == 0);
        row_luminance.push_back(luminance(text.substr(colour_at, 7)));
    }
    REQUIRE(row_luminance.size() == 8);                                             // row "T" in both panels
    for (size_t c = 1; c < 4; ++c) CHECK(row_luminance[c] < row_luminance[c - 1]);  // 0 < 0.1 < 0.3 < 0.6

    figure.panels[1].values.pop_back();
    CHECK_THROWS_WITH(svg::heatmap_svg(figure), Contains("panel \"layer 1 head 2\" has 2 rows for 3 row labels"));
    figure.panels.clear();
    CHECK_THROWS_WITH(svg::heatmap_svg(figure), Contains("no panels"));
}

TEST_CASE("line charts put every point inside the plot area, with axes, ticks and a legend", "[svg]") {
    svg::LineChart chart;
    chart.title = "Dev WER against training time";
    chart.x_label = "training time (minutes)";
    chart.y_label = "dev WER (%)";
    chart.series = {{"transformer", {{0, 100}, {1.5, 40}, {3, 22.5}}},
                    {"attn_seq2seq & co", {{0.5, 80}, {2, 30}, {std::nan(""), 5}}}};
    const svg::ChartLayout layout = svg::chart_layout(chart);
    CHECK(layout.x_ticks == std::vector<double>{0, 1, 2, 3});
    CHECK(layout.y_ticks == std::vector<double>{0, 20, 40, 60, 80, 100});
    CHECK(layout.x_pixel(0) == Approx(layout.plot_left));
    CHECK(layout.x_pixel(3) == Approx(layout.plot_right));
    CHECK(layout.y_pixel(0) == Approx(layout.plot_bottom));
    CHECK(layout.y_pixel(100) == Approx(layout.plot_top));

    const std::string text = svg::line_chart_svg(chart);
    INFO(text);
    CHECK(xml_problem(text).empty());
    const std::vector<svg::Point> points = drawn_points(text);
    REQUIRE(points.size() == 3 + 2 + 3 + 2);  // vertices and markers; the NaN point is left out
    for (const auto& [x, y] : points) {
        CHECK(x >= layout.plot_left - 0.01);
        CHECK(x <= layout.plot_right + 0.01);
        CHECK(y >= layout.plot_top - 0.01);
        CHECK(y <= layout.plot_bottom + 0.01);
    }
    CHECK(points.front().first == Approx(layout.x_pixel(0)).margin(0.01));
    CHECK(points.front().second == Approx(layout.y_pixel(100)).margin(0.01));
    for (const char* label : {">Dev WER against training time<", ">training time (minutes)<", ">dev WER (%)<",
                              ">transformer<", ">attn_seq2seq &amp; co<", ">2<", ">100<", ">0<"})
        CHECK(text.find(label) != std::string::npos);
    CHECK(count_of(text, "<polyline") == 2);

    // No points at all still gives axes (0 to 1), not a division by zero.
    const svg::LineChart empty{"nothing yet", "x", "y", {{"run", {}}}};
    CHECK(xml_problem(svg::line_chart_svg(empty)).empty());
    CHECK(svg::chart_layout(empty).y_max == 1);
}

TEST_CASE("nice ticks are round numbers covering the range", "[svg]") {
    CHECK(svg::nice_ticks(0, 37) == std::vector<double>{0, 10, 20, 30, 40});
    CHECK(svg::nice_ticks(0, 100) == std::vector<double>{0, 20, 40, 60, 80, 100});
    const std::vector<double> small = svg::nice_ticks(0, 0.8);
    REQUIRE(small.size() == 5);
    CHECK(small[1] == Approx(0.2));
    CHECK(small.back() == Approx(0.8));
    CHECK(svg::nice_ticks(5, 5).front() <= 5);  // an empty range still gets an axis
    CHECK(svg::nice_ticks(5, 5).back() >= 6);
}

TEST_CASE("svg files are written atomically and unwritable paths are clear errors", "[svg]") {
    const seqgrad::testing::TempDir dir("svg");
    const fs::path file = dir.path / "picture.svg";
    svg::write_file(file.string(), "first");
    svg::write_file(file.string(), "second");
    CHECK(read_all(file) == "second");
    size_t entries = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++entries;
    CHECK(entries == 1);  // no temporary file left behind

    const std::string missing = (dir.path / "no" / "such" / "dir" / "f.svg").string();
    CHECK_THROWS_WITH(svg::write_file(missing, "x"), Contains("cannot write " + missing) && Contains("No such file"));
    // Over a directory: the rename fails, the directory stays, and the temporary file is removed.
    fs::create_directories(dir.path / "taken");
    CHECK_THROWS_WITH(svg::write_file((dir.path / "taken").string(), "x"), Contains("cannot write"));
    CHECK(fs::is_directory(dir.path / "taken"));
    entries = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++entries;
    CHECK(entries == 2);
    CHECK_THROWS_WITH(svg::write_file("", "x"), Contains("no output path"));
}
