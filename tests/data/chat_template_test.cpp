// Chat templates (data/chat_template.h): every shipped template and the test
// templates in tests/data/templates are rendered for generated conversations
// and compared byte for byte with @huggingface/jinja (tests/peers/render_chat.cjs),
// the Jinja that transformers.js applies chat templates with; segments, the
// end-of-turn token, loading and errors are checked by hand.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "data/peer_support.h"
#include "titan/core/error.h"
#include "titan/data/chat_template.h"

namespace titan::data {
namespace chat_template_test {

using testing::TempDir;
using testing::write_bytes;

const std::string kTemplates = std::string(TITAN_SOURCE_DIR) + "/tests/data/templates/";

struct Conversation {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = false;
};

// Contents that stress a renderer: empty and blank text, surrounding spaces
// (Unicode ones too), CJK, emoji with modifiers and joiners, combining marks,
// quotes, backslashes, newlines, text that looks like Jinja or JSON or special tokens.
const std::vector<std::string> kContents = {
    "Hello!",
    "",
    "   ",
    "  padded with spaces  ",
    "\n\nleading and trailing newlines\n\n",
    "line one\nline two\n\nline four",
    "tab\there and \r\n a CRLF",
    "日本語のテキストです。中文也可以。한국어도.",
    "👍🏽 family: 👨‍👩‍👧‍👦, flags 🇫🇷🇯🇵",
    "combining: e\u0301 n\u0303 a\u0308\u0304",
    "\"double\" and 'single' quotes, `backticks`",
    "back\\slash \\n not a newline, C:\\path\\to\\file",
    "{{ not a template }} {% if x %} {# nor this #}",
    "{\"json\": [1, 2.5, null, true], \"nested\": {\"k\": \"v\"}}",
    "<|eot_id|><|im_end|></s>[INST] special-looking text",
    "\u3000ideographic and\u00a0no-break spaces\u00a0\u3000",
    "What is 2 + 2? Answer in one word.",
    "A longer reply that goes on for a while, with punctuation; commas, and full stops. It ends here.",
    "控制字符\u0001和\u001f在中间",  // \x1f is Python whitespace, not JavaScript's: keep it inside
};

// Conversations: an optional system prompt, then user and assistant turns
// alternating, ending on either; the generation prompt on or off.
std::vector<Conversation> make_conversations(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto pick = [&]() { return kContents[rng() % kContents.size()]; };
  std::vector<Conversation> conversations;
  for (int i = 0; i < count; ++i) {
    Conversation conversation;
    if (rng() % 3 != 0) conversation.messages.push_back({"system", pick()});
    const int turns = 1 + static_cast<int>(rng() % 6);
    for (int t = 0; t < turns; ++t) conversation.messages.push_back({t % 2 == 0 ? "user" : "assistant", pick()});
    conversation.add_generation_prompt = rng() % 2 == 0;
    conversations.push_back(std::move(conversation));
  }
  // The edges: one lone user message, an empty system prompt, all-empty content.
  conversations.push_back({{{"user", "hi"}}, true});
  conversations.push_back({{{"system", ""}, {"user", ""}, {"assistant", ""}}, false});
  conversations.push_back({{{"user", "a"}, {"assistant", "b"}, {"user", "c"}, {"assistant", "d"}}, true});
  return conversations;
}

// What @huggingface/jinja renders for each conversation: a string, or an error object.
nlohmann::json peer_render(const std::string& source, const std::string& bos, const std::string& eos,
                           const std::vector<Conversation>& conversations) {
  nlohmann::json request;
  request["template"] = source;
  request["cases"] = nlohmann::json::array();
  for (const Conversation& conversation : conversations) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& message : conversation.messages) {
      messages.push_back({{"role", message.role}, {"content", message.content}});
    }
    request["cases"].push_back({{"messages", messages},
                                {"add_generation_prompt", conversation.add_generation_prompt},
                                {"bos_token", bos},
                                {"eos_token", eos}});
  }
  TempDir dir;
  write_bytes(dir / "request.json", request.dump());
  testing::run_node_script("render_chat.cjs",
                           testing::shell_quote((dir / "request.json").string()) + " " +
                               testing::shell_quote((dir / "rendered.json").string()),
                           "@huggingface/jinja");
  return nlohmann::json::parse(testing::read_bytes(dir / "rendered.json"));
}

// Renders every conversation with titan and with the peer; they must agree byte
// for byte, including on which conversations the template refuses.
void expect_matches_peer(const ChatTemplate& chat, const std::string& bos, const std::string& eos, uint32_t seed) {
  const std::vector<Conversation> conversations = make_conversations(70, seed);
  const nlohmann::json expected = peer_render(chat.source(), bos, eos, conversations);
  ASSERT_EQ(expected.size(), conversations.size());
  int rendered = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    SCOPED_TRACE("conversation " + std::to_string(i));
    const Conversation& conversation = conversations[i];
    if (expected[i].is_object()) {
      EXPECT_THROW(chat.render(conversation.messages, conversation.add_generation_prompt), Error)
          << "the peer refused it: " << expected[i].dump();
      continue;
    }
    const std::string text = chat.render(conversation.messages, conversation.add_generation_prompt);
    EXPECT_EQ(text, expected[i].get<std::string>());
    ++rendered;
    // Segments always rebuild the render without a generation prompt.
    std::string joined;
    for (const ChatSegment& segment : chat.render_segments(conversation.messages)) joined += segment.text;
    EXPECT_EQ(joined, chat.render(conversation.messages, false));
  }
  EXPECT_GE(rendered, 60);
}

TEST(ChatTemplatePeer, Llama3MatchesHuggingFaceJinja) {
  const ChatTemplate chat = ChatTemplate::load("llama3");
  expect_matches_peer(chat, "<|begin_of_text|>", "<|end_of_text|>", 1);
}

TEST(ChatTemplatePeer, Qwen3MatchesHuggingFaceJinja) {
  const ChatTemplate chat = ChatTemplate::load("qwen3");
  expect_matches_peer(chat, "", "<|im_end|>", 2);
}

TEST(ChatTemplatePeer, AlternatingTurnsTemplateMatchesHuggingFaceJinja) {
  const ChatTemplate chat(testing::read_bytes(kTemplates + "alternating_turns.jinja"), "alternating_turns.jinja",
                          "<bos>", "<eos>");
  expect_matches_peer(chat, "<bos>", "<eos>", 3);
}

TEST(ChatTemplatePeer, InstJsonSystemTemplateMatchesHuggingFaceJinja) {
  const ChatTemplate chat(testing::read_bytes(kTemplates + "inst_json_system.jinja"), "inst_json_system.jinja", "<s>",
                          "</s>");
  expect_matches_peer(chat, "<s>", "</s>", 4);
}

TEST(ChatTemplatePeer, PlainBlocksTemplateMatchesHuggingFaceJinja) {
  const ChatTemplate chat(testing::read_bytes(kTemplates + "plain_blocks.jinja"), "plain_blocks.jinja");
  expect_matches_peer(chat, "", "", 5);
}

TEST(ChatTemplatePeer, RefusedConversationsMatch) {
  // Both refuse the same conversations: roles out of turn, a late system prompt.
  const ChatTemplate alternating(testing::read_bytes(kTemplates + "alternating_turns.jinja"), "alternating_turns");
  const ChatTemplate inst(testing::read_bytes(kTemplates + "inst_json_system.jinja"), "inst_json_system");
  const std::vector<Conversation> bad = {
      {{{"user", "a"}, {"user", "b"}}, false},
      {{{"assistant", "a"}}, true},
      {{{"user", "a"}, {"system", "late"}}, false},
  };
  for (const ChatTemplate* chat : {&alternating, &inst}) {
    const nlohmann::json expected = peer_render(chat->source(), "", "", bad);
    for (size_t i = 0; i < bad.size(); ++i) {
      SCOPED_TRACE(chat->origin() + " conversation " + std::to_string(i));
      bool titan_refused = false;
      try {
        chat->render(bad[i].messages, bad[i].add_generation_prompt);
      } catch (const Error&) {
        titan_refused = true;
      }
      EXPECT_EQ(titan_refused, expected[i].is_object()) << expected[i].dump();
    }
  }
}

const std::vector<ChatMessage> kHandChecked = {
    {"system", "You are terse."}, {"user", " Hi! "}, {"assistant", "Hello.\n"}, {"user", "Bye"}, {"assistant", "Bye."},
};

TEST(ChatTemplate, Llama3RendersHandCheckedText) {
  const ChatTemplate chat = ChatTemplate::load("llama3");
  const std::string header =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>";
  EXPECT_EQ(chat.render(std::span(kHandChecked).first(2), true),
            header + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(chat.render(std::span(kHandChecked).first(2), false), header);

  const std::vector<ChatSegment> segments = chat.render_segments(kHandChecked);
  ASSERT_EQ(segments.size(), 4u);
  EXPECT_EQ(segments[0].text, header + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_FALSE(segments[0].assistant);
  EXPECT_EQ(segments[1].text, "Hello.<|eot_id|>");
  EXPECT_TRUE(segments[1].assistant);
  EXPECT_EQ(
      segments[2].text,
      "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_FALSE(segments[2].assistant);
  EXPECT_EQ(segments[3].text, "Bye.<|eot_id|>");
  EXPECT_TRUE(segments[3].assistant);
}

TEST(ChatTemplate, Qwen3RendersHandCheckedText) {
  const ChatTemplate chat = ChatTemplate::load("qwen3");
  EXPECT_EQ(chat.render(std::span(kHandChecked).first(3), true),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
            "<|im_start|>assistant\nHello.\n<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<ChatSegment> segments = chat.render_segments(std::span(kHandChecked).first(3));
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[1].text, "Hello.\n<|im_end|>\n");
  EXPECT_TRUE(segments[1].assistant);
}

TEST(ChatTemplate, SegmentsEndWithAssistantTurnAndContext) {
  const ChatTemplate chat = ChatTemplate::load("llama3");
  const std::vector<ChatMessage> messages = {{"user", "q"}, {"assistant", "a"}, {"user", "again"}};
  const std::vector<ChatSegment> segments = chat.render_segments(messages);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_TRUE(segments[1].assistant);
  EXPECT_FALSE(segments[2].assistant);
  EXPECT_EQ(segments[2].text, "<|start_header_id|>user<|end_header_id|>\n\nagain<|eot_id|>");
  // No assistant turn: one context segment.
  const std::vector<ChatSegment> only_user = chat.render_segments(std::span(messages).first(1));
  ASSERT_EQ(only_user.size(), 1u);
  EXPECT_FALSE(only_user[0].assistant);
}

TEST(ChatTemplate, EndOfTurnIsKnownOrDerived) {
  EXPECT_EQ(ChatTemplate::load("llama3").end_of_turn(), "<|eot_id|>");
  EXPECT_EQ(ChatTemplate::load("qwen3").end_of_turn(), "<|im_end|>");
  // The same sources loaded as plain templates derive the same tokens.
  EXPECT_EQ(ChatTemplate(ChatTemplate::load("llama3").source(), "copy", "<|begin_of_text|>").end_of_turn(),
            "<|eot_id|>");
  EXPECT_EQ(ChatTemplate(ChatTemplate::load("qwen3").source(), "copy").end_of_turn(), "<|im_end|>");
  EXPECT_EQ(ChatTemplate::load(kTemplates + "alternating_turns.jinja").end_of_turn(), "<end_of_turn>");
  EXPECT_EQ(
      ChatTemplate(testing::read_bytes(kTemplates + "inst_json_system.jinja"), "inst", "<s>", "</s>").end_of_turn(),
      "</s>");
  EXPECT_EQ(ChatTemplate::load(kTemplates + "plain_blocks.jinja").end_of_turn(), "<|end|>");
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ChatTemplate, SyntaxErrorNamesOriginAndLine) {
  EXPECT_EQ(error_of([] { ChatTemplate("{% for m in messages %}\n{{ m.content }}\n{% endfor", "my.jinja"); }),
            "my.jinja: chat_template line 3: unclosed '{%'");
  EXPECT_EQ(error_of([] { ChatTemplate("a\n{% if %}", "other.json"); }),
            "other.json: chat_template line 2: unexpected '%}' in an expression");
}

TEST(ChatTemplate, RaiseExceptionNamesOriginAndLine) {
  const ChatTemplate chat(testing::read_bytes(kTemplates + "alternating_turns.jinja"), "alternating_turns.jinja");
  const std::vector<ChatMessage> messages = {{"user", "a"}, {"user", "b"}};
  EXPECT_EQ(error_of([&] { chat.render(messages, false); }),
            "alternating_turns.jinja: chat_template line 14: Conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

TEST(ChatTemplate, AttributeOfAMissingAttributeNamesTheLine) {
  // jinja2 raises here; printing nothing instead made end_of_turn() report a
  // missing end-of-turn token, far from the cause.
  const ChatTemplate chat(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{{ messages[0].nonexistent.deeper }}<|end|>"
      "{% endfor %}",
      "deep.jinja");
  EXPECT_EQ(error_of([&] { (void)chat.end_of_turn(); }),
            "deep.jinja: chat_template line 2: 'dict object' has no attribute 'nonexistent'");
  // One level down is jinja2's plain Undefined: it prints nothing.
  const ChatTemplate shallow(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{{ m.nonexistent }}<|end|>{% endfor %}", "shallow.jinja");
  EXPECT_EQ(shallow.end_of_turn(), "<|end|>");
}

TEST(ChatTemplate, UnknownRoleIsAnError) {
  const ChatTemplate chat = ChatTemplate::load("qwen3");
  const std::vector<ChatMessage> messages = {{"user", "a"}, {"tool", "{}"}};
  const std::string message = error_of([&] { chat.render(messages, false); });
  EXPECT_NE(message.find("role 'tool'"), std::string::npos) << message;
  EXPECT_NE(message.find("built-in chat template qwen3"), std::string::npos) << message;
}

TEST(ChatTemplate, NotPrefixStableIsAnError) {
  // The message count up front changes as the conversation grows.
  const ChatTemplate chat("{{ messages|length }}{% for m in messages %}[{{ m.content }}]{% endfor %}", "counting");
  const std::vector<ChatMessage> messages = {{"user", "a"}, {"assistant", "b"}};
  const std::string message = error_of([&] { chat.render_segments(messages); });
  EXPECT_NE(message.find("counting: the template is not prefix-stable at message 1"), std::string::npos) << message;
}

TEST(ChatTemplate, LoadsTokenizerConfig) {
  TempDir dir;
  const std::string source = testing::read_bytes(kTemplates + "inst_json_system.jinja");
  nlohmann::json config;
  config["chat_template"] = source;
  config["bos_token"] = {{"content", "<s>"}, {"lstrip", false}};
  config["eos_token"] = "</s>";
  write_bytes(dir / "tokenizer_config.json", config.dump());
  const ChatTemplate chat = ChatTemplate::load((dir / "tokenizer_config.json").string());
  EXPECT_EQ(chat.source(), source);
  EXPECT_EQ(chat.origin(), (dir / "tokenizer_config.json").string());
  const std::vector<ChatMessage> messages = {{"user", "hi"}, {"assistant", "yo"}};
  EXPECT_EQ(chat.render(messages, false), "<s>[INST] hi [/INST] yo</s>");
  // The folder works too, and beside_tokenizer finds the template next to tokenizer.json.
  EXPECT_EQ(ChatTemplate::load(dir.path().string()).render(messages, false), "<s>[INST] hi [/INST] yo</s>");
  const auto beside = ChatTemplate::beside_tokenizer(dir / "tokenizer.json");
  ASSERT_NE(beside, nullptr);
  EXPECT_EQ(beside->render(messages, false), "<s>[INST] hi [/INST] yo</s>");

  // Hugging Face's list form: the entry named "default".
  config["chat_template"] = nlohmann::json::array(
      {{{"name", "tool_use"}, {"template", "TOOLS"}}, {{"name", "default"}, {"template", "{{ bos_token }}D"}}});
  write_bytes(dir / "tokenizer_config.json", config.dump());
  EXPECT_EQ(ChatTemplate::load((dir / "tokenizer_config.json").string()).render(messages, false), "<s>D");
}

TEST(ChatTemplate, BesideTokenizerWithoutTemplateIsNull) {
  TempDir dir;
  EXPECT_EQ(ChatTemplate::beside_tokenizer(dir / "tokenizer.json"), nullptr);  // no tokenizer_config.json
  write_bytes(dir / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(ChatTemplate::beside_tokenizer(dir / "tokenizer.json"), nullptr);
}

TEST(ChatTemplate, BadTokenizerConfigIsAnError) {
  TempDir dir;
  const std::string path = (dir / "tokenizer_config.json").string();
  write_bytes(path, "{ not json");
  std::string message = error_of([&] { ChatTemplate::load(path); });
  EXPECT_NE(message.find(path + ": not valid JSON"), std::string::npos) << message;

  write_bytes(path, R"({"bos_token": "<s>"})");
  EXPECT_EQ(error_of([&] { ChatTemplate::load(path); }), path + ": has no \"chat_template\"");

  write_bytes(path, R"({"chat_template": [{"name": "tool_use", "template": "x"}]})");
  EXPECT_EQ(error_of([&] { ChatTemplate::load(path); }),
            path + ": \"chat_template\" lists no template named \"default\" (it has: tool_use)");

  write_bytes(path, R"({"chat_template": "{{ x", "eos_token": 5})");
  message = error_of([&] { ChatTemplate::load(path); });
  EXPECT_NE(message.find(path + ": \"eos_token\" must be a string"), std::string::npos) << message;

  write_bytes(path, R"({"chat_template": "ok\n{{ x"})");
  EXPECT_EQ(error_of([&] { ChatTemplate::load(path); }), path + ": chat_template line 2: unclosed '{{'");

  message = error_of([&] { ChatTemplate::load((dir / "missing.jinja").string()); });
  EXPECT_NE(message.find("missing.jinja: not a built-in template (llama3, qwen3) and no such file"), std::string::npos)
      << message;
}

}  // namespace chat_template_test
}  // namespace titan::data
