// `seqgrad attention --checkpoint DIR WORD --out F.svg`: decodes one word and draws where the
// model looked while writing each output symbol, as an SVG heatmap per attention map (each
// Transformer layer and head's cross-attention, or the attention seq2seq's one).
#include <cstdio>

#include "commands.h"
#include "decoding_flags.h"
#include "seqgrad/core/autograd.h"
#include "seqgrad/core/error.h"
#include "seqgrad/models/search.h"
#include "seqgrad/text/model_file.h"
#include "svg.h"

namespace seqgrad::cli {
namespace {

struct AttentionFlags {
    std::string checkpoint;
    std::string word;
    std::string out;
    GivenOptions decoding;  // --beam, --max-len
};

// The search drawn: greedy, and at most 40 symbols, unless the flags say otherwise.
models::DecodingOptions attention_defaults() {
    models::DecodingOptions o;
    o.max_len = 40;
    return o;
}

// One title per attention map: the model's own (Seq2SeqModel::attention_layout), or numbers.
std::vector<std::string> panel_titles(const models::AttentionLayout& layout, size_t maps) {
    if (layout.titles.size() == maps) return layout.titles;
    std::vector<std::string> titles;
    for (size_t i = 0; i < maps; ++i) titles.push_back(maps == 1 ? "attention" : "map " + std::to_string(i + 1));
    return titles;
}

void run_attention(const AttentionFlags& flags) {
    const models::DecodingOptions options = decoding_options(flags.decoding, attention_defaults());
    text::LoadedModel loaded = text::load_model(flags.checkpoint);
    auto* seq2seq = dynamic_cast<models::Seq2SeqModel*>(loaded.model.get());
    check(seq2seq != nullptr, "attention", "the model \"", loaded.model->config().model,
          "\" reads no source: there is no attention over one to draw");
    models::Seq2SeqModel& model = *seq2seq;
    const models::ModelConfig& config = model.config();

    const std::vector<std::string> source = loaded.source_tokenizer.tokenize(flags.word);
    check(!source.empty(), "attention", "the word is empty");
    for (const std::string& symbol : source)
        if (!loaded.source_vocab.contains(symbol))
            std::fprintf(stderr, "note: \"%s\" is not in the model's alphabet (read as <unk>)\n", symbol.c_str());
    const std::vector<int64_t> ids = loaded.source_vocab.encode(source);
    const IntTensor src = IntTensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())});

    NoGradGuard no_grad;
    const std::vector<models::Hypothesis> found = models::search(model, src, options).front();
    const models::Hypothesis best = found.empty() ? models::Hypothesis{} : found.front();

    // Replays the chosen output one step at a time (one way for greedy and beam search alike):
    // the weights after feeding input t are those that chose output t.
    std::vector<int64_t> inputs{models::kSos};
    inputs.insert(inputs.end(), best.tokens.begin(), best.tokens.end());
    std::vector<std::string> outputs;
    for (int64_t token : best.tokens) outputs.push_back(loaded.target_vocab.symbol(token));
    if (best.finished) outputs.push_back("</s>");

    std::vector<std::string> titles;
    std::vector<svg::HeatmapPanel> panels;
    std::unique_ptr<models::DecodingState> state = model.start_decoding(src);
    for (size_t step = 0; step < outputs.size(); ++step) {
        model.decode_step(*state, IntTensor::from_vector({inputs[step]}, {1}));
        const std::vector<Tensor> maps = model.last_attention(*state);
        check(!maps.empty(), "attention", "model ", config.model,
              " has no attention to draw (its last_attention() returned nothing after a decoding step)");
        if (panels.empty()) {
            titles = panel_titles(model.attention_layout(), maps.size());
            for (const std::string& title : titles) panels.push_back({title, {}});
        }
        check(maps.size() == panels.size(), "attention", "the model gave ", maps.size(), " attention maps at step ",
              step + 1, " and ", panels.size(), " before");
        for (size_t k = 0; k < maps.size(); ++k) {
            const Tensor& weights = maps[k];  // [1, S]
            check(weights.numel() == src.size(1), "attention", "attention map ", k + 1, " is ", weights.shape(),
                  ", expected [1, ", src.size(1), "]");
            const std::vector<float> row = weights.to_vector();
            panels[k].values.emplace_back(row.begin(), row.end());
        }
    }

    std::string pronunciation;
    for (const std::string& symbol : outputs) pronunciation += (pronunciation.empty() ? "" : " ") + symbol;
    svg::HeatmapFigure figure;
    figure.title = "\"" + flags.word + "\" \u2192 " + pronunciation + "  (" + config.model + ", step " +
                   std::to_string(loaded.step) +
                   (options.beam_size > 1 ? ", beam " + std::to_string(options.beam_size) : "") + ")";
    figure.column_labels = source;
    figure.row_labels = outputs;
    figure.column_axis = "source symbols";
    figure.row_axis = "output symbols";
    figure.scale_label = "attention weight";
    figure.panels = std::move(panels);
    figure.panels_per_row = std::max<size_t>(model.attention_layout().maps_per_row, 1);
    svg::write_file(flags.out, svg::heatmap_svg(figure));
    std::printf("%s -> %s\nwrote %s (%zu attention maps, %zu x %zu)\n", flags.word.c_str(), pronunciation.c_str(),
                flags.out.c_str(), figure.panels.size(), outputs.size(), source.size());
}

}  // namespace

void add_attention_command(CLI::App& app) {
    auto flags = std::make_shared<AttentionFlags>();
    CLI::App* cmd = app.add_subcommand("attention", "Draw where a model looks while it decodes a word (SVG heatmap)");
    cmd->footer(
        "Decodes the word (greedily, or with --beam) and draws the attention weights behind each output symbol: "
        "source symbols along x, output symbols down y, one panel per decoder layer and head for the Transformer's "
        "cross-attention, one panel for the attention seq2seq. The seq2seq model has no attention to draw.");
    cmd->add_option("--checkpoint", flags->checkpoint, "A checkpoint directory or model file")->required();
    cmd->add_option("word", flags->word, "The word to decode")->required();
    cmd->add_option("--out", flags->out, "The SVG file to write")->required();
    add_decoding_option_flags(cmd, {"beam_size", "max_len"}, flags->decoding, attention_defaults());
    cmd->callback([flags] { run_attention(*flags); });
}

}  // namespace seqgrad::cli
