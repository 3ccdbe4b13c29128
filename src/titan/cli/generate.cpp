// `titan generate --checkpoint DIR --prompt "..."`: continue a prompt with a
// trained model (greedy, or sampled with temperature / top-k / top-p).
// With --chat the prompt is a conversation (--system, --message, --messages)
// rendered by a chat template with the assistant's generation prompt, and the
// answer ends at the template's end-of-turn token; only the answer is printed.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "titan/checkpoint/nonfinite_weights.h"
#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/data/chat_jsonl.h"
#include "titan/data/chat_template.h"
#include "titan/data/file_io.h"
#include "titan/data/jsonl_lines.h"
#include "titan/data/tokenizer_loader.h"
#include "titan/models/generate.h"
#include "titan/train/flux/flux_generate.h"
#include "titan/train/memory_check.h"
#include "titan/train/model_export.h"

namespace titan::cli {

namespace {

namespace fs = std::filesystem;

struct GenerateArguments {
  std::string checkpoint, prompt;
  models::SamplingOptions sampling;
  int64_t tp = 1, dp_shard = 1;  // under mpirun: the generation mesh
  bool ids = false, prompt_ids = false, allow_nonfinite = false;
  // --chat
  bool chat = false;
  std::string message, system, messages_file, chat_template;
};

// A --messages file: one {"role", "content"} object a line, or one line that
// is a whole conversation ({"messages": [...]}). Errors name file:line.
std::vector<data::ChatMessage> read_messages_file(const std::string& path) {
  const std::string content = data::read_file(path, "--messages");
  std::vector<data::ChatMessage> messages;
  bool whole_conversation = false;
  data::for_each_jsonl_line(content, [&](std::string_view text, size_t line) {
    const std::string where = fmt::format("{}:{}", path, line);
    TITAN_CHECK(!whole_conversation, "{}: a line after a whole conversation ({{\"messages\": [...]}})", where);
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", where, e.what());
    }
    TITAN_CHECK(record.is_object(), "{}: expected a JSON object, not {}", where, record.type_name());
    if (record.contains("messages")) {
      TITAN_CHECK(messages.empty(), "{}: a whole conversation ({{\"messages\": [...]}}) after single messages", where);
      messages = data::parse_chat_line(text, where);
      whole_conversation = true;
      return;
    }
    // One turn: checked as the one message of a conversation, so the rules (and words) are the dataset's.
    const nlohmann::json one = {{"messages", nlohmann::json::array({record})}};
    for (auto& message : data::parse_chat_line(one.dump(), where)) messages.push_back(std::move(message));
  });
  TITAN_CHECK(!messages.empty(), "{}: no messages", path);
  return messages;
}

// The template --chat renders with: --chat-template, else the job's
// chat.template, else tokenizer_config.json beside the export's tokenizer.
std::unique_ptr<data::ChatTemplate> chat_template_for(const GenerateArguments& args,
                                                      const train::ExportedModel& exported) {
  if (!args.chat_template.empty())
    return std::make_unique<data::ChatTemplate>(data::ChatTemplate::load(args.chat_template));
  if (const std::string& name = exported.config.chat.template_name; !name.empty()) {
    // A template file the job named may have travelled with the export.
    const fs::path beside_export = fs::path(args.checkpoint) / fs::path(name).filename();
    std::error_code error;
    const bool file = name.find('/') != std::string::npos || name.ends_with(".jinja") || name.ends_with(".json");
    return std::make_unique<data::ChatTemplate>(data::ChatTemplate::load(
        file && !fs::exists(name, error) && fs::is_regular_file(beside_export, error) ? beside_export.string() : name));
  }
  std::error_code error;
  if (fs::is_regular_file(exported.tokenizer, error)) {
    if (auto beside = data::ChatTemplate::beside_tokenizer(exported.tokenizer)) return beside;
  }
  fail(
      "generate --chat: no chat template for {}: its job.toml sets no chat.template and there is no "
      "tokenizer_config.json with a \"chat_template\" beside its tokenizer ({}); pass --chat-template (llama3, "
      "qwen3, a tokenizer_config.json or a .jinja file)",
      args.checkpoint, exported.tokenizer);
}

std::vector<data::ChatMessage> conversation(const GenerateArguments& args) {
  std::vector<data::ChatMessage> messages;
  if (!args.system.empty()) messages.push_back({"system", args.system});
  if (!args.messages_file.empty()) {
    for (auto& message : read_messages_file(args.messages_file)) messages.push_back(std::move(message));
  }
  // --prompt is the user's message when --message is not given.
  const std::string& user = !args.message.empty() ? args.message : args.prompt;
  if (!user.empty()) messages.push_back({"user", user});
  TITAN_CHECK(!messages.empty() && !(messages.size() == 1 && messages[0].role == "system"),
              "generate --chat: no conversation to answer: pass --message (or --prompt) or --messages");
  return messages;
}

void print_ids(const char* label, const std::vector<int64_t>& ids) {
  std::printf("%s", label);
  for (int64_t id : ids) std::printf(" %lld", static_cast<long long>(id));
  std::printf("\n");
}

int run_generate(GenerateArguments& args) {
  TITAN_CHECK(args.chat || args.message.empty(), "generate: --message needs --chat (plain generation takes --prompt)");
  TITAN_CHECK(args.chat || (args.system.empty() && args.messages_file.empty() && args.chat_template.empty()),
              "generate: --system, --messages and --chat-template need --chat");
  TITAN_CHECK(args.chat || !args.prompt.empty(), "generate: pass --prompt (or --chat with --message)");
  // Under mpirun every rank holds its part of the model (tensor-parallel heads,
  // FSDP shards gathered a block at a time) and they agree on each token.
  comm::World& world = comm::World::instance();
  const bool on_mesh = world.size() > 1 || args.tp > 1 || args.dp_shard > 1;
  std::unique_ptr<comm::DeviceMesh> mesh;
  models::GenerationMesh generation_mesh;
  train::ExportedModel exported;
  if (on_mesh) {
    TITAN_CHECK(args.tp * args.dp_shard == world.size(),
                "generate: --tp {} x --dp-shard {} = {} ranks, but {} process(es) run it{}", args.tp, args.dp_shard,
                args.tp * args.dp_shard, world.size(),
                world.launched() ? "" : " (start it with mpirun -np N, N = --tp x --dp-shard)");
    mesh =
        std::make_unique<comm::DeviceMesh>(comm::ParallelDims{.dp_shard = args.dp_shard, .tp = args.tp}, world.group());
    exported = train::load_exported_model_on_mesh(args.checkpoint, *mesh);
    generation_mesh.head_split = args.tp;
    generation_mesh.agree = [&world](int64_t token) {
      const Tensor chosen = Tensor::from_vector(std::vector<int64_t>{token}, {1});
      world.group()->broadcast(chosen, 0)->wait();
      return chosen.data<int64_t>()[0];
    };
  } else {
    exported = train::load_exported_model(args.checkpoint);
  }
  checkpoint::check_finite_weights(exported.model->named_state(), args.checkpoint + "/model.safetensors",
                                   args.allow_nonfinite, "--allow-nonfinite");
  const auto tokenizer = data::load_tokenizer(exported.tokenizer);
  std::vector<int64_t> prompt;
  std::optional<uint32_t> end_of_turn;
  if (args.chat) {
    const auto chat_template = chat_template_for(args, exported);
    const std::vector<data::ChatMessage> messages = conversation(args);
    const std::string rendered = chat_template->render(messages, /*add_generation_prompt=*/true);
    const std::string marker = chat_template->end_of_turn();
    end_of_turn = tokenizer->find_special_token(marker);
    TITAN_CHECK(end_of_turn.has_value(),
                "generate --chat: {} ends a turn with '{}', which is not a special token of "
                "tokenizer {}: the model cannot say it is done (train the tokenizer with it, or use the template "
                "the model was fine-tuned with)",
                chat_template->origin(), marker, tokenizer->name());
    // The template writes BOS itself; its special-token text becomes the special ids.
    const std::vector<uint32_t> ids = tokenizer->encode(rendered, {.allow_special = true});
    prompt.assign(ids.begin(), ids.end());
    args.sampling.stop_tokens.push_back(*end_of_turn);
  } else {
    data::EncodeOptions encode;
    encode.add_bos = tokenizer->bos_id().has_value();
    const std::vector<uint32_t> ids = tokenizer->encode(args.prompt, encode);
    prompt.assign(ids.begin(), ids.end());
  }
  if (tokenizer->eos_id()) args.sampling.stop_tokens.push_back(*tokenizer->eos_id());
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  TITAN_CHECK(args.sampling.max_new_tokens <= std::numeric_limits<int64_t>::max() / 2 - prompt_tokens,
              "generate: --max-new-tokens {} is too large", args.sampling.max_new_tokens);
  // (On a mesh each rank holds a part of the weights: the whole-model check does not apply.)
  if (!on_mesh) {
    train::check_generation_fits_memory(exported.model->config, exported.model->output_weight().dtype(), prompt_tokens,
                                        prompt_tokens + args.sampling.max_new_tokens);
  }
  const std::vector<int64_t> generated = models::generate(*exported.model, prompt, args.sampling, generation_mesh);
  if (world.rank() != 0) return 0;  // rank 0 prints
  std::vector<uint32_t> ids(generated.begin(), generated.end());
  // The stop token is not part of the text.
  if (!ids.empty() && std::find(args.sampling.stop_tokens.begin(), args.sampling.stop_tokens.end(),
                                static_cast<int64_t>(ids.back())) != args.sampling.stop_tokens.end())
    ids.pop_back();
  if (args.chat) {
    std::printf("%s\n", tokenizer->decode(ids).c_str());
  } else {
    std::printf("%s%s\n", args.prompt.c_str(), tokenizer->decode(ids).c_str());
  }
  if (args.prompt_ids) print_ids("prompt ids:", prompt);
  if (args.ids) {
    for (int64_t id : generated) std::printf("%lld ", static_cast<long long>(id));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

Subcommand make_generate_subcommand() {
  auto args = std::make_shared<GenerateArguments>();
  auto image = std::make_shared<train::flux::FluxGenerateOptions>();
  auto image_flag = std::make_shared<bool>(false);
  Subcommand subcommand;
  subcommand.add = [args, image, image_flag](CLI::App& parent) {
    CLI::App* app =
        parent.add_subcommand("generate", "continue a prompt (or answer a conversation) with a trained model");
    app->add_option("--checkpoint", args->checkpoint,
                    "model export folder (job.toml + model.safetensors); with --image, a FLUX job's checkpoint "
                    "step folder")
        ->required();
    // FLUX: text to image (train/flux/flux_generate.h).
    auto* image_option = app->add_flag("--image", *image_flag, "FLUX: sample an image for --prompt");
    app->add_option("--config", image->job_config, "--image: the FLUX job's TOML (its model and [encoder] keys)")
        ->needs(image_option);
    app->add_option("--output", image->output, "--image: the PNG to write")->needs(image_option);
    app->add_option("--steps", image->sampling.steps, "--image: Euler denoising steps")
        ->capture_default_str()
        ->check(at_least(1))
        ->needs(image_option);
    app->add_option("--guidance", image->sampling.guidance_scale, "--image: classifier-free guidance scale (1: none)")
        ->capture_default_str()
        ->needs(image_option);
    app->add_option("--prompt", args->prompt, "text to continue (with --chat: the user's message)");
    app->add_flag("--chat", args->chat,
                  "answer a conversation: render it with the chat template (generation prompt added), stop at the "
                  "template's end-of-turn token, print only the answer");
    app->add_option("--message", args->message, "with --chat: the user's message (the last turn)");
    app->add_option("--system", args->system, "with --chat: a system message (the first turn)");
    app->add_option("--messages", args->messages_file,
                    "with --chat: a JSONL file of earlier turns, one {\"role\", \"content\"} a line, or one "
                    "{\"messages\": [...]} line");
    app->add_option("--chat-template", args->chat_template,
                    "with --chat: llama3, qwen3, a tokenizer_config.json or a .jinja file (default: the job's "
                    "chat.template, else tokenizer_config.json beside the tokenizer)");
    app->add_option("--max-new-tokens", args->sampling.max_new_tokens, "tokens to generate")
        ->capture_default_str()
        ->check(at_least(0));
    app->add_option("--temperature", args->sampling.temperature, "0 = greedy")
        ->capture_default_str()
        ->check(at_least(0, /*whole=*/false));
    app->add_option("--top-k", args->sampling.top_k, "sample among the k most likely (0 = all)")
        ->capture_default_str()
        ->check(at_least(0));
    app->add_option("--top-p", args->sampling.top_p, "nucleus sampling threshold")
        ->capture_default_str()
        ->check(within(0, 1, /*low_open=*/true));
    app->add_option("--seed", args->sampling.seed, "sampling seed")->capture_default_str()->check(at_least(0));
    app->add_flag("--ids", args->ids, "also print the generated token ids (the stop token included)");
    app->add_flag("--prompt-ids", args->prompt_ids, "also print the prompt's token ids (\"prompt ids: ...\")");
    app->add_option("--tp", args->tp,
                    "under mpirun: tensor parallel degree (each rank holds 1/tp of every layer's heads and FFN)")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_option("--dp-shard", args->dp_shard,
                    "under mpirun: FSDP degree (weights sharded, each block gathered only while it runs); "
                    "mpirun -np = tp x dp-shard")
        ->capture_default_str()
        ->check(at_least(1));
    app->add_flag("--allow-nonfinite", args->allow_nonfinite,
                  "load weights holding NaN or Inf (named in a warning) instead of refusing them");
    return app;
  };
  subcommand.run = [args, image, image_flag] {
    if (!*image_flag) return run_generate(*args);
    image->checkpoint = args->checkpoint;
    image->prompt = args->prompt;
    image->sampling.seed = args->sampling.seed;
    image->sampling.guidance = image->sampling.guidance_scale != 1.0;
    train::flux::generate_flux_image(*image);
    std::printf("wrote %s\n", image->output.c_str());
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
