// The lexer of titan's Jinja subset: template text becomes text pieces and the
// tokens inside {{ }} and {% %} tags. Whitespace control is applied here, with
// the settings Hugging Face renders chat templates with (trim_blocks and
// lstrip_blocks on, one trailing newline of the template dropped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data::jinja {

enum class TokenKind { Text, ExprOpen, ExprClose, StmtOpen, StmtClose, Name, String, Integer, Float, Punct, End };

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;  // Text's bytes, a name, a string literal's value, a punctuator
  int line = 1;
  int64_t integer = 0;
  double number = 0;
};

// `where` prefixes errors: "<where> line N: <message>".
std::vector<Token> tokenize(std::string_view source, const std::string& where);

// Throws titan::Error "<where> line <line>: <message>".
[[noreturn]] void fail_at(const std::string& where, int line, const std::string& message);

}  // namespace titan::data::jinja
