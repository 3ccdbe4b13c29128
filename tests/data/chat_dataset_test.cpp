// Chat datasets: reading conversations (JSONL and zstd), rendering a Llama 3
// conversation into tokens with a loss mask checked against ids built by hand,
// the overlong policy's counts, and errors that name file and line.
#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>

#include "data/peer_support.h"
#include "support/expect_error.h"
#include "titan/core/error.h"
#include "titan/data/chat_dataset.h"
#include "titan/data/chat_jsonl.h"
#include "titan/data/tokenizer_loader.h"

namespace titan::data {
namespace chat_dataset_test {

// The Llama 3 tokenizer's special tokens, as Meta publishes them.
constexpr uint32_t kBeginOfText = 128000, kStartHeader = 128006, kEndHeader = 128007, kEndOfTurn = 128009;

const Tokenizer& llama3() {
  static const std::shared_ptr<const Tokenizer> tokenizer = load_tokenizer("llama3");
  return *tokenizer;
}

std::vector<uint32_t> plain(const std::string& text) { return llama3().encode(text); }  // no special tokens

std::vector<ChatMessage> conversation() {
  return {{"system", "Be brief."},
          {"user", "Hi there"},
          {"assistant", "Hello! How can I help?"},
          {"user", "Bye"},
          {"assistant", "See you."}};
}

using titan::testing::expect_error;

TEST(ChatDataset, Llama3ConversationTokensAndMaskAreExact) {
  // Expected ids, piece by piece: each header is <|start_header_id|> role
  // <|end_header_id|> "\n\n", each turn ends in <|eot_id|>; the trained tokens
  // are each assistant turn's content and its <|eot_id|>.
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
  auto add = [&](const std::vector<uint32_t>& piece, bool trained) {
    ids.insert(ids.end(), piece.begin(), piece.end());
    mask.insert(mask.end(), piece.size(), trained ? 1 : 0);
  };
  auto header = [&](const std::string& role) {
    add({kStartHeader}, false);
    add(plain(role), false);
    add({kEndHeader}, false);
    add(plain("\n\n"), false);
  };
  add({kBeginOfText}, false);
  for (const auto& message : conversation()) {
    header(message.role);
    const bool assistant = message.role == "assistant";
    add(plain(message.content), assistant);
    add({kEndOfTurn}, assistant);
  }
  const ChatTemplate chat_template = ChatTemplate::load("llama3");
  const auto messages = conversation();
  const ChatTokens got = tokenize_chat(llama3(), chat_template, messages, ChatTrainOn::assistant);
  EXPECT_EQ(got.tokens, ids);
  EXPECT_EQ(got.mask, mask);
  // The segments' ids equal the whole rendered text's.
  EncodeOptions special;
  special.allow_special = true;
  EXPECT_EQ(llama3().encode(chat_template.render(messages, false), special), ids);

  const ChatTokens all = tokenize_chat(llama3(), chat_template, messages, ChatTrainOn::all);
  EXPECT_EQ(all.tokens, ids);
  EXPECT_EQ(all.mask, std::vector<uint8_t>(ids.size(), 1));
}

TEST(ChatDataset, PromptCompletionIsAUserAndAnAssistantTurn) {
  const auto pair = parse_chat_line(R"({"prompt": "2+2?", "completion": "4", "system": "math"})", "x:1");
  ASSERT_EQ(pair.size(), 3u);
  EXPECT_EQ(pair[0].role, "system");
  EXPECT_EQ(pair[0].content, "math");
  EXPECT_EQ(pair[1].role, "user");
  EXPECT_EQ(pair[1].content, "2+2?");
  EXPECT_EQ(pair[2].role, "assistant");
  EXPECT_EQ(pair[2].content, "4");
  const auto without_system = parse_chat_line(R"({"prompt": "a", "completion": "b"})", "x:1");
  ASSERT_EQ(without_system.size(), 2u);
  EXPECT_EQ(without_system[0].role, "user");

  testing::TempDir dir;
  testing::write_bytes(dir / "pairs.jsonl",
                       "{\"prompt\": \"2+2?\", \"completion\": \"4\"}\n"
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, "
                       "{\"role\": \"assistant\", \"content\": \"4\"}]}\n");
  const auto records = read_chat_file(dir / "pairs.jsonl", ChatTrainOn::assistant);
  ASSERT_EQ(records.size(), 2u);
  const ChatTemplate chat_template = ChatTemplate::load("llama3");
  const auto a = tokenize_chat(llama3(), chat_template, records[0].messages, ChatTrainOn::assistant);
  const auto b = tokenize_chat(llama3(), chat_template, records[1].messages, ChatTrainOn::assistant);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.mask, b.mask);
  // "4" and <|eot_id|>.
  EXPECT_EQ(std::count(a.mask.begin(), a.mask.end(), 1), 2);
}

TEST(ChatDataset, BadLinesNameFileAndLine) {
  testing::TempDir dir;
  const std::string good = R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})";
  auto check = [&](const std::string& bad, std::initializer_list<std::string> fragments,
                   ChatTrainOn train_on = ChatTrainOn::assistant) {
    const auto file = dir / "bad.jsonl";
    testing::write_bytes(file, good + "\n\n" + bad + "\n" + good + "\n");
    std::vector<std::string> expected{file.string() + ":3:"};
    expected.insert(expected.end(), fragments);
    try {
      read_chat_file(file, train_on);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      for (const auto& fragment : expected) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
            << "'" << fragment << "' not in: " << e.what();
      }
    }
  };
  check(R"({"messages": [{"role": "user", "content": "a"})", {"not valid JSON"});
  check(R"({"messages": [{"role": "tool", "content": "a"}]})", {"messages[0]", "role 'tool'"});
  check(R"({"messages": [{"role": "user"}]})", {"messages[0]", "no \"content\""});
  check(R"({"messages": [{"role": "user", "content": 3}]})", {"\"content\" must be a string"});
  check(R"({"messages": []})", {"empty"});
  check(R"({"text": "a"})", {"expected \"messages\""});
  check(R"({"prompt": "a"})", {"no \"completion\""});
  check(R"([1, 2])", {"expected a JSON object"});
  check(R"({"messages": [{"role": "user", "content": "a"}]})", {"no assistant turn"});
  // Training on every token, a conversation without an assistant turn is fine.
  testing::write_bytes(dir / "user_only.jsonl", R"({"messages": [{"role": "user", "content": "a"}]})");
  EXPECT_EQ(read_chat_file(dir / "user_only.jsonl", ChatTrainOn::all).size(), 1u);
}

std::string zstd_compress(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

TEST(ChatDataset, ZstdInputReadsLikeThePlainFile) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += fmt::format(R"({{"prompt": "question {}", "completion": "answer {}"}})", i, i * 7) + "\n";
  }
  testing::write_bytes(dir / "chat.jsonl", text);
  // Two frames back to back, as `zstd` appends them.
  const size_t half = text.find('\n', text.size() / 2) + 1;
  testing::write_bytes(dir / "chat.jsonl.zst", zstd_compress(text.substr(0, half)) + zstd_compress(text.substr(half)));
  const auto plain_records = read_chat_file(dir / "chat.jsonl", ChatTrainOn::assistant);
  const auto zstd_records = read_chat_file(dir / "chat.jsonl.zst", ChatTrainOn::assistant);
  ASSERT_EQ(plain_records.size(), 2000u);
  ASSERT_EQ(zstd_records.size(), plain_records.size());
  for (size_t i = 0; i < plain_records.size(); ++i) {
    EXPECT_EQ(zstd_records[i].line, plain_records[i].line);
    ASSERT_EQ(zstd_records[i].messages.size(), 2u);
    EXPECT_EQ(zstd_records[i].messages[1].content, plain_records[i].messages[1].content);
  }
  // A truncated or foreign file names itself.
  const std::string compressed = zstd_compress(text);
  testing::write_bytes(dir / "cut.jsonl.zst", compressed.substr(0, compressed.size() / 2));
  expect_error([&] { read_chat_file(dir / "cut.jsonl.zst", ChatTrainOn::assistant); },
               {(dir / "cut.jsonl.zst").string(), "truncated"});
  testing::write_bytes(dir / "plain.jsonl.zst", text);
  expect_error([&] { read_chat_file(dir / "plain.jsonl.zst", ChatTrainOn::assistant); },
               {(dir / "plain.jsonl.zst").string(), "zstd"});
}

TEST(ChatDataset, OverlongPolicyKeepsTruncatesOrDrops) {
  const std::vector<uint8_t> mask{0, 0, 0, 1, 1, 0, 1};
  EXPECT_EQ(chat_kept_length(mask, 0, ChatOverlong::truncate), 7u);  // no limit
  EXPECT_EQ(chat_kept_length(mask, 7, ChatOverlong::drop), 7u);      // fits
  EXPECT_EQ(chat_kept_length(mask, 5, ChatOverlong::truncate), 5u);
  EXPECT_EQ(chat_kept_length(mask, 4, ChatOverlong::truncate), 4u);            // token 3 is still a trained label
  EXPECT_EQ(chat_kept_length(mask, 3, ChatOverlong::truncate), std::nullopt);  // nothing trained would remain
  EXPECT_EQ(chat_kept_length(mask, 5, ChatOverlong::drop), std::nullopt);
  // Token 0 is never a label: its mask alone does not keep a conversation.
  EXPECT_EQ(chat_kept_length(std::vector<uint8_t>{1, 0, 0}, 2, ChatOverlong::truncate), std::nullopt);

  testing::TempDir dir;
  std::string long_answer;
  for (int i = 0; i < 40; ++i) long_answer += "word ";
  std::string long_question = long_answer + long_answer;
  testing::write_bytes(dir / "chat.jsonl", fmt::format(R"({{"prompt": "short", "completion": "fine"}})"
                                                       "\n"
                                                       R"({{"prompt": "short", "completion": "{}"}})"
                                                       "\n"
                                                       R"({{"prompt": "{}", "completion": "x"}})"
                                                       "\n",
                                                       long_answer, long_question));
  const ChatTemplate chat_template = ChatTemplate::load("llama3");
  ChatOptions options;
  options.max_tokens = 40;
  ChatStats truncated, dropped;
  const auto kept = tokenize_chat_files({dir / "chat.jsonl"}, llama3(), chat_template, options, 2, &truncated);
  options.overlong = ChatOverlong::drop;
  const auto left = tokenize_chat_files({dir / "chat.jsonl"}, llama3(), chat_template, options, 2, &dropped);
  // Truncate: the long answer is cut to 40 tokens; the long question leaves no answer token: dropped.
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[1].tokens.size(), 40u);
  EXPECT_EQ(truncated.conversations, 2u);
  EXPECT_EQ(truncated.truncated, 1u);
  EXPECT_EQ(truncated.dropped, 1u);
  EXPECT_EQ(truncated.tokens, kept[0].tokens.size() + 40);
  // Drop: both long ones go.
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].tokens, kept[0].tokens);
  EXPECT_EQ(dropped.conversations, 1u);
  EXPECT_EQ(dropped.truncated, 0u);
  EXPECT_EQ(dropped.dropped, 2u);
  EXPECT_EQ(dropped.trained_tokens, static_cast<uint64_t>(std::count(left[0].mask.begin(), left[0].mask.end(), 1)));
  EXPECT_EQ(dropped.summary(), fmt::format("1 conversations, {} tokens ({} trained), 0 truncated, 2 dropped",
                                           dropped.tokens, dropped.trained_tokens));
}

TEST(ChatDataset, ThreadsGiveTheSameTokens) {
  testing::TempDir dir;
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += fmt::format(R"({{"messages": [{{"role": "user", "content": "q{}"}}, {{"role": "assistant", "content": )"
                        R"("a {} b"}}]}})",
                        i, i * i) +
            "\n";
  }
  testing::write_bytes(dir / "chat.jsonl", text);
  const ChatTemplate chat_template = ChatTemplate::load("llama3");
  const auto one = tokenize_chat_files({dir / "chat.jsonl"}, llama3(), chat_template, {}, 1, nullptr);
  const auto many = tokenize_chat_files({dir / "chat.jsonl"}, llama3(), chat_template, {}, 4, nullptr);
  ASSERT_EQ(one.size(), 300u);
  ASSERT_EQ(many.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(many[i].tokens, one[i].tokens);
    EXPECT_EQ(many[i].mask, one[i].mask);
  }
}

TEST(ChatDataset, TemplateComesFromTheNameOrBesideTheTokenizer) {
  testing::TempDir dir;
  expect_error([&] { resolve_chat_template("", "llama3", "chat.template"); }, {"chat.template", "tokenizer_config"});
  EXPECT_NE(resolve_chat_template("qwen3", "llama3", "chat.template"), nullptr);
  EXPECT_EQ(parse_chat_train_on("all", "k"), ChatTrainOn::all);
  EXPECT_EQ(parse_chat_overlong("drop", "k"), ChatOverlong::drop);
  expect_error([] { parse_chat_train_on("assistants", "chat.train_on"); }, {"chat.train_on", "assistants"});
  expect_error([] { parse_chat_overlong("cut", "chat.overlong"); }, {"chat.overlong", "cut"});
}

}  // namespace chat_dataset_test
}  // namespace titan::data
