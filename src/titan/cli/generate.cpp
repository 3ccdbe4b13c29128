// `titan generate --checkpoint DIR --prompt "..."`: continue a prompt with a
// trained model (greedy, or sampled with temperature / top-k / top-p).
#include <cstdio>
#include <memory>

#include "titan/cli/subcommands.h"
#include "titan/data/tokenizer_loader.h"
#include "titan/models/generate.h"
#include "titan/train/model_export.h"

namespace titan::cli {

namespace {
struct GenerateArguments {
  std::string checkpoint, prompt;
  models::SamplingOptions sampling;
  bool ids = false;
};
}  // namespace

Subcommand make_generate_subcommand() {
  auto args = std::make_shared<GenerateArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("generate", "continue a prompt with a trained model");
    app->add_option("--checkpoint", args->checkpoint, "model export folder (job.toml + model.safetensors)")->required();
    app->add_option("--prompt", args->prompt, "text to continue")->required();
    app->add_option("--max-new-tokens", args->sampling.max_new_tokens, "tokens to generate")->capture_default_str();
    app->add_option("--temperature", args->sampling.temperature, "0 = greedy")->capture_default_str();
    app->add_option("--top-k", args->sampling.top_k, "sample among the k most likely (0 = all)")->capture_default_str();
    app->add_option("--top-p", args->sampling.top_p, "nucleus sampling threshold")->capture_default_str();
    app->add_option("--seed", args->sampling.seed, "sampling seed")->capture_default_str();
    app->add_flag("--ids", args->ids, "also print the generated token ids");
    return app;
  };
  subcommand.run = [args] {
    train::ExportedModel exported = train::load_exported_model(args->checkpoint);
    const auto tokenizer = data::load_tokenizer(exported.tokenizer);
    data::EncodeOptions encode;
    encode.add_bos = tokenizer->bos_id().has_value();
    const std::vector<uint32_t> prompt_ids = tokenizer->encode(args->prompt, encode);
    std::vector<int64_t> prompt(prompt_ids.begin(), prompt_ids.end());
    if (tokenizer->eos_id()) args->sampling.stop_tokens.push_back(*tokenizer->eos_id());
    const std::vector<int64_t> generated = models::generate(*exported.model, prompt, args->sampling);
    std::vector<uint32_t> ids(generated.begin(), generated.end());
    if (!ids.empty() && tokenizer->eos_id() && ids.back() == *tokenizer->eos_id()) ids.pop_back();
    std::printf("%s%s\n", args->prompt.c_str(), tokenizer->decode(ids).c_str());
    if (args->ids) {
      for (int64_t id : generated) std::printf("%lld ", static_cast<long long>(id));
      std::printf("\n");
    }
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
