#include "titan/data/chat_dataset.h"

#include <omp.h>
#include <zstd.h>

#include <algorithm>

#include "titan/core/error.h"
#include "titan/data/chat_jsonl.h"
#include "titan/data/file_io.h"
#include "titan/data/jsonl_lines.h"

namespace titan::data {
namespace {

namespace fs = std::filesystem;

// Streaming decompression: a frame need not record its decompressed size, and
// a file may hold several frames back to back (zstd's own tool appends them).
std::string zstd_decompress(const std::string& compressed, const std::string& source) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(), ZSTD_freeDCtx);
  TITAN_CHECK(context != nullptr, "{}: cannot create a zstd decompression context", source);
  std::string out;
  std::string buffer(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  size_t last = 0;
  while (in.pos < in.size) {
    ZSTD_outBuffer chunk{buffer.data(), buffer.size(), 0};
    last = ZSTD_decompressStream(context.get(), &chunk, &in);
    TITAN_CHECK(!ZSTD_isError(last), "{}: not valid zstd data: {}", source, ZSTD_getErrorName(last));
    out.append(buffer.data(), chunk.pos);
  }
  // Flush what the context still holds once the input is all consumed.
  while (last != 0) {
    ZSTD_outBuffer chunk{buffer.data(), buffer.size(), 0};
    last = ZSTD_decompressStream(context.get(), &chunk, &in);
    TITAN_CHECK(!ZSTD_isError(last), "{}: not valid zstd data: {}", source, ZSTD_getErrorName(last));
    TITAN_CHECK(chunk.pos > 0 || last == 0, "{}: zstd data is truncated", source);
    out.append(buffer.data(), chunk.pos);
  }
  return out;
}

}  // namespace

std::string read_maybe_compressed(const fs::path& file, std::string_view what) {
  std::string bytes = read_file(file, what);
  if (file.extension() != ".zst") return bytes;
  return zstd_decompress(bytes, file.string());
}

std::vector<ChatRecord> read_chat_file(const fs::path& file, ChatTrainOn train_on) {
  const std::string text = read_maybe_compressed(file, "chat dataset");
  const std::string source = file.string();
  std::vector<ChatRecord> records;
  for_each_jsonl_line(text, [&](std::string_view line, size_t line_number) {
    if (line.back() == '\r') line.remove_suffix(1);
    const std::string where = fmt::format("{}:{}", source, line_number);
    ChatRecord record{parse_chat_line(line, where), line_number};
    if (train_on == ChatTrainOn::assistant) {
      TITAN_CHECK(std::any_of(record.messages.begin(), record.messages.end(),
                              [](const ChatMessage& m) { return m.role == "assistant"; }),
                  "{}: the conversation has no assistant turn, and training is on assistant tokens (train on all "
                  "tokens, or leave it out)",
                  where);
    }
    records.push_back(std::move(record));
  });
  return records;
}

ChatTokens tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                         std::span<const ChatMessage> messages, ChatTrainOn train_on) {
  // Each segment is encoded on its own, so a token's mask is exactly its
  // segment's flag: no token straddles a segment boundary. Encoding the whole
  // text at once would give the same ids, as segments begin and end at special
  // tokens (<|start_header_id|>, <|eot_id|>) or newlines, where the
  // pre-tokenizer splits anyway.
  EncodeOptions options;
  options.allow_special = true;  // "<|eot_id|>" in the rendered text is the special token
  ChatTokens out;
  for (const ChatSegment& segment : chat_template.render_segments(messages)) {
    tokenizer.encode_into(segment.text, options, out.tokens);
    const bool trained = train_on == ChatTrainOn::all || segment.assistant;
    out.mask.resize(out.tokens.size(), trained ? 1 : 0);
  }
  return out;
}

std::optional<uint64_t> chat_kept_length(std::span<const uint8_t> mask, uint64_t max_tokens, ChatOverlong overlong) {
  if (max_tokens == 0 || mask.size() <= max_tokens) return mask.size();
  if (overlong == ChatOverlong::drop) return std::nullopt;
  // Cutting between tokens never splits a special token. Token 0 is never a
  // label, so a trained token must remain among tokens 1 .. max_tokens - 1.
  const auto kept = mask.first(max_tokens);
  if (std::find(kept.begin() + std::min<size_t>(1, kept.size()), kept.end(), 1) == kept.end()) return std::nullopt;
  return max_tokens;
}

std::string ChatStats::summary() const {
  return fmt::format("{} conversations, {} tokens ({} trained), {} truncated, {} dropped", conversations, tokens,
                     trained_tokens, truncated, dropped);
}

std::unique_ptr<ChatTemplate> resolve_chat_template(const std::string& name, const std::string& tokenizer,
                                                    std::string_view key) {
  if (!name.empty()) return std::make_unique<ChatTemplate>(ChatTemplate::load(name));
  std::unique_ptr<ChatTemplate> beside;
  std::error_code error;
  if (!tokenizer.empty() && fs::is_regular_file(tokenizer, error)) beside = ChatTemplate::beside_tokenizer(tokenizer);
  TITAN_CHECK(beside != nullptr,
              "{} is not set and there is no tokenizer_config.json with a \"chat_template\" beside the tokenizer "
              "('{}'): name a template (llama3, qwen3, a tokenizer_config.json or a .jinja file)",
              key, tokenizer);
  return beside;
}

std::vector<ChatTokens> tokenize_chat_files(const std::vector<fs::path>& files, const Tokenizer& tokenizer,
                                            const ChatTemplate& chat_template, const ChatOptions& options, int threads,
                                            ChatStats* stats) {
  // A tokenizer without the template's end-of-turn token would encode it as
  // plain text: the model could never learn to stop (a tokenizer trained before
  // the chat tokens were added, for instance).
  const std::string end_of_turn = chat_template.end_of_turn();
  TITAN_CHECK(tokenizer.find_special_token(end_of_turn).has_value(),
              "the tokenizer '{}' has no special token '{}', which ends a turn in the chat template '{}': use a "
              "tokenizer that has the template's special tokens (for data/fortunes: delete it and run `make run` to "
              "re-prepare it)",
              tokenizer.name(), end_of_turn, chat_template.origin());
  std::vector<ChatRecord> records;
  std::vector<size_t> file_of;  // index into `files`, for errors
  for (size_t f = 0; f < files.size(); ++f) {
    for (auto& record : read_chat_file(files[f], options.train_on)) {
      records.push_back(std::move(record));
      file_of.push_back(f);
    }
  }
  std::vector<ChatTokens> encoded(records.size());
  const int workers = threads > 0 ? threads : omp_get_max_threads();
  // The first failing conversation in file order is the one reported, whatever the thread timing.
  std::exception_ptr error;
  size_t error_at = records.size();
#pragma omp parallel for num_threads(workers) schedule(dynamic, 16)
  for (size_t i = 0; i < records.size(); ++i) {
    try {
      encoded[i] = tokenize_chat(tokenizer, chat_template, records[i].messages, options.train_on);
    } catch (const Error& e) {
      const auto located = std::make_exception_ptr(
          Error(fmt::format("{}:{}: {}", files[file_of[i]].string(), records[i].line, e.what())));
#pragma omp critical(titan_chat_error)
      if (i < error_at) error = located, error_at = i;
    } catch (...) {
      const auto other = std::current_exception();
#pragma omp critical(titan_chat_error)
      if (i < error_at) error = other, error_at = i;
    }
  }
  if (error) std::rethrow_exception(error);
  ChatStats counts;
  std::vector<ChatTokens> kept;
  kept.reserve(encoded.size());
  for (auto& conversation : encoded) {
    const auto length = chat_kept_length(conversation.mask, options.max_tokens, options.overlong);
    if (!length) {
      ++counts.dropped;
      continue;
    }
    if (*length < conversation.tokens.size()) {
      ++counts.truncated;
      conversation.tokens.resize(*length);
      conversation.mask.resize(*length);
    }
    ++counts.conversations;
    counts.tokens += conversation.tokens.size();
    counts.trained_tokens += static_cast<uint64_t>(std::count(conversation.mask.begin(), conversation.mask.end(), 1));
    kept.push_back(std::move(conversation));
  }
  if (stats != nullptr) *stats = counts;
  return kept;
}

}  // namespace titan::data
