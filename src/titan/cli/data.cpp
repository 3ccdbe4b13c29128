// `titan data prepare`: raw text to a tokenizer and token shards (see
// data/data_prepare.h). With no options it prepares the default English corpus;
// with --chat, chat conversations with their loss masks (data/chat_dataset.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/data/data_prepare.h"
#include "titan/train/flux/flux_prepare.h"

namespace titan::cli {

namespace {

// Chat flags as typed, parsed into PrepareOptions::chat when the command runs.
struct ChatFlags {
  bool chat = false;
  std::string chat_template, train_on = "assistant", overlong = "truncate";
  uint64_t seq_len = 0;
};

}  // namespace

Subcommand make_data_subcommand() {
  auto o = std::make_shared<data::PrepareOptions>();
  auto chat = std::make_shared<ChatFlags>();
  auto images = std::make_shared<train::flux::FluxPrepareOptions>();
  auto output_option = std::make_shared<CLI::Option*>(nullptr);
  Subcommand subcommand;
  subcommand.add = [o, chat, images, output_option](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("data", "prepare datasets");
    app->require_subcommand(1);
    CLI::App* prepare = app->add_subcommand(
        "prepare",
        "tokenize a corpus into token shards (default: the fortunes corpus, with a tokenizer trained on it)");
    prepare->add_option("--input", o->inputs,
                        std::string("corpus files or folders (default: ") + data::kDefaultCorpusDir + ")");
    prepare->add_option("--format", o->corpus.format,
                        "auto, text, fortune or jsonl (default: auto; fortune for the default corpus)");
    prepare->add_option("--separator", o->corpus.separator, "text format: a line equal to this separates documents");
    prepare->add_option("--jsonl-field", o->corpus.jsonl_field, "jsonl format: the field holding the text");
    auto* tokenizer =
        prepare->add_option("--tokenizer", o->tokenizer, "a tokenizer.json, a tiktoken rank file or a built-in name");
    auto* train = prepare
                      ->add_option("--train-tokenizer", o->train_vocab_size,
                                   "train a byte-level BPE of this vocabulary size on the corpus (default 8192 "
                                   "when no --tokenizer)")
                      ->check(at_least(1));
    tokenizer->excludes(train);
    *output_option = prepare->add_option("--output", o->output, "output folder (default: data/fortunes)");
    prepare->add_option("--shard-tokens", o->shard_tokens, "tokens per shard")->check(at_least(1));
    prepare->add_option("--bos-token", o->bos_token, "special token that starts each document (\"none\": no BOS)");
    prepare->add_option("--eos-token", o->eos_token, "special token that ends each document (\"none\": no EOS)");
    prepare->add_option("--threads", o->threads, "tokenizer threads (0: all)")->check(at_least(0));
    auto* chat_flag = prepare->add_flag(
        "--chat", chat->chat,
        "the inputs are chat conversations (JSONL, optionally .jsonl.zst: {\"messages\": [...]} or {\"prompt\", "
        "\"completion\"} lines): rendered by a chat template and stored with loss masks (needs --tokenizer)");
    chat_flag->excludes(train);
    prepare
        ->add_option("--chat-template", chat->chat_template,
                     "--chat: llama3, qwen3, a tokenizer_config.json or a .jinja file (default: the "
                     "tokenizer_config.json beside the tokenizer)")
        ->needs(chat_flag);
    prepare
        ->add_option("--train-on", chat->train_on,
                     "--chat: assistant (train on the assistant turns, default) or all (every token)")
        ->needs(chat_flag);
    auto* seq_len = prepare->add_option("--seq-len", chat->seq_len,
                                        "--chat: apply the overlong policy now, to conversations longer than this");
    seq_len->needs(chat_flag)->check(at_least(1));
    prepare
        ->add_option("--overlong", chat->overlong,
                     "--chat with --seq-len: truncate (keep the first tokens, default) or drop")
        ->needs(seq_len);
    // FLUX: images and captions encoded once into latent shards (train/flux/flux_prepare.h).
    auto* images_dir = prepare->add_option("--images", images->images_dir,
                                           "FLUX: the images' folder (the paths in --captions are relative to it)");
    auto* captions = prepare->add_option("--captions", images->captions,
                                         "FLUX: captions.jsonl, {\"image\": path, \"caption\": text} per line");
    prepare->add_option("--validation-captions", images->validation_captions, "FLUX: the same for the validation split")
        ->needs(captions);
    auto* shapes = prepare
                       ->add_option("--shapes", images->shapes,
                                    "FLUX: draw this many images of the synthetic coloured-shapes dataset (and a "
                                    "tenth as many of held-out captions for validation) instead of --captions")
                       ->check(at_least(1));
    auto* job = prepare->add_option("--config", images->job_config,
                                    "FLUX: the job's TOML ([encoder] keys, training.img_size, training.seed)");
    images_dir->needs(captions);
    shapes->excludes(captions);
    for (CLI::Option* flux_option : {captions, shapes}) {
      flux_option->needs(job);
      flux_option->excludes(tokenizer)->excludes(train)->excludes(chat_flag);
    }
    return app;
  };
  subcommand.run = [o, chat, images, output_option] {
    if (!images->captions.empty() || images->shapes > 0) {
      // The text corpus's default folder is no place for image latents.
      TITAN_CHECK((*output_option)->count() > 0, "data prepare --captions/--shapes: --output is required");
      images->output = o->output;
      images->log = [](const std::string& line) { fmt::print("{}\n", line); };
      train::flux::prepare_flux_dataset(*images);
      return 0;
    }
    if (chat->chat) {
      data::ChatOptions options;
      options.chat_template = chat->chat_template;
      options.train_on = data::parse_chat_train_on(chat->train_on, "--train-on");
      options.overlong = data::parse_chat_overlong(chat->overlong, "--overlong");
      options.max_tokens = chat->seq_len;
      o->chat = options;
    }
    if (o->tokenizer.empty() && o->train_vocab_size == 0 && !o->chat) o->train_vocab_size = 8192;
    o->log = [](const std::string& line) { fmt::print("{}\n", line); };
    data::prepare_dataset(*o);
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
