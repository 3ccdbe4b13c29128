// `titan generate --chat` on a tiny exported model whose weights are set by
// hand to a bigram chain (the generation prompt's last token -> "H" -> "i" ->
// <|eot_id|>), so greedy decoding must answer "Hi" and stop at the template's
// end-of-turn token: checks the prompt ids against the template rendered and
// encoded here, the stop, and the errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_job.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/data/chat_template.h"
#include "titan/data/tokenizer_loader.h"

namespace titan {
namespace generate_chat_test {

namespace fs = std::filesystem;

const std::string kCli = TITAN_CLI_PATH;

fs::path workdir() { return testing::per_test_folder("generate_chat_test"); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

std::vector<int64_t> ids_in(const std::string& text) {
  std::vector<int64_t> ids;
  std::istringstream stream(text);
  for (int64_t id; stream >> id;) ids.push_back(id);
  return ids;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

class GenerateChat : public ::testing::Test {
 protected:
  // A 1-step training run for its export (job.toml, a tokenizer trained with
  // the default special tokens, the chat ones among them).
  void SetUp() override {
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    const fs::path log = workdir() / "setup.log";
    testing::prepare_test_corpus(workdir() / "data", log);
    const fs::path config = testing::write_tiny_llama_config(workdir() / "model");
    testing::run_ok(testing::tiny_train_command(workdir() / "data", config, workdir() / "job",
                                                "--training.steps 1 --validation.enable false"),
                    log);
  }

  static std::string export_folder() { return (workdir() / "job" / "checkpoint" / "step-000001").string(); }

  static std::string generate(const std::string& extra, int* status = nullptr) {
    std::string output;
    const int code = testing::run_command(kCli + " generate --checkpoint " + export_folder() + " " + extra,
                                          workdir() / "generate.log", &output);
    if (status != nullptr) {
      *status = code;
    } else {
      EXPECT_EQ(code, 0) << extra << "\n" << output;
    }
    return output;
  }
};

// Writes weights under which the model is the bigram chain `next` (each
// listed token predicts its successor; every other token predicts id 0):
// attention and feed-forward outputs are zero, so the final norm sees the
// token's embedding, a one-hot row per chain token, and the output projection
// maps that row to the next token's logit.
void write_chain_weights(const fs::path& safetensors, const std::vector<std::pair<uint32_t, uint32_t>>& next) {
  std::map<std::string, Tensor> tensors = testing::read_all_tensors(safetensors);
  ASSERT_FALSE(tensors.empty());
  const Shape embedding_shape = tensors.at("tok_embeddings.weight").shape();
  const int64_t vocab = embedding_shape[0], dim = embedding_shape[1];
  ASSERT_LE(static_cast<int64_t>(next.size()) + 1, dim);
  std::vector<float> embedding(static_cast<size_t>(vocab * dim), 0.0f), output(static_cast<size_t>(vocab * dim), 0.0f);
  for (int64_t token = 0; token < vocab; ++token) embedding[static_cast<size_t>(token * dim + dim - 1)] = 1.0f;
  for (size_t i = 0; i < next.size(); ++i) {
    const auto [from, to] = next[i];
    std::fill_n(embedding.begin() + static_cast<int64_t>(from) * dim, dim, 0.0f);
    embedding[static_cast<size_t>(from) * static_cast<size_t>(dim) + i] = 1.0f;
    output[static_cast<size_t>(to) * static_cast<size_t>(dim) + i] = 10.0f;
  }
  checkpoint::NamedTensors written;
  for (auto& [name, tensor] : tensors) {
    if (name == "tok_embeddings.weight") {
      tensor = Tensor::from_floats(embedding, tensor.shape());
    } else if (name == "output.weight") {
      tensor = Tensor::from_floats(output, tensor.shape());
    } else if (name == "norm.weight") {
      tensor = Tensor::full(tensor.shape(), 1.0);
    } else if (name.ends_with("attention.wo.weight") || name.ends_with("feed_forward.w2.weight")) {
      tensor = Tensor::zeros(tensor.shape());
    }
    written.emplace_back(name, tensor);
  }
  checkpoint::write_safetensors(safetensors.string(), written);
}

TEST_F(GenerateChat, PromptIsTheTemplateAndTheAnswerStopsAtEndOfTurn) {
  const auto tokenizer = data::load_tokenizer((fs::path(export_folder()) / "tokenizer.json").string());
  const uint32_t eot = tokenizer->special_token_id("<|eot_id|>");
  const std::vector<data::ChatMessage> messages = {{"system", "Be brief."}, {"user", "Say hi."}};
  const std::string rendered = data::ChatTemplate::load("llama3").render(messages, true);
  // Independent of the template code: Llama 3's format as Meta documents it.
  ASSERT_EQ(rendered,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nSay hi.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const std::vector<uint32_t> prompt = tokenizer->encode(rendered, {.allow_special = true});
  ASSERT_EQ(prompt.front(), *tokenizer->bos_id());
  const std::vector<uint32_t> h = tokenizer->encode("H"), i = tokenizer->encode("i");
  ASSERT_EQ(h.size(), 1u);
  ASSERT_EQ(i.size(), 1u);
  ASSERT_NE(prompt.back(), h[0]);
  write_chain_weights(fs::path(export_folder()) / "model.safetensors",
                      {{prompt.back(), h[0]}, {h[0], i[0]}, {i[0], eot}});

  const std::string output = generate(
      "--chat --chat-template llama3 --system 'Be brief.' --message 'Say hi.' --max-new-tokens 10 --ids --prompt-ids");
  const std::vector<std::string> lines = lines_of(output);
  ASSERT_EQ(lines.size(), 3u) << output;
  EXPECT_EQ(lines[0], "Hi");  // the answer alone: no prompt, no end-of-turn text
  ASSERT_TRUE(lines[1].starts_with("prompt ids:")) << output;
  EXPECT_EQ(ids_in(lines[1].substr(11)), std::vector<int64_t>(prompt.begin(), prompt.end()));
  // Stopped at <|eot_id|> with 7 of the 10 new tokens left.
  EXPECT_EQ(ids_in(lines[2]), (std::vector<int64_t>{h[0], i[0], eot}));
  EXPECT_EQ(output.find("<|eot_id|>"), std::string::npos);

  // --prompt is the user's message when --message is absent; earlier turns come from --messages.
  EXPECT_EQ(first_line(generate("--chat --chat-template llama3 --system 'Be brief.' --prompt 'Say hi.'")), "Hi");
  const fs::path turns = workdir() / "turns.jsonl";
  std::ofstream(turns) << R"({"role": "system", "content": "Be brief."})"
                       << "\n\n"
                       << R"({"role": "user", "content": "Say hi."})"
                       << "\n";
  const std::string from_file = generate("--chat --chat-template llama3 --prompt-ids --messages " + turns.string());
  ASSERT_EQ(lines_of(from_file).size(), 2u) << from_file;
  EXPECT_EQ(lines_of(from_file)[0], "Hi");
  EXPECT_EQ(ids_in(lines_of(from_file)[1].substr(11)), std::vector<int64_t>(prompt.begin(), prompt.end()));
  const fs::path whole = workdir() / "whole.jsonl";
  std::ofstream(whole) << R"({"messages": [{"role": "system", "content": "Be brief."}, )"
                       << R"({"role": "user", "content": "Say hi."}]})"
                       << "\n";
  EXPECT_EQ(first_line(generate("--chat --chat-template llama3 --messages " + whole.string())), "Hi");

  // Without --chat-template: the template the job was fine-tuned with (its chat.template).
  const fs::path job_toml = fs::path(export_folder()) / "job.toml";
  std::string toml = testing::file_text(job_toml);
  const size_t key = toml.find("template = \"\"");
  ASSERT_NE(key, std::string::npos) << toml;
  toml.replace(key, 13, "template = \"llama3\"");
  std::ofstream(job_toml) << toml;
  EXPECT_EQ(first_line(generate("--chat --system 'Be brief.' --message 'Say hi.'")), "Hi");
}

TEST_F(GenerateChat, BadInputIsAClearError) {
  int status = 0;
  // No template named and none beside the tokenizer: the error names the option.
  std::string output = generate("--chat --message hello", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("pass --chat-template"), std::string::npos) << output;
  EXPECT_NE(output.find(export_folder()), std::string::npos) << output;

  const fs::path bad = workdir() / "bad.jsonl";
  std::ofstream(bad) << R"({"role": "user", "content": "hello"})"
                     << "\n"
                     << R"({"role": "robot", "content": "beep"})"
                     << "\n";
  output = generate("--chat --chat-template llama3 --messages " + bad.string(), &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find(bad.string() + ":2:"), std::string::npos) << output;
  EXPECT_NE(output.find("robot"), std::string::npos) << output;

  std::ofstream(bad) << "\n{\"role\": \"user\", \"content\": \"hello\"\n";
  output = generate("--chat --chat-template llama3 --messages " + bad.string(), &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find(bad.string() + ":2: not valid JSON"), std::string::npos) << output;

  // A template whose end-of-turn token this tokenizer lacks: the answer could never end.
  output = generate("--chat --chat-template qwen3 --message hello", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("<|im_end|>"), std::string::npos) << output;
  EXPECT_NE(output.find("tokenizer.json"), std::string::npos) << output;

  output = generate("--message hello", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(output.find("--message needs --chat"), std::string::npos) << output;
}

}  // namespace generate_chat_test
}  // namespace titan
