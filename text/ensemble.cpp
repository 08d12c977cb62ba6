// Checkpoints decoding together, and model files averaged into one (ensemble.h).
#include "seqgrad/text/ensemble.h"

#include <algorithm>
#include <map>

#include "seqgrad/core/autograd.h"
#include "seqgrad/models/registry.h"

namespace seqgrad::text {

namespace {

// The first symbol where two vocabularies differ, or their sizes.
std::string vocabulary_difference(const Vocabulary& a, const Vocabulary& b) {
    const int64_t common = std::min(a.size(), b.size());
    for (int64_t id = 0; id < common; ++id)
        if (a.symbol(id) != b.symbol(id))
            return detail::concat("id ", id, " is \"", a.symbol(id), "\" in one and \"", b.symbol(id),
                                  "\" in the other");
    return detail::concat("one has ", a.size(), " symbols, the other ", b.size());
}

std::vector<LoadedModel> load_models(const std::vector<std::string>& checkpoints) {
    std::vector<LoadedModel> models;
    for (const std::string& path : checkpoints) models.push_back(load_model(path));
    return models;
}

}  // namespace

Ensemble::Ensemble(const std::vector<std::string>& checkpoints, const std::vector<double>& weights)
    : Ensemble(load_models(checkpoints), weights) {}

Ensemble::Ensemble(std::vector<LoadedModel> models, const std::vector<double>& weights) {
    check(!models.empty(), "ensemble", "no checkpoint given");
    const std::vector<double> normalised = models::normalised_weights(weights, models.size());
    for (LoadedModel& loaded : models) {
        check(models::reads_source(loaded.model->config()), "ensemble", loaded.path, " holds a language model (\"",
              loaded.model->config().model, "\"), which reads no source: continue a prompt with a TextGenerator ",
              "(seqgrad generate)");
        if (!members_.empty()) {
            const LoadedModel& first = members_.front();
            check(loaded.target_tokenizer == first.target_tokenizer, "ensemble",
                  "the target tokenizers differ: ", first.path, " reads targets as ", first.target_tokenizer.describe(),
                  ", ", loaded.path, " as ", loaded.target_tokenizer.describe(),
                  " (the models must share the target side)");
            check(loaded.target_vocab == first.target_vocab, "ensemble", "the target vocabularies of ", first.path,
                  " and ", loaded.path, " differ: ", vocabulary_difference(first.target_vocab, loaded.target_vocab),
                  " (the models must share the target side)");
        }
        members_.push_back(std::move(loaded));
    }
    std::vector<models::StepDecoder*> decoders;
    for (LoadedModel& member : members_) decoders.push_back(member.model.get());
    decoder_ = std::make_unique<models::EnsembleDecoder>(std::move(decoders), normalised);
}

bool Ensemble::shares_source(size_t i) const {
    const LoadedModel& a = members_.front();
    const LoadedModel& b = members_.at(i);
    return a.source_tokenizer == b.source_tokenizer && a.source_vocab == b.source_vocab;
}

void Ensemble::pack_weights(Precision precision) {
    for (LoadedModel& member : members_) member.model->pack_weights(precision);
}

std::vector<std::vector<std::vector<int64_t>>> Ensemble::encode_sources(const std::vector<std::string>& texts) const {
    std::vector<std::vector<std::vector<int64_t>>> ids(members_.size());
    for (size_t m = 0; m < members_.size(); ++m) {
        if (m > 0 && shares_source(m)) {
            ids[m] = ids.front();
            continue;
        }
        for (const std::string& text : texts) ids[m].push_back(members_[m].encode_source(text));
    }
    return ids;
}

std::vector<std::vector<models::Hypothesis>> Ensemble::search(const std::vector<IntTensor>& sources,
                                                              const models::DecodingOptions& options) {
    check(sources.size() == members_.size(), "ensemble", "got ", sources.size(), " sources for ", members_.size(),
          " models");
    if (members_.size() == 1) return models::search(*members_.front().model, sources.front(), options);
    check(sources.front().dim() == 2 && sources.front().size(0) >= 1, "ensemble",
          "a source must be [rows >= 1, length], got ", sources.front().shape());
    for (size_t m = 0; m < sources.size(); ++m)
        check(sources[m].dim() == 2 && sources[m].size(1) >= 1, "ensemble", members_[m].path,
              " reads none of these inputs as a symbol (source ", sources[m].shape(), ")");
    NoGradGuard no_grad;
    const int64_t rows = sources.front().size(0);
    return models::search(*decoder_, decoder_->start_decoding(sources), sources.front().size(1),
                          models::start_of_sequence(rows), options);
}

IntTensor padded_rows(const std::vector<const std::vector<int64_t>*>& rows) {
    check(!rows.empty(), "padded_rows", "no rows");
    size_t width = 0;
    for (const auto* row : rows) width = std::max(width, row->size());
    IntTensor out = IntTensor::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(width)}, models::kPad);
    for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r]->begin(), rows[r]->end(), out.data() + r * width);
    return out;
}

// ---- averaging ----

LoadedModel average_models(const std::vector<std::string>& files) {
    check(!files.empty(), "average", "no checkpoint to average");
    LoadedModel first = load_model(files.front());
    const std::string config = first.model->config().to_json();
    // The sums, in double, in state_dict order.
    struct Sum {
        std::string name;
        Shape shape;
        std::vector<double> values;
    };
    std::vector<Sum> sums;
    for (const auto& [name, tensor] : first.model->state_dict())
        sums.push_back({name, tensor.shape(), std::vector<double>(tensor.data(), tensor.data() + tensor.numel())});
    int64_t step = first.step;
    for (size_t f = 1; f < files.size(); ++f) {
        const LoadedModel next = load_model(files[f]);
        const auto differ = [&](const char* what) {
            return Error(detail::concat("average: ", next.path, " and ", first.path, " differ in their ", what,
                                        ": only checkpoints of one model can be averaged"));
        };
        if (next.model->config().to_json() != config) throw differ("model configs");
        if (next.task != first.task) throw differ("tasks");
        if (!(next.source_tokenizer == first.source_tokenizer) || !(next.target_tokenizer == first.target_tokenizer))
            throw differ("tokenizers");
        if (!(next.source_vocab == first.source_vocab) || !(next.target_vocab == first.target_vocab))
            throw differ("vocabularies");
        const nn::NamedTensors state = next.model->state_dict();
        for (size_t t = 0; t < sums.size(); ++t) {
            const Tensor& tensor = state[t].second;
            std::vector<double>& sum = sums[t].values;
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += tensor.data()[i];
        }
        step = std::max(step, next.step);
    }
    std::map<std::string, Tensor> mean;
    const double n = static_cast<double>(files.size());
    for (const Sum& sum : sums) {
        Tensor tensor = Tensor::zeros(sum.shape);
        for (size_t i = 0; i < sum.values.size(); ++i) tensor.data()[i] = static_cast<float>(sum.values[i] / n);
        mean.emplace(sum.name, tensor);
    }
    first.model->load_state_dict(mean);
    first.step = step;
    first.path = files.size() == 1 ? first.path : detail::concat("the mean of ", files.size(), " files");
    return first;
}

}  // namespace seqgrad::text
