// Each model kind's recipe (training/recipe.h) is the configs/ file the README trains it with, less
// its data and budget: the shortest command trains what the README's recipe does.
#include "helpers.h"
#include "seqgrad/training/recipe.h"

using namespace seqgrad;

TEST_CASE("each model kind's recipe is its configs/ file", "[recipe]") {
    const std::vector<std::pair<std::string, std::string>> files = {
        {"transformer", "g2p-transformer.json"},
        {"attn_seq2seq", "g2p-attn_seq2seq.json"},
        {"seq2seq", "g2p-seq2seq.json"},
        {"gpt", "gpt-shakespeare-cpu.json"},
        {"bert", "bert-langid.json"},
    };
    REQUIRE(files.size() == models::model_kinds().size());
    for (const auto& [kind, name] : files) {
        INFO(name);
        const training::ConfigFile file =
            training::ConfigFile::read(std::string(SEQGRAD_SOURCE_DIR) + "/configs/" + name);
        CHECK(file.model() == kind);
        const training::Recipe recipe = training::recipe(kind);
        models::ModelConfig config = recipe.model;
        file.apply_model_keys(config);
        CHECK(config.to_json() == recipe.model.to_json());
        // The file's data and budget are a run's, not the recipe's.
        training::TrainingOptions options = file.training(recipe.training);
        const training::TrainingOptions none;
        options.task = recipe.training.task;
        options.text = none.text;
        options.train_files = none.train_files;
        options.dev_files = none.dev_files;
        options.test_files = none.test_files;
        options.max_steps = none.max_steps;
        options.minutes = none.minutes;
        options.epochs = none.epochs;
        CHECK(options.to_json() == recipe.training.to_json());
    }
}

TEST_CASE("a recipe trains once the run gives its data and budget", "[recipe]") {
    for (const models::ModelKind& kind : models::model_kinds()) {
        INFO(kind.name);
        const training::Recipe recipe = training::recipe(kind.name);
        CHECK(recipe.model.model == kind.name);
        CHECK_NOTHROW(recipe.model.validate());
        training::TrainingOptions options = recipe.training;
        if (kind.name == "bert") options.train_files = {"texts.tsv"};  // classify's data
        CHECK_THROWS_WITH(options.validate(), Catch::Contains("no budget"));
        options.minutes = 1;
        if (kind.name == "gpt") {
            options.task = "text";
            options.text = "book.txt";
        }
        CHECK_NOTHROW(options.validate());
    }
    CHECK_THROWS_WITH(training::recipe("albert"), Catch::Contains("unknown model \"albert\""));
}
