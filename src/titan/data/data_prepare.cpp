#include "titan/data/data_prepare.h"

#include <omp.h>

#include <chrono>

#include "titan/core/error.h"
#include "titan/core/path_overlap.h"
#include "titan/core/staging_folder.h"
#include "titan/data/file_io.h"
#include "titan/data/hf_tokenizer_json.h"
#include "titan/data/token_corpus.h"
#include "titan/data/token_shard.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {

const char* const kDefaultCorpusDir = "/usr/share/games/fortunes";

namespace {

namespace fs = std::filesystem;

std::optional<uint32_t> choose_special(const Tokenizer& tokenizer, const std::string& text,
                                       std::optional<uint32_t> fallback) {
  if (text.empty()) return fallback;
  if (text == "none") return std::nullopt;
  return tokenizer.special_token_id(text);  // an unknown name is an error naming the tokenizer
}

// Prepare replaces its output folder whole, so it refuses one holding anything
// it did not write: the user's own files (or its inputs) would go with it.
void check_replaceable(const fs::path& output) {
  std::error_code error;
  if (!fs::exists(output, error)) return;
  TITAN_CHECK(fs::is_directory(output, error), "data prepare: output '{}' exists and is not a folder", output.string());
  std::string manifest_tokenizer;
  if (fs::exists(output / ShardManifest::kFileName, error)) {
    try {
      manifest_tokenizer = fs::path(read_shard_manifest(output / ShardManifest::kFileName).tokenizer).filename();
    } catch (const Error&) {
    }
  }
  for (const auto& entry : fs::directory_iterator(output)) {
    const std::string name = entry.path().filename().string();
    const bool shard = name.rfind("shard_", 0) == 0 && entry.path().extension() == ".tshard";
    const bool ours = shard || name == ShardManifest::kFileName || name == "tokenizer.json" ||
                      (!manifest_tokenizer.empty() && name == manifest_tokenizer);
    TITAN_CHECK(ours,
                "data prepare: output '{}' holds '{}', which a prepared dataset does not: prepare replaces the whole "
                "folder, so choose a new or empty one",
                output.string(), name);
  }
}

// Prepare replaces its output whole: the output (and its staging folder) must
// be apart from everything it reads, or the dataset would be written over
// its own corpus, tokenizer or template.
void check_apart_from_inputs(const fs::path& output, const PrepareOptions& options) {
  const fs::path staging = output.string() + ".partial";
  for (const fs::path& written : {output, staging}) {
    for (const std::string& input : options.inputs)
      check_output_apart_from_input(written, "--output", input, "--input");
    std::error_code error;
    if (fs::exists(options.tokenizer, error)) {
      check_output_apart_from_input(written, "--output", options.tokenizer, "--tokenizer");
    }
    if (options.chat && fs::exists(options.chat->chat_template, error)) {
      check_output_apart_from_input(written, "--output", options.chat->chat_template, "--chat-template");
    }
  }
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& options_in) {
  const auto start = std::chrono::steady_clock::now();
  PrepareOptions options = options_in;
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  if (options.chat) {
    TITAN_CHECK(!options.inputs.empty(), "data prepare --chat: give the chat JSONL files (--input)");
    TITAN_CHECK(!options.tokenizer.empty() && options.train_vocab_size == 0,
                "data prepare --chat: give a tokenizer (--tokenizer): a chat template's special tokens need the "
                "model's own tokenizer, not one trained here");
  }
  if (options.inputs.empty()) {
    TITAN_CHECK(fs::is_directory(kDefaultCorpusDir),
                "the default corpus {} is missing: install Debian's `fortunes` package (scripts/setup.sh) or pass "
                "--input",
                kDefaultCorpusDir);
    options.inputs = {kDefaultCorpusDir};
    if (options.corpus.format == "auto") options.corpus.format = "fortune";
  }
  TITAN_CHECK(options.train_vocab_size > 0 || !options.tokenizer.empty(),
              "data prepare: give a tokenizer (--tokenizer) or a vocabulary size to train one (--train-tokenizer)");
  TITAN_CHECK(options.train_vocab_size == 0 || options.tokenizer.empty(),
              "data prepare: --tokenizer and --train-tokenizer are exclusive");
  TITAN_CHECK(options.shard_tokens > 0, "data prepare: shard size must be positive");
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();

  fs::path output = fs::path(options.output).lexically_normal();
  if (!output.has_filename()) output = output.parent_path();  // "data/fortunes/"
  TITAN_CHECK(!output.empty() && output.filename() != "." && output.filename() != "..",
              "data prepare: output '{}' must name a folder", options.output);
  check_apart_from_inputs(output, options);
  const std::vector<fs::path> files = list_corpus_files(options.inputs);
  std::vector<std::string> documents;
  if (!options.chat) {
    for (const auto& file : files) {
      for (auto& document : read_corpus_file(file, options.corpus)) documents.push_back(std::move(document));
    }
    TITAN_CHECK(!documents.empty(), "data prepare: the corpus ({}) has no documents", fmt::join(options.inputs, ", "));
    uint64_t corpus_bytes = 0;
    for (const auto& document : documents) corpus_bytes += document.size();
    log(fmt::format("read {} documents ({:.1f} MB) from {} files", documents.size(), corpus_bytes / 1e6, files.size()));
  }

  check_replaceable(output);
  // Everything is written into a sibling staging folder and published at the end.
  StagingFolder staging_folder(output);
  const fs::path& staging = staging_folder.path();

  PrepareResult result;
  std::shared_ptr<const Tokenizer> tokenizer;
  if (options.train_vocab_size > 0) {
    BpeTrainerOptions trainer;
    trainer.vocab_size = options.train_vocab_size;
    trainer.threads = threads;
    trainer.name = (output / "tokenizer.json").string();
    std::vector<std::string_view> views(documents.begin(), documents.end());
    BpeTrainingStats stats;
    tokenizer = std::make_shared<const Tokenizer>(train_bpe(views, trainer, &stats));
    write_file_atomic(staging / "tokenizer.json", hf_tokenizer_json(*tokenizer));
    result.training = stats;
    result.manifest.tokenizer = "tokenizer.json";
    log(fmt::format("trained a tokenizer: {} merges, vocabulary {} ({:.2f} s) -> {}", stats.merges,
                    tokenizer->vocab_size(), stats.pretokenize_seconds + stats.merge_seconds,
                    (output / "tokenizer.json").string()));
  } else {
    tokenizer = load_tokenizer(options.tokenizer);
    if (fs::exists(options.tokenizer)) {
      // Keep the dataset self-contained: copy the tokenizer file beside the shards.
      const fs::path copy = staging / fs::path(options.tokenizer).filename();
      fs::copy_file(options.tokenizer, copy, fs::copy_options::overwrite_existing);
      result.manifest.tokenizer = copy.filename().string();
    } else {
      result.manifest.tokenizer = options.tokenizer;  // a built-in name
    }
  }
  result.manifest.vocab_size = tokenizer->vocab_size();
  result.manifest.tokenizer_fingerprint = tokenizer->fingerprint();
  result.manifest.bos = choose_special(*tokenizer, options.bos_token, tokenizer->bos_id());
  result.manifest.eos = choose_special(*tokenizer, options.eos_token, tokenizer->eos_id());

  // Tokenize in blocks of documents (in parallel), writing a shard whenever
  // one is full. Shards hold the documents' own tokens; the loader adds BOS/EOS.
  ShardWriter writer(tokenizer->vocab_size(), options.chat.has_value());
  auto flush = [&] {
    const std::string name = fmt::format("shard_{:05d}.tshard", result.manifest.shards.size());
    result.manifest.documents += writer.num_documents();
    result.manifest.tokens += writer.num_tokens();
    writer.write(staging / name);
    result.manifest.shards.push_back(name);
  };
  if (options.chat) {
    // Chat conversations: rendered and tokenized whole (they are small next
    // to a pretraining corpus), each with its loss mask.
    const auto chat_template = resolve_chat_template(options.chat->chat_template, options.tokenizer, "--chat-template");
    ChatStats stats;
    const auto conversations = tokenize_chat_files(files, *tokenizer, *chat_template, *options.chat, threads, &stats);
    TITAN_CHECK(!conversations.empty(), "data prepare --chat: no conversations left in {} ({})",
                fmt::join(options.inputs, ", "), stats.summary());
    for (const auto& conversation : conversations) {
      writer.add_document(conversation.tokens, conversation.mask);
      if (writer.num_tokens() >= options.shard_tokens) flush();
    }
    result.manifest.chat = true;
    result.manifest.chat_template = chat_template->origin();
    result.manifest.train_on = chat_train_on_name(options.chat->train_on);
    result.chat = stats;
    log(fmt::format("chat: {} (template {}, training on {} tokens)", stats.summary(), chat_template->origin(),
                    result.manifest.train_on));
  }
  constexpr size_t kBlock = 4096;
  std::vector<std::vector<uint32_t>> encoded;
  for (size_t begin = 0; begin < documents.size(); begin += kBlock) {
    const size_t end = std::min(documents.size(), begin + kBlock);
    encoded.assign(end - begin, {});
#pragma omp parallel for num_threads(threads) schedule(dynamic, 16)
    for (size_t d = begin; d < end; ++d) encoded[d - begin] = tokenizer->encode(documents[d]);
    for (const auto& tokens : encoded) {
      writer.add_document(tokens);
      if (writer.num_tokens() >= options.shard_tokens) flush();
    }
  }
  if (writer.num_documents() > 0) flush();
  write_shard_manifest(staging / ShardManifest::kFileName, result.manifest);
  staging_folder.publish();
  result.manifest_path = output / ShardManifest::kFileName;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log(fmt::format("wrote {} tokens in {} documents to {} shard(s) in {} ({:.2f} s)", result.manifest.tokens,
                  result.manifest.documents, result.manifest.shards.size(), output.string(), result.seconds));
  return result;
}

}  // namespace titan::data
