// `titan tokenizer train|encode|decode|info`: train a byte-level BPE on a
// corpus, and show the ids a model sees for a text (and the text for ids).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/core/path_overlap.h"
#include "titan/data/bpe_trainer.h"
#include "titan/data/corpus_reader.h"
#include "titan/data/file_io.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::cli {
namespace {

struct TokenizerCommandOptions {
  // encode / decode / info
  std::string tokenizer;
  std::string input;  // empty: stdin
  bool allow_special = false, bos = false, eos = false;
  int threads = 1;
  // train
  std::vector<std::string> inputs;
  std::string format = "auto", separator, output;
  uint32_t vocab_size = 8192;
  std::vector<std::string> specials = data::BpeTrainerOptions{}.special_tokens;
  uint64_t min_frequency = 2;
};

std::string read_input(const std::string& path) {
  if (!path.empty()) return data::read_file(path, "input");
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

int run_encode(const TokenizerCommandOptions& o) {
  const auto tokenizer = data::load_tokenizer(o.tokenizer);
  const std::string text = read_input(o.input);
  const std::vector<uint32_t> ids = tokenizer->encode(
      text, {.allow_special = o.allow_special, .add_bos = o.bos, .add_eos = o.eos, .threads = o.threads});
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(ids[i]);
  }
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_decode(const TokenizerCommandOptions& o) {
  const auto tokenizer = data::load_tokenizer(o.tokenizer);
  const std::string text = read_input(o.input);
  const std::string source = o.input.empty() ? std::string("standard input") : o.input;
  std::vector<uint32_t> ids;
  size_t pos = 0;
  while (true) {
    pos = text.find_first_not_of(" \t\r\n,", pos);
    if (pos == std::string::npos) break;
    const size_t end = std::min(text.find_first_of(" \t\r\n,", pos), text.size());
    const std::string word = text.substr(pos, end - pos);
    uint64_t id = 0;
    bool ok = !word.empty() && word.size() <= 10;
    for (char c : word) ok = ok && c >= '0' && c <= '9';
    if (ok) id = std::stoull(word);
    TITAN_CHECK(ok && id < tokenizer->vocab_size(), "{}: '{}' (token {}) is not a token id of {} (0..{})", source, word,
                ids.size() + 1, tokenizer->name(), tokenizer->vocab_size() - 1);
    ids.push_back(static_cast<uint32_t>(id));
    pos = end;
  }
  const std::string bytes = tokenizer->decode(ids);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  return 0;
}

int run_info(const TokenizerCommandOptions& o) {
  const auto tokenizer = data::load_tokenizer(o.tokenizer);
  auto special = [&](std::optional<uint32_t> id) {
    return id ? fmt::format("{} {}", *id, tokenizer->token_bytes(*id)) : std::string("none");
  };
  fmt::print("tokenizer: {}\nvocab size: {}\nmerges: {}\nbos: {}\neos: {}\nspecial tokens: {}\n", tokenizer->name(),
             tokenizer->vocab_size(), tokenizer->model().num_merges(), special(tokenizer->bos_id()),
             special(tokenizer->eos_id()), tokenizer->special_tokens().size());
  for (const auto& pattern : tokenizer->split_patterns()) fmt::print("split pattern: {}\n", pattern);
  return 0;
}

int run_train(const TokenizerCommandOptions& o) {
  data::CorpusOptions corpus{o.format, o.separator, "text"};
  // The tokenizer file must not replace a corpus file, nor sit in a corpus folder (the next run would read it as text).
  for (const std::string& input : o.inputs) check_output_apart_from_input(o.output, "--output", input, "--input");
  std::vector<std::string> documents;
  for (const auto& file : data::list_corpus_files(o.inputs)) {
    for (auto& document : data::read_corpus_file(file, corpus)) documents.push_back(std::move(document));
  }
  TITAN_CHECK(!documents.empty(), "tokenizer train: the corpus ({}) has no documents", fmt::join(o.inputs, ", "));
  uint64_t bytes = 0;
  for (const auto& document : documents) bytes += document.size();
  data::BpeTrainerOptions options;
  options.vocab_size = o.vocab_size;
  options.special_tokens = o.specials;
  options.min_frequency = o.min_frequency;
  options.threads = o.threads > 1 ? o.threads : 0;
  options.name = o.output;
  data::BpeTrainingStats stats;
  const std::vector<std::string_view> views(documents.begin(), documents.end());
  const data::Tokenizer tokenizer = data::train_bpe(views, options, &stats);
  if (const auto folder = std::filesystem::path(o.output).parent_path(); !folder.empty()) {
    std::filesystem::create_directories(folder);
  }
  data::write_file_atomic(o.output, data::hf_tokenizer_json(tokenizer));
  fmt::print("trained on {} documents, {:.2f} MB: {} pieces, {} distinct\n", documents.size(), bytes / 1e6,
             stats.pieces, stats.unique_pieces);
  fmt::print("{} merges in {:.2f} s (pre-tokenize {:.2f} s, merge {:.2f} s); vocabulary {} -> {}\n", stats.merges,
             stats.pretokenize_seconds + stats.merge_seconds, stats.pretokenize_seconds, stats.merge_seconds,
             tokenizer.vocab_size(), o.output);
  if (tokenizer.vocab_size() < o.vocab_size) {
    fmt::print("note: the corpus ran out of pairs seen at least {} times; the vocabulary is smaller than asked\n",
               o.min_frequency);
  }
  return 0;
}

}  // namespace

Subcommand make_tokenizer_subcommand() {
  auto o = std::make_shared<TokenizerCommandOptions>();
  auto action = std::make_shared<std::string>();
  Subcommand subcommand;
  subcommand.add = [o, action](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("tokenizer", "train a tokenizer, or encode/decode text with one");
    app->require_subcommand(1);
    const std::string spec_help = "a tokenizer.json, a tiktoken rank file, or a built-in name (" +
                                  fmt::format("{}", fmt::join(data::builtin_tokenizer_names(), ", ")) + ")";

    CLI::App* encode = app->add_subcommand("encode", "print the token ids of a text (space-separated)");
    encode->add_option("--tokenizer", o->tokenizer, spec_help)->required();
    encode->add_option("--input", o->input, "text file (default: standard input)");
    encode->add_flag("--allow-special", o->allow_special, "turn special token text (<|endoftext|>) into special ids");
    encode->add_flag("--bos", o->bos, "start with the BOS token");
    encode->add_flag("--eos", o->eos, "end with the EOS token");
    encode->add_option("--threads", o->threads, "encoder threads (same ids)")->check(at_least(1));
    encode->callback([action] { *action = "encode"; });

    CLI::App* decode = app->add_subcommand("decode", "print the text (bytes) of token ids");
    decode->add_option("--tokenizer", o->tokenizer, spec_help)->required();
    decode->add_option("--input", o->input, "file of ids (default: standard input)");
    decode->callback([action] { *action = "decode"; });

    CLI::App* info = app->add_subcommand("info", "vocabulary size, BOS/EOS, special tokens, split pattern");
    info->add_option("--tokenizer", o->tokenizer, spec_help)->required();
    info->callback([action] { *action = "info"; });

    CLI::App* train = app->add_subcommand("train", "train a byte-level BPE on a corpus; writes tokenizer.json");
    train->add_option("--input", o->inputs, "corpus files or folders")->required();
    train->add_option("--format", o->format, "auto, text, fortune or jsonl (auto: jsonl for *.jsonl, else text)");
    train->add_option("--separator", o->separator, "text format: a line equal to this separates documents");
    train->add_option("--vocab-size", o->vocab_size, "total vocabulary: 256 bytes + merges + special tokens")
        ->check(at_least(1));
    train->add_option("--output", o->output, "tokenizer.json to write")->required();
    train->add_option("--special", o->specials,
                      "special tokens (default: Llama 3's <|begin_of_text|> <|end_of_text|> <|start_header_id|> "
                      "<|end_header_id|> <|eot_id|>)");
    train->add_option("--min-frequency", o->min_frequency, "stop when the best pair is rarer than this")
        ->check(at_least(1));
    train->add_option("--threads", o->threads, "pre-tokenization threads (0: all)")->check(at_least(0));
    train->callback([action] { *action = "train"; });
    return app;
  };
  subcommand.run = [o, action] {
    if (*action == "encode") return run_encode(*o);
    if (*action == "decode") return run_decode(*o);
    if (*action == "info") return run_info(*o);
    return run_train(*o);
  };
  return subcommand;
}

}  // namespace titan::cli
