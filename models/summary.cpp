// A model's summary: the traced forward pass named by module paths, parameter counts from the
// module tree, and the table `seqgrad summary` prints.
#include "seqgrad/models/summary.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <typeinfo>
#include <unordered_map>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/nn/trace.h"

namespace seqgrad::models {
namespace {

const char* kOp = "summary";

// Every module under `root` by address, named by its first path (depth-first, registration order).
std::unordered_map<const nn::Module*, std::string> module_paths(const nn::Module& root) {
    std::unordered_map<const nn::Module*, std::string> paths;
    std::function<void(const nn::Module&, const std::string&)> visit =
        [&](const nn::Module& m, const std::string& path) {
        if (!paths.emplace(&m, path).second) return;  // already named by an earlier path
        for (const auto& [name, child] : m.named_children()) visit(*child, path.empty() ? name : path + "." + name);
    };
    visit(root, "");
    return paths;
}

// Names each report by its module's path as it arrives, so the modules need not outlive the pass.
class PathRecorder : public nn::TraceRecorder {
public:
    explicit PathRecorder(const nn::Module& root) : paths_(module_paths(root)) {}

    void record(const nn::Module& module, std::string_view step, const Tensor& value) override {
        const auto found = paths_.find(&module);
        outputs.push_back({found != paths_.end() ? found->second : "(outside the model)", module_type_name(module),
                           std::string(step), value.shape()});
    }

    std::vector<TracedOutput> outputs;

private:
    std::unordered_map<const nn::Module*, std::string> paths_;
};

// A module list's children are named 0, 1, ... (nn::ModuleList, PyTorch's nn.ModuleList).
bool is_index(const std::string& name) {
    return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_module_list(const nn::Module& m) {
    const auto& children = m.named_children();
    for (size_t i = 0; i < children.size(); ++i)
        if (children[i].first != std::to_string(i)) return false;
    return !children.empty();
}

// "6 x EncoderLayer" for a list of six EncoderLayers, else the class.
std::string describe_type(const nn::Module& m) {
    if (!is_module_list(m)) return module_type_name(m);
    const auto& children = m.named_children();
    const std::string item_type = module_type_name(*children.front().second);
    const bool same = std::all_of(children.begin(), children.end(),
                                  [&](const auto& c) { return module_type_name(*c.second) == item_type; });
    return same ? std::to_string(children.size()) + " x " + item_type : module_type_name(m);
}

std::vector<ModuleInfo> module_tree(const nn::Module& root) {
    // Own parameters by owner: a parameter's dotted name is its module's path, a dot, its name.
    std::map<std::string, int64_t> own;
    for (const auto& [name, p] : root.named_parameters()) {
        const size_t dot = name.rfind('.');
        own[dot == std::string::npos ? "" : name.substr(0, dot)] += p.numel();
    }
    std::vector<ModuleInfo> modules;
    std::set<const nn::Module*> seen;
    std::function<void(const nn::Module&, const std::string&)> visit =
        [&](const nn::Module& m, const std::string& path) {
        if (!seen.insert(&m).second) return;
        modules.push_back({path, describe_type(m), own.count(path) ? own.at(path) : 0, m.num_parameters()});
        for (const auto& [name, child] : m.named_children()) visit(*child, path.empty() ? name : path + "." + name);
    };
    visit(root, "");
    return modules;
}

// Ordinary token ids (never <pad>, <s>, </s>), spread over the vocabulary; `first` (if >= 0) in
// column 0.
IntTensor dummy_ids(int64_t batch, int64_t len, int64_t vocab, int64_t first) {
    std::vector<int64_t> ids(static_cast<size_t>(batch * len));
    const int64_t ordinary = vocab - kUnk;  // ids kUnk .. vocab - 1
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t t = 0; t < len; ++t)
            ids[static_cast<size_t>(b * len + t)] =
                t == 0 && first >= 0 ? first : (ordinary > 0 ? kUnk + (b * 31 + t * 7) % ordinary : kUnk);
    return IntTensor::from_vector(ids, {batch, len});
}

// Puts the model in evaluation mode and back into the mode it was in.
class EvaluationMode {
public:
    explicit EvaluationMode(nn::Module& module) : module_(module), was_training_(module.is_training()) {
        module_.eval();
    }
    ~EvaluationMode() { module_.train(was_training_); }
    EvaluationMode(const EvaluationMode&) = delete;
    EvaluationMode& operator=(const EvaluationMode&) = delete;

private:
    nn::Module& module_;
    bool was_training_;
};

// ---- the table ----

std::string with_commas(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

std::string shape_text(const Shape& shape) {
    std::ostringstream out;
    out << shape;
    return out.str();
}

struct Row {
    std::string path, type, step, output, parameters;
};

// The path up to the first list index ("encoder_layers.3" for "encoder_layers.3.attention.wq"),
// or "" when the path is in no module list.
std::string list_item_of(const std::string& path) {
    size_t start = 0;
    while (start < path.size()) {
        const size_t dot = path.find('.', start);
        const size_t end = dot == std::string::npos ? path.size() : dot;
        if (start > 0 && is_index(path.substr(start, end - start))) return path.substr(0, end);
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return "";
}

// What a list item computed, with its own path removed: equal for items that compute alike.
std::vector<TracedOutput> relative_outputs(std::vector<TracedOutput> outputs, const std::string& item) {
    for (TracedOutput& o : outputs) o.path = o.path.substr(item.size());
    return outputs;
}

// The outputs in runs of one list item each ("" outside lists).
std::vector<std::pair<std::string, std::vector<TracedOutput>>> runs_by_item(const std::vector<TracedOutput>& outputs) {
    std::vector<std::pair<std::string, std::vector<TracedOutput>>> runs;
    for (const TracedOutput& o : outputs) {
        const std::string item = list_item_of(o.path);
        if (runs.empty() || runs.back().first != item) runs.push_back({item, {}});
        runs.back().second.push_back(o);
    }
    return runs;
}

// The table's rows before repeats are folded.
std::vector<Row> table_rows(const ModelSummary& summary, bool every_layer) {
    std::map<std::string, const ModuleInfo*> module_at;
    for (const ModuleInfo& m : summary.modules) module_at[m.path] = &m;
    auto own_parameters = [&](const std::string& path) {
        const auto found = module_at.find(path);
        return found == module_at.end() ? std::string() : with_commas(found->second->own_parameters);
    };

    std::vector<Row> rows;
    std::set<std::string> counted;  // a module's parameters are shown on its first row only
    auto add_outputs = [&](const std::vector<TracedOutput>& outputs) {
        for (const TracedOutput& o : outputs) {
            rows.push_back({o.path.empty() ? "(model)" : o.path, o.type, o.step, shape_text(o.shape),
                            counted.insert(o.path).second ? own_parameters(o.path) : ""});
        }
    };

    // A folded line stands for items first..last of a list that repeat item 0's outputs.
    struct Fold {
        std::string list;
        int64_t first = 0, last = 0, parameters = 0;
        std::string type;
    };
    std::optional<Fold> fold;
    auto flush_fold = [&] {
        if (!fold) return;
        const int64_t count = fold->last - fold->first + 1;
        const std::string range = std::to_string(fold->first) + (count > 1 ? "-" + std::to_string(fold->last) : "");
        rows.push_back({fold->list + "." + range, std::to_string(count) + " x " + fold->type, "",
                        "as " + fold->list + ".0", with_commas(fold->parameters)});
        fold.reset();
    };

    std::map<std::string, std::vector<TracedOutput>> first_item_outputs;  // by list: item 0's, relative
    std::string previous_item;
    for (const auto& [item, outputs] : runs_by_item(summary.outputs)) {
        const size_t dot = item.rfind('.');
        const std::string list = item.empty() ? "" : item.substr(0, dot);
        const int64_t index = item.empty() ? -1 : std::stoll(item.substr(dot + 1));
        const std::vector<TracedOutput> relative = relative_outputs(outputs, item);
        if (index == 0) first_item_outputs[list] = relative;
        // Fold item k when it computes what item 0 did and directly follows item k-1.
        const bool follows = previous_item == list + "." + std::to_string(index - 1);
        const auto reference = first_item_outputs.find(list);
        if (!every_layer && index > 0 && follows && reference != first_item_outputs.end() &&
            reference->second == relative && module_at.count(item)) {
            if (!fold || fold->list != list) {
                flush_fold();
                fold = Fold{list, index, index, 0, module_at.at(item)->type};
            }
            fold->last = index;
            fold->parameters += module_at.at(item)->parameters;
        } else {
            flush_fold();
            add_outputs(outputs);
        }
        previous_item = item;
    }
    flush_fold();
    return rows;
}

// Rows [i, i + period) repeated `count` times from i.
struct Repeat {
    size_t period = 1, count = 1;
};

Repeat repeat_at(const std::vector<Row>& rows, size_t i) {
    auto same = [&](size_t a, size_t b, size_t n) {
        for (size_t k = 0; k < n; ++k)
            if (rows[a + k].path != rows[b + k].path || rows[a + k].step != rows[b + k].step ||
                rows[a + k].output != rows[b + k].output)
                return false;
        return true;
    };
    for (size_t period = 1; i + 2 * period <= rows.size(); ++period) {
        size_t count = 1;
        while (i + (count + 1) * period <= rows.size() && same(i, i + count * period, period)) ++count;
        if (count > 1) return {period, count};
    }
    return {};
}

std::string pad(const std::string& text, size_t width, bool right_align = false) {
    if (text.size() >= width) return text;
    const std::string fill(width - text.size(), ' ');
    return right_align ? fill + text : text + fill;
}

}  // namespace

std::string module_type_name(const nn::Module& module) {
    const char* mangled = typeid(module).name();
    std::string name = mangled;
#if __has_include(<cxxabi.h>)
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                     std::free);
    if (status == 0 && demangled) name = demangled.get();
#endif
    // Drop every namespace: "seqgrad::nn::ModuleList<seqgrad::models::EncoderLayer>" ->
    // "ModuleList<EncoderLayer>".
    std::string out;
    size_t word_start = 0;
    for (size_t i = 0; i < name.size(); ++i) {
        if (name.compare(i, 2, "::") == 0) {
            out.resize(word_start);
            ++i;
            continue;
        }
        const char c = name[i];
        out += c;
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) word_start = out.size();
    }
    return out;
}

std::vector<TracedOutput> trace_outputs(const nn::Module& root, const std::function<void()>& run) {
    PathRecorder recorder(root);
    {
        nn::TraceGuard tracing(recorder);
        run();
    }
    return std::move(recorder.outputs);
}

ModelSummary summarize(Model& model, const SummaryOptions& options) {
    check(options.batch >= 1 && options.src_len >= 1 && options.tgt_len >= 1, kOp,
          "batch, source length and target length must be at least 1, got ", options.batch, ", ", options.src_len,
          " and ", options.tgt_len);
    const ModelConfig& config = model.config();
    const bool source = reads_source(config);
    const IntTensor src = source ? dummy_ids(options.batch, options.src_len, config.src_vocab, -1)
                                 : IntTensor::zeros({options.batch, 0});
    const IntTensor tgt_in = source ? dummy_ids(options.batch, options.tgt_len, config.tgt_vocab, kSos)
                                    : dummy_ids(options.batch, options.tgt_len, config.vocab, -1);

    ModelSummary summary;
    summary.model_type = module_type_name(model);
    summary.options = options;
    summary.reads_source = source;
    Tensor logits, class_logits;
    {
        EvaluationMode evaluation(model);
        NoGradGuard no_grad;
        auto* encoder = dynamic_cast<EncoderModel*>(&model);
        summary.outputs = trace_outputs(model, [&] {
            if (!encoder) {
                logits = model.logits(src, tgt_in);
                return;
            }
            // An encoder: the text read whole, then each of its heads.
            const Tensor hidden = encoder->forward(tgt_in);
            logits = encoder->mlm_logits(hidden);
            if (encoder->classifies()) class_logits = encoder->class_logits(hidden);
        });
    }
    summary.outputs.push_back({"", summary.model_type, "logits", logits.shape()});
    if (class_logits.defined())
        summary.outputs.push_back({"", summary.model_type, "class_logits", class_logits.shape()});

    summary.modules = module_tree(model);
    const ModuleInfo& root = summary.modules.front();
    if (root.own_parameters > 0) summary.groups.push_back({"", root.type, root.own_parameters, root.own_parameters});
    for (const ModuleInfo& m : summary.modules)
        if (!m.path.empty() && m.path.find('.') == std::string::npos && m.parameters > 0) summary.groups.push_back(m);
    summary.total_parameters = model.num_parameters();
    return summary;
}

std::string format_summary(const ModelSummary& summary, bool every_layer) {
    const SummaryOptions& o = summary.options;
    std::ostringstream out;
    if (summary.reads_source)
        out << summary.model_type << ": one forward pass in evaluation mode over src [" << o.batch << ", " << o.src_len
            << "] and tgt_in [" << o.batch << ", " << o.tgt_len << "]\n\n";
    else
        out << summary.model_type << ": one forward pass in evaluation mode over tokens [" << o.batch << ", "
            << o.tgt_len << "]\n\n";

    // Fold runs of repeated rows, then size the columns.
    const std::vector<Row> rows = table_rows(summary, every_layer);
    std::vector<Row> shown;
    bool repeats = false;
    for (size_t i = 0; i < rows.size();) {
        const Repeat r = repeat_at(rows, i);
        for (size_t k = 0; k < r.period; ++k) {
            Row row = rows[i + k];
            if (r.count > 1) row.output += " x" + std::to_string(r.count);
            shown.push_back(row);
        }
        repeats = repeats || r.count > 1;
        i += r.period * r.count;
    }
    const Row header{"Module", "Type", "Step", "Output", "Parameters"};
    Row width{};
    auto widen = [](std::string& w, const std::string& text) {
        if (text.size() > w.size()) w.resize(text.size(), '-');
    };
    for (const Row& row : shown) {
        widen(width.path, row.path);
        widen(width.type, row.type);
        widen(width.step, row.step);
        widen(width.output, row.output);
        widen(width.parameters, row.parameters);
    }
    widen(width.path, header.path);
    widen(width.type, header.type);
    widen(width.step, header.step);
    widen(width.output, header.output);
    widen(width.parameters, header.parameters);
    auto print = [&](const Row& row) {
        std::string line = pad(row.path, width.path.size()) + "  " + pad(row.type, width.type.size()) + "  " +
                           pad(row.step, width.step.size()) + "  " + pad(row.output, width.output.size()) + "  " +
                           pad(row.parameters, width.parameters.size(), true);
        out << line.substr(0, line.find_last_not_of(' ') + 1) << "\n";
    };
    print(header);
    print(width);  // a rule of dashes under each heading
    for (const Row& row : shown) print(row);
    if (repeats) out << "xN: a run of rows that repeats N times in turn (a recurrent decoder's steps), shown once\n";

    // Parameters by group, and the modules with parameters that reported nothing (their layer
    // calls an operation directly rather than through a traced module's forward).
    out << "\nParameters by group:\n";
    size_t name_width = 5, group_type_width = 0;
    for (const ModuleInfo& g : summary.groups) {
        name_width = std::max(name_width, g.path.empty() ? std::string("(model)").size() : g.path.size());
        group_type_width = std::max(group_type_width, g.type.size());
    }
    const size_t count_width = with_commas(summary.total_parameters).size();
    for (const ModuleInfo& g : summary.groups)
        out << "  " << pad(g.path.empty() ? "(model)" : g.path, name_width) << "  " << pad(g.type, group_type_width)
            << "  " << pad(with_commas(g.parameters), count_width, true) << "\n";
    out << "  " << pad("total", name_width) << "  " << pad("", group_type_width) << "  "
        << with_commas(summary.total_parameters) << "\n";

    std::set<std::string> traced;
    for (const TracedOutput& t : summary.outputs) traced.insert(t.path);
    std::vector<std::string> silent;
    for (const ModuleInfo& m : summary.modules)
        if (m.own_parameters > 0 && !traced.count(m.path))
            silent.push_back((m.path.empty() ? "(model)" : m.path) + " (" + m.type + ", " +
                             with_commas(m.own_parameters) + ")");
    if (!silent.empty()) {
        out << "\nNot traced (they hold parameters but reported no output):";
        for (size_t i = 0; i < silent.size(); ++i) out << (i ? ", " : " ") << silent[i];
        out << "\n";
    }
    return out.str();
}

ModelConfig summary_default_config(const std::string& model) {
    // The papers' sizes: for the Transformer, the base model of Vaswani et al. (2017); for the GPT,
    // GPT-2 small with its vocabulary.
    ModelConfig c = model_kind(model).defaults();
    c.src_vocab = 10000;
    c.tgt_vocab = 12000;
    c.vocab = 50257;
    return c;
}

}  // namespace seqgrad::models
