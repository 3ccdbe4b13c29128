// Running the independent tokenizer peers (npm `tiktoken`, `llama3-tokenizer-js`,
// `@huggingface/tokenizers` and Hugging Face's Rust tokenizers as the Node module
// `@anush008/tokenizers`) and the `titan` CLI from the data tests, plus temporary folders.
// A missing Node or npm package is a test failure that says to run
// scripts/setup.sh, never a silent skip.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace titan::data::testing {

// A fresh folder under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_bytes(const std::filesystem::path& path, const std::string& bytes);
std::string read_bytes(const std::filesystem::path& path);

// Ids from a peer for UTF-8 `text`: peer "tiktoken" with an encoding name,
// "llama3", or "hf" (@huggingface/tokenizers) with a tokenizer.json path.
// Throws std::runtime_error (with the setup hint) when the peer cannot run.
std::vector<uint32_t> peer_encode(const std::string& peer, const std::string& encoding, const std::string& text,
                                  bool allow_special = false);

// Ids from Hugging Face tokenizers itself (the Rust library, through the npm
// package @anush008/tokenizers) for each of `texts`, with the tokenizer.json at
// `tokenizer_json`; `add_special_tokens` applies its post-processor (BOS/EOS).
std::vector<std::vector<uint32_t>> hf_rust_encode(const std::string& tokenizer_json,
                                                  const std::vector<std::string>& texts, bool add_special_tokens);

// The same with the peer's truncation and padding to `max_length` (pad id
// `pad_id`, its post-processor applied): each text's ids and attention mask.
struct PaddedPeerIds {
  std::vector<uint32_t> ids, mask;
};
std::vector<PaddedPeerIds> hf_rust_encode_padded(const std::string& tokenizer_json,
                                                 const std::vector<std::string>& texts, size_t max_length,
                                                 uint32_t pad_id);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs the Node script tests/peers/<script> with (already shell-quoted)
// arguments; throws std::runtime_error with the setup hint when Node or the npm
// `package` the script needs is missing, or when the script fails.
CommandResult run_node_script(const std::string& script, const std::string& arguments, const std::string& package);
// Runs a shell command line, capturing its output.
CommandResult run_command(const std::string& command);
// Runs the titan CLI with the given (already shell-quoted) arguments.
CommandResult run_titan(const std::string& arguments);
std::string shell_quote(const std::string& text);

}  // namespace titan::data::testing
