// Checkpoint in, text to text out (translator.h).
#include "seqgrad/inference/translator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "seqgrad/core/autograd.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"

namespace seqgrad::inference {

Translator::Translator(const std::string& checkpoint, Precision precision)
    : Translator(std::vector<std::string>{checkpoint}, {}, precision) {}

Translator::Translator(const std::vector<std::string>& checkpoints, const std::vector<double>& weights,
                       Precision precision)
    : ensemble_(checkpoints, weights) {
    ensemble_.pack_weights(precision);
}

Translator::Translator(std::vector<text::LoadedModel> models, const std::vector<double>& weights, Precision precision)
    : ensemble_(std::move(models), weights) {
    ensemble_.pack_weights(precision);
}

Translator::Totals Translator::totals() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return totals_;
}

std::vector<std::vector<Translation>> Translator::translate(const std::vector<std::string>& inputs,
                                                            const models::DecodingOptions& options) const {
    options.validate();
    std::lock_guard<std::mutex> lock(mutex_);
    const auto start = std::chrono::steady_clock::now();
    NoGradGuard no_grad;

    // Every input as each model's ids; batches are formed by the first model's lengths below.
    const std::vector<std::vector<std::vector<int64_t>>> ids = ensemble_.encode_sources(inputs);
    const std::vector<std::vector<int64_t>>& sources = ids.front();
    for (const std::vector<int64_t>& source : sources) {
        totals_.source_tokens += static_cast<int64_t>(source.size());
        totals_.unknown_source_tokens += std::count(source.begin(), source.end(), models::kUnk);
    }
    std::vector<size_t> order;
    for (size_t i = 0; i < inputs.size(); ++i)
        if (!sources[i].empty()) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sources[a].size() < sources[b].size(); });

    std::vector<std::vector<Translation>> results(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
        if (sources[i].empty()) results[i] = {Translation{}};
    const auto per_batch = static_cast<size_t>(models::inputs_per_batch(options));
    for (size_t first = 0; first < order.size(); first += per_batch) {
        const size_t last = std::min(order.size(), first + per_batch);
        const auto rows = static_cast<int64_t>(last - first);
        std::vector<IntTensor> batch;  // each model's sources
        for (const std::vector<std::vector<int64_t>>& own : ids) {
            std::vector<const std::vector<int64_t>*> picked;
            for (size_t i = first; i < last; ++i) picked.push_back(&own[order[i]]);
            batch.push_back(text::padded_rows(picked));
        }
        const std::vector<std::vector<models::Hypothesis>> found = ensemble_.search(batch, options);
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<Translation>& out = results[order[first + static_cast<size_t>(r)]];
            for (const models::Hypothesis& h : found[static_cast<size_t>(r)])
                out.push_back({checkpoint().decode_target(h.tokens), h.score, static_cast<int64_t>(h.tokens.size())});
            if (!out.empty()) totals_.output_tokens += out.front().tokens;
        }
    }
    totals_.inputs += static_cast<int64_t>(inputs.size());
    totals_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return results;
}

}  // namespace seqgrad::inference
