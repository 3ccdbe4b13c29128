// Chat datasets for supervised fine-tuning: conversations read from JSONL
// (optionally zstd-compressed, *.jsonl.zst; one conversation a line, see
// chat_jsonl.h), rendered by a chat template into tokens, and a loss mask
// saying which tokens are trained on (the assistant turns, or all). The loader
// packs such documents whole (packed_stream.h) and `titan data prepare --chat`
// stores them in token shards with their mask (token_shard.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/chat_options.h"
#include "titan/data/chat_template.h"
#include "titan/data/tokenizer.h"

namespace titan::data {

// The file's bytes, decompressed when its name ends in ".zst". Errors name it.
std::string read_maybe_compressed(const std::filesystem::path& file, std::string_view what);

struct ChatRecord {
  std::vector<ChatMessage> messages;
  uint64_t line = 0;  // 1-based, for errors
};

// The conversations of a chat JSONL(.zst) file, one per non-blank line. Errors
// name file:line; with `train_on` assistant, a conversation without an
// assistant turn is one (it would train on nothing).
std::vector<ChatRecord> read_chat_file(const std::filesystem::path& file, ChatTrainOn train_on);

// A conversation as tokens, and one 0/1 byte per token: 1 = trained on.
struct ChatTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
};

// Renders `messages` with the template's segments and encodes each segment on
// its own (special-token text becomes its special token; no BOS is added: the
// template writes it). The mask is the segment's `assistant` flag, or 1 for
// every token with ChatTrainOn::all.
ChatTokens tokenize_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                         std::span<const ChatMessage> messages, ChatTrainOn train_on);

// How many of a conversation's tokens to keep under the overlong policy, given
// its mask (one byte per token): all of them when it fits in `max_tokens` (0:
// no limit); with truncate, the first max_tokens, unless that leaves no
// trained token; nullopt when the conversation is dropped.
std::optional<uint64_t> chat_kept_length(std::span<const uint8_t> mask, uint64_t max_tokens, ChatOverlong overlong);

// Counts over a chat dataset; `conversations`, `tokens` and `trained_tokens`
// are what is kept, after the overlong policy.
struct ChatStats {
  uint64_t conversations = 0, tokens = 0, trained_tokens = 0, truncated = 0, dropped = 0;
  std::string summary() const;  // "N conversations, T tokens (A trained), X truncated, Y dropped"
};

// The template a chat dataset is rendered with: `name` as ChatTemplate::load
// takes it, or when empty the tokenizer_config.json beside the tokenizer file.
// With neither, an error naming `key` (the setting that would give one).
std::unique_ptr<ChatTemplate> resolve_chat_template(const std::string& name, const std::string& tokenizer,
                                                    std::string_view key);

// Reads, renders and tokenizes the conversations of `files` in order (encoding
// on `threads` threads; 0 = all), applying options.max_tokens and
// options.overlong. Dropped conversations are left out and counted.
std::vector<ChatTokens> tokenize_chat_files(const std::vector<std::filesystem::path>& files, const Tokenizer& tokenizer,
                                            const ChatTemplate& chat_template, const ChatOptions& options, int threads,
                                            ChatStats* stats);

}  // namespace titan::data
