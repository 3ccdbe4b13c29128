// Loading a tokenizer from what a user names: a tokenizer.json, a tiktoken
// rank file (or Meta's Llama 3 tokenizer.model, which is one), or a built-in
// name whose data is installed under share/titan/tokenizers (copied at build
// time from the npm packages scripts/setup.sh installs).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "titan/data/tokenizer.h"

namespace titan::data {

// cl100k_base, o200k_base, p50k_base, r50k_base, llama3.
const std::vector<std::string>& builtin_tokenizer_names();

// Where a built-in tokenizer's data file is (or would be) installed; nullopt
// for an unknown name or when titan has no share folder.
std::optional<std::filesystem::path> builtin_tokenizer_file(std::string_view name);

Tokenizer load_builtin_tokenizer(std::string_view name);
// A tiktoken rank file: the split pattern and special tokens come from the
// encoding it is recognised as (by file name, else by its number of ranks).
Tokenizer load_tiktoken_file(const std::filesystem::path& path);
Tokenizer load_hf_tokenizer_file(const std::filesystem::path& path);

// A file path (tokenizer.json / npm tiktoken JSON / rank file) or a built-in
// name; a clear titan::Error otherwise.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace titan::data
