#include "data/peer_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace titan::data::testing {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("titan_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run: " + command);
  char buffer[4096];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandResult run_titan(const std::string& arguments) {
  return run_command(shell_quote(TITAN_CLI_PATH) + " " + arguments);
}

namespace {

const std::string kSetupHint =
    "the tokenizer compatibility tests need Node and the npm packages in tests/peers: run scripts/setup.sh";

void check_peers_installed() {
  static const bool checked = [] {
    if (run_command("command -v node").exit_code != 0) {
      throw std::runtime_error("node is not on PATH; " + kSetupHint);
    }
    const std::filesystem::path modules = std::filesystem::path(TITAN_TEST_PEERS_DIR) / "node_modules";
    for (const char* package : {"tiktoken", "llama3-tokenizer-js", "@huggingface/tokenizers", "@anush008/tokenizers"}) {
      if (!std::filesystem::exists(modules / package / "package.json")) {
        throw std::runtime_error(std::string("npm package ") + package + " is not installed in " + modules.string() +
                                 "; " + kSetupHint);
      }
    }
    return true;
  }();
  (void)checked;
}

}  // namespace

CommandResult run_node_script(const std::string& script, const std::string& arguments, const std::string& package) {
  if (run_command("command -v node").exit_code != 0) throw std::runtime_error("node is not on PATH; " + kSetupHint);
  const std::filesystem::path peers(TITAN_TEST_PEERS_DIR);
  if (!std::filesystem::exists(peers / "node_modules" / package / "package.json")) {
    throw std::runtime_error("npm package " + package + " is not installed in " + (peers / "node_modules").string() +
                             "; " + kSetupHint);
  }
  CommandResult result = run_command("node " + shell_quote((peers / script).string()) + " " + arguments);
  if (result.exit_code != 0) {
    throw std::runtime_error(script + " failed (exit " + std::to_string(result.exit_code) + "): " + result.output +
                             "\n" + kSetupHint);
  }
  return result;
}

std::vector<uint32_t> peer_encode(const std::string& peer, const std::string& encoding, const std::string& text,
                                  bool allow_special) {
  check_peers_installed();
  TempDir dir;
  write_bytes(dir / "input.txt", text);
  const std::string script = std::string(TITAN_TEST_PEERS_DIR) + "/encode.cjs";
  const CommandResult result =
      run_command("node " + shell_quote(script) + " " + peer + " " + (encoding.empty() ? "-" : encoding) + " " +
                  shell_quote((dir / "input.txt").string()) + " " + shell_quote((dir / "ids.bin").string()) + " " +
                  (allow_special ? "all" : "none"));
  if (result.exit_code != 0) {
    throw std::runtime_error("peer " + peer + " failed (exit " + std::to_string(result.exit_code) +
                             "): " + result.output + "\n" + kSetupHint);
  }
  const std::string bytes = read_bytes(dir / "ids.bin");
  std::vector<uint32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

namespace {

nlohmann::json run_encode_batch(const std::string& tokenizer_json, const nlohmann::json& request) {
  check_peers_installed();
  TempDir dir;
  write_bytes(dir / "input.json", request.dump());
  run_node_script("encode_batch.cjs",
                  shell_quote(tokenizer_json) + " " + shell_quote((dir / "input.json").string()) + " " +
                      shell_quote((dir / "ids.json").string()),
                  "@anush008/tokenizers");
  return nlohmann::json::parse(read_bytes(dir / "ids.json"));
}

}  // namespace

std::vector<std::vector<uint32_t>> hf_rust_encode(const std::string& tokenizer_json,
                                                  const std::vector<std::string>& texts, bool add_special_tokens) {
  return run_encode_batch(tokenizer_json, {{"texts", texts}, {"add_special_tokens", add_special_tokens}})
      .get<std::vector<std::vector<uint32_t>>>();
}

std::vector<PaddedPeerIds> hf_rust_encode_padded(const std::string& tokenizer_json,
                                                 const std::vector<std::string>& texts, size_t max_length,
                                                 uint32_t pad_id) {
  const nlohmann::json rows = run_encode_batch(
      tokenizer_json, {{"texts", texts}, {"add_special_tokens", true}, {"max_length", max_length}, {"pad_id", pad_id}});
  std::vector<PaddedPeerIds> out;
  for (const auto& row : rows) {
    out.push_back({row.at("ids").get<std::vector<uint32_t>>(), row.at("mask").get<std::vector<uint32_t>>()});
  }
  return out;
}

}  // namespace titan::data::testing
