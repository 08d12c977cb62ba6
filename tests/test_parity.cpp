// check_fixture, the engine of `seqgrad check`: every committed PyTorch fixture passes, and a
// fixture that disagrees with seqgrad, or is not a valid fixture, is caught.
#include "helpers.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "seqgrad/models/parity.h"

using namespace seqgrad;
using seqgrad::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> committed_fixtures() {
    std::vector<std::string> paths;
    for (const auto& entry : fs::directory_iterator(SEQGRAD_FIXTURES_DIR))
        if (entry.path().extension() == ".safetensors") paths.push_back(entry.path().string());
    std::sort(paths.begin(), paths.end());
    return paths;
}

// A scratch copy of a fixture with one change, for the failure cases.
std::string modified_copy(const std::string& fixture, const std::string& tag,
                          const std::function<void(SafetensorsFile&)>& change) {
    SafetensorsFile file = SafetensorsFile::load(std::string(SEQGRAD_FIXTURES_DIR) + "/" + fixture);
    change(file);
    static const TempDir dir("parity");
    const std::string path = (dir.path / (tag + ".safetensors")).string();
    file.save(path);
    return path;
}

}  // namespace

TEST_CASE("every committed fixture passes the parity check", "[parity]") {
    const auto paths = committed_fixtures();
    // Every case of make_fixtures.py: FIXTURES (19), EXTRA_FIXTURES (4), GPT_FIXTURES (4) and
    // BERT_FIXTURES (3).
    REQUIRE(paths.size() == 30);
    for (const std::string& path : paths) {
        const models::FixtureResult result = models::check_fixture(path);
        for (const models::TensorCheck& c : result.checks) {
            INFO(path << ": " << c.name << " max abs " << c.max_abs_error << " max rel " << c.max_rel_error << " "
                      << c.problem);
            CHECK(c.ok);
        }
        CHECK(result.ok());
    }
}

TEST_CASE("a fixture whose expected logits disagree fails the check", "[parity]") {
    const std::string path = modified_copy("transformer_post_relu.safetensors", "perturbed_logits",
                                           [](SafetensorsFile& f) {
        Tensor logits = f.tensor("expect.logits");
        logits.data()[3] += 0.01f;
        f.put("expect.logits", logits);
    });
    const models::FixtureResult result = models::check_fixture(path);
    CHECK_FALSE(result.ok());
    bool logits_failed = false;
    for (const auto& c : result.checks)
        if (c.name == "expect.logits") logits_failed = !c.ok && c.max_abs_error > 0.009;
    CHECK(logits_failed);
}

TEST_CASE("a fixture whose expected loss moved by 0.1% fails the check", "[parity]") {
    // The float32 bound is a few times the largest disagreement of the committed fixtures, far
    // below a change a wrong model would make (docs/parity.md).
    for (const float factor : {1.001f, 0.9995f}) {
        const std::string path = modified_copy("gpt_learned.safetensors", "moved_loss", [factor](SafetensorsFile& f) {
            Tensor loss = f.tensor("expect.loss");
            loss.data()[0] *= factor;
            f.put("expect.loss", loss);
        });
        const models::FixtureResult result = models::check_fixture(path);
        CHECK_FALSE(result.ok());
        for (const auto& c : result.checks)
            if (c.name != "expect.loss") CHECK(c.ok);
    }
}

TEST_CASE("a BERT fixture whose classifier logits or MLM gradient disagree fails the check", "[parity]") {
    for (const std::string name : {"expect.class_logits", "expect.grad.mlm.output.bias"}) {
        INFO(name);
        const std::string path = modified_copy("bert_post_learned.safetensors", "perturbed_bert",
                                               [&](SafetensorsFile& f) {
            Tensor t = f.tensor(name);
            t.data()[1] += 0.01f;
            f.put(name, t);
        });
        const models::FixtureResult result = models::check_fixture(path);
        CHECK_FALSE(result.ok());
        for (const auto& c : result.checks) CHECK(c.ok == (c.name != name));
    }
}

TEST_CASE("a fixture whose gradient disagrees fails the check", "[parity]") {
    const std::string path = modified_copy("seq2seq_init_state_1layer.safetensors", "perturbed_grad",
                                           [](SafetensorsFile& f) {
        Tensor g = f.tensor("expect.grad.decoder.fc.weight");
        g.data()[0] += 0.01f;
        f.put("expect.grad.decoder.fc.weight", g);
    });
    CHECK_FALSE(models::check_fixture(path).ok());
}

TEST_CASE("a fixture without a parameter's gradient, or with a gradient of no parameter, fails the check", "[parity]") {
    const std::string path = modified_copy("seq2seq_init_state_1layer.safetensors", "missing_grad",
                                           [](SafetensorsFile& f) {
        SafetensorsFile changed;
        for (const auto& [k, v] : f.metadata()) changed.set_metadata(k, v);
        for (const std::string& name : f.names())
            if (name != "expect.grad.decoder.fc.bias") changed.put(name, f.entry(name));
        changed.put("expect.grad.decoder.extra", f.tensor("expect.grad.decoder.fc.bias"));
        f = changed;
    });
    const models::FixtureResult result = models::check_fixture(path);
    CHECK_FALSE(result.ok());
    std::map<std::string, std::string> problems;
    for (const auto& c : result.checks)
        if (!c.ok) problems[c.name] = c.problem;
    CHECK(problems.size() == 2);
    CHECK_THAT(problems["expect.grad.decoder.fc.bias"], Catch::Contains("no gradient for this parameter"));
    CHECK_THAT(problems["expect.grad.decoder.extra"], Catch::Contains("not a parameter of the model"));
}

TEST_CASE("a fixture with a misnamed parameter is an error listing the name", "[parity][errors]") {
    const std::string path = modified_copy("attn_seq2seq_dot_1layer.safetensors", "misnamed", [](SafetensorsFile& f) {
        SafetensorsFile renamed;
        for (const auto& [k, v] : f.metadata()) renamed.set_metadata(k, v);
        for (const std::string& name : f.names())
            renamed.put(name == "encoder.fc.weight" ? "encoder.fc.weights" : name, f.entry(name));
        f = renamed;
    });
    CHECK_THROWS_WITH(models::check_fixture(path),
                      Catch::Contains("misnamed.safetensors") && Catch::Contains("encoder.fc.weight"));
}

TEST_CASE("a fixture with a bad config or batch is a clear error", "[parity][errors]") {
    const auto unknown_model = modified_copy("transformer_post_relu.safetensors", "unknown_model",
                                             [](SafetensorsFile& f) {
        f.set_metadata("config", R"({"model": "gru", "src_vocab": 10, "tgt_vocab": 10})");
    });
    CHECK_THROWS_WITH(models::check_fixture(unknown_model),
                      Catch::Contains("unknown_model.safetensors") && Catch::Contains("gru"));
    const auto no_config = modified_copy("transformer_post_relu.safetensors", "no_config", [](SafetensorsFile& f) {
        SafetensorsFile bare;
        for (const std::string& name : f.names()) bare.put(name, f.entry(name));
        f = bare;
    });
    CHECK_THROWS_WITH(models::check_fixture(no_config), Catch::Contains("config"));
    const auto bad_ids = modified_copy("transformer_post_relu.safetensors", "bad_ids", [](SafetensorsFile& f) {
        IntTensor src = f.int_tensor("input.src");
        src.data()[0] = 100000;
        f.put("input.src", src);
    });
    CHECK_THROWS_WITH(models::check_fixture(bad_ids),
                      Catch::Contains("bad_ids.safetensors") && Catch::Contains("100000"));
}

TEST_CASE("a missing or corrupt fixture file is an error naming the file", "[parity][errors]") {
    CHECK_THROWS_WITH(models::check_fixture("/nonexistent/fixture.safetensors"),
                      Catch::Contains("/nonexistent/fixture.safetensors"));
    const TempDir dir("parity_truncated");
    const std::string truncated = (dir.path / "truncated.safetensors").string();
    {
        const std::string source = std::string(SEQGRAD_FIXTURES_DIR) + "/seq2seq_init_state_1layer.safetensors";
        std::ifstream in(source, std::ios::binary);
        std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::ofstream out(truncated, std::ios::binary);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    }
    CHECK_THROWS_WITH(models::check_fixture(truncated), Catch::Contains("truncated.safetensors"));
}
