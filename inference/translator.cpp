// Checkpoint in, text to text out (translator.h).
#include "seqgrad/inference/translator.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "seqgrad/core/autograd.h"
#include "seqgrad/models/registry.h"
#include "seqgrad/models/search.h"

namespace seqgrad::inference {

Translator::Translator(const std::string& checkpoint, Precision precision) : loaded_(training::load_model(checkpoint)) {
    check(models::reads_source(loaded_.model->config()), "Translator", loaded_.path, " holds a language model (\"",
          loaded_.model->config().model, "\"), which reads no source: continue a prompt with a TextGenerator");
    loaded_.model->pack_weights(precision);
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

    // Every input as ids; the longest first is no matter: batches are formed by length below.
    std::vector<std::vector<int64_t>> sources(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        sources[i] = loaded_.encode_source(inputs[i]);
        totals_.source_tokens += static_cast<int64_t>(sources[i].size());
        totals_.unknown_source_tokens += std::count(sources[i].begin(), sources[i].end(), models::kUnk);
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
        const auto width = static_cast<int64_t>(sources[order[last - 1]].size());  // sorted: the longest
        IntTensor src = IntTensor::full({rows, width}, models::kPad);
        for (int64_t r = 0; r < rows; ++r) {
            const std::vector<int64_t>& ids = sources[order[first + static_cast<size_t>(r)]];
            std::copy(ids.begin(), ids.end(), src.data() + r * width);
        }
        const std::vector<std::vector<models::Hypothesis>> found = models::search(*loaded_.model, src, options);
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<Translation>& out = results[order[first + static_cast<size_t>(r)]];
            for (const models::Hypothesis& h : found[static_cast<size_t>(r)])
                out.push_back({loaded_.decode_target(h.tokens), h.score, static_cast<int64_t>(h.tokens.size())});
            if (!out.empty()) totals_.output_tokens += out.front().tokens;
        }
    }
    totals_.inputs += static_cast<int64_t>(inputs.size());
    totals_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return results;
}

}  // namespace seqgrad::inference
