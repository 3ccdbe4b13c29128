// titan::Error's message as it will be printed: control bytes, NUL and bytes
// that are not UTF-8 become \xHH (so an error quoting a hostile file prints
// whole, and nothing in it acts on the terminal); text, newlines, tabs and
// well-formed UTF-8 stay as they are.
#include <gtest/gtest.h>

#include <string>

#include "titan/core/error.h"

namespace titan {
namespace printable_message_test {

TEST(PrintableMessage, EscapesWhatATerminalWouldActOnAndKeepsText) {
  using namespace std::string_literals;
  EXPECT_EQ(printable_message("plain text: \"quoted\" \\ / line\nnext\ttab"),
            "plain text: \"quoted\" \\ / line\nnext\ttab");
  EXPECT_EQ(printable_message("vocab[\"\0abc\"] is bad"s), "vocab[\"\\x00abc\"] is bad");
  EXPECT_EQ(printable_message("\x1b[31mred\x1b[0m\r\x7f"), "\\x1b[31mred\\x1b[0m\\x0d\\x7f");
  EXPECT_EQ(printable_message("日本 😀 é"), "日本 😀 é");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong form, a surrogate, past U+10FFFF.
  EXPECT_EQ(printable_message("a\x80z"), "a\\x80z");
  EXPECT_EQ(printable_message("a\xe6\x97"), "a\\xe6\\x97");
  EXPECT_EQ(printable_message("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable_message("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable_message("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  // Escapes are plain ASCII: escaping twice changes nothing.
  const std::string once = printable_message("\x01\xff"s + "\0"s);
  EXPECT_EQ(printable_message(once), once);
}

TEST(PrintableMessage, ErrorsCarryTheWholeEscapedMessage) {
  using namespace std::string_literals;
  try {
    fail("{}: model.vocab[\"{}\"] is not byte-level", "tokenizer.json", "\0\x1b"s);
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "tokenizer.json: model.vocab[\"\\x00\\x1b\"] is not byte-level");
  }
}

}  // namespace printable_message_test
}  // namespace titan
