#include "titan/data/jinja/jinja_lexer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "titan/core/error.h"

namespace titan::data::jinja {

void fail_at(const std::string& where, int line, const std::string& message) {
  throw Error(fmt::format("{} line {}: {}", where, line, message));
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
int count_lines(std::string_view text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

void append_utf8(std::string& out, uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const std::string& where) : src_(source), where_(where) {
    // Jinja drops one trailing newline of the template (keep_trailing_newline=False).
    if (!src_.empty() && src_.back() == '\n') src_.remove_suffix(1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) {
      const size_t open = find_tag(pos);
      const size_t text_end = open == std::string_view::npos ? src_.size() : open;
      if (open == std::string_view::npos) {
        emit_text(pos, text_end, '\0', false);
        line_ += count_lines(src_.substr(pos));
        pos = src_.size();
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char modifier = open + 2 < src_.size() ? src_[open + 2] : '\0';
      emit_text(pos, text_end, modifier, kind != '{');
      line_ += count_lines(src_.substr(pos, text_end - pos));
      pos = open + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos);
        if (close == std::string_view::npos) fail_at(where_, line_, "unclosed comment '{#'");
        const bool strip = close > pos && src_[close - 1] == '-';
        line_ += count_lines(src_.substr(pos, close - pos));
        pos = close + 2;
        previous_ = strip ? Trim::All : Trim::Newline;
        continue;
      }
      pos = lex_tag(pos, kind == '{');
      if (kind == '%' && is_raw_open()) pos = lex_raw(pos);
    }
    Token end;
    end.kind = TokenKind::End;
    end.line = line_;
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  enum class Trim { None, Newline, All };  // what the previous tag strips from the next text

  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t brace = src_.find('{', pos);
      if (brace == std::string_view::npos || brace + 1 >= src_.size()) return std::string_view::npos;
      const char next = src_[brace + 1];
      if (next == '{' || next == '%' || next == '#') return brace;
      pos = brace + 1;
    }
  }

  // The text between the previous tag and the next one, trimmed as the tags ask.
  // `modifier` is the next tag's '-', '+' or other; `block` whether it is {% or {#.
  void emit_text(size_t begin, size_t end, char modifier, bool block) {
    std::string_view raw = src_.substr(begin, end - begin);
    size_t start = 0;
    if (previous_ == Trim::All) {
      while (start < raw.size() && is_space(raw[start])) ++start;
    } else if (previous_ == Trim::Newline && !raw.empty() && raw[0] == '\n') {
      start = 1;
    }
    size_t stop = raw.size();
    if (modifier == '-') {
      while (stop > start && is_space(raw[stop - 1])) --stop;
    } else if (block && modifier != '+') {
      // lstrip_blocks: spaces and tabs between a line's start and a block tag go.
      const size_t line_start = raw.rfind('\n') == std::string_view::npos ? 0 : raw.rfind('\n') + 1;
      if (line_start > 0 || begin == 0) {
        size_t i = std::max(line_start, start);
        bool blank = true;
        for (size_t j = i; j < raw.size(); ++j) blank = blank && (raw[j] == ' ' || raw[j] == '\t');
        if (blank) stop = std::max(i, start);
      }
    }
    previous_ = Trim::None;
    if (stop > start) {
      Token token;
      token.kind = TokenKind::Text;
      token.text = std::string(raw.substr(start, stop - start));
      token.line = line_ + count_lines(raw.substr(0, start));
      tokens_.push_back(std::move(token));
    }
  }

  void push(TokenKind kind, std::string text) {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    token.line = line_;
    tokens_.push_back(std::move(token));
  }

  // Tokens inside {{ }} or {% %}, up to and including the close; returns the position after it.
  size_t lex_tag(size_t pos, bool expression) {
    const int open_line = line_;
    push(expression ? TokenKind::ExprOpen : TokenKind::StmtOpen, expression ? "{{" : "{%");
    int braces = 0;
    while (true) {
      while (pos < src_.size() && is_space(src_[pos])) line_ += src_[pos++] == '\n';
      if (pos >= src_.size()) fail_at(where_, open_line, expression ? "unclosed '{{'" : "unclosed '{%'");
      const std::string_view rest = src_.substr(pos);
      const char close_char = expression ? '}' : '%';
      // A close, possibly with a '-' or '+' that trims the text after it.
      for (const char modifier : {'\0', '-', '+'}) {
        const size_t skip = modifier == '\0' ? 0 : 1;
        if (modifier != '\0' && rest[0] != modifier) continue;
        if (rest.size() >= skip + 2 && rest[skip] == close_char && rest[skip + 1] == '}' &&
            (braces == 0 || !expression)) {
          push(expression ? TokenKind::ExprClose : TokenKind::StmtClose, expression ? "}}" : "%}");
          previous_ = modifier == '-' ? Trim::All : (expression ? Trim::None : Trim::Newline);
          return pos + skip + 2;
        }
      }
      const char c = rest[0];
      if (is_name_start(c)) {
        size_t n = 1;
        while (n < rest.size() && (is_name_start(rest[n]) || is_digit(rest[n]))) ++n;
        push(TokenKind::Name, std::string(rest.substr(0, n)));
        pos += n;
      } else if (is_digit(c)) {
        pos += lex_number(rest);
      } else if (c == '\'' || c == '"') {
        pos += lex_string(rest);
      } else {
        static const char* const kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (rest.substr(0, 2) == two) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            fail_at(where_, line_, fmt::format("unexpected character '{}' in a tag", std::string(1, c)));
          }
          op = std::string(1, c);
          if (c == '{') ++braces;
          if (c == '}') --braces;
        }
        push(TokenKind::Punct, op);
        pos += op.size();
      }
    }
  }

  size_t lex_number(std::string_view rest) {
    size_t n = 0;
    while (n < rest.size() && (is_digit(rest[n]) || rest[n] == '_')) ++n;
    bool is_float = false;
    if (n + 1 < rest.size() && rest[n] == '.' && is_digit(rest[n + 1])) {
      is_float = true;
      ++n;
      while (n < rest.size() && is_digit(rest[n])) ++n;
    }
    if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
      size_t m = n + 1;
      if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
      if (m < rest.size() && is_digit(rest[m])) {
        is_float = true;
        n = m;
        while (n < rest.size() && is_digit(rest[n])) ++n;
      }
    }
    std::string digits;
    for (char c : rest.substr(0, n)) {
      if (c != '_') digits += c;
    }
    Token token;
    token.line = line_;
    token.text = digits;
    if (is_float) {
      token.kind = TokenKind::Float;
      token.number = std::strtod(digits.c_str(), nullptr);
    } else {
      token.kind = TokenKind::Integer;
      errno = 0;
      char* end = nullptr;
      const long long value = std::strtoll(digits.c_str(), &end, 10);
      if (errno == ERANGE) fail_at(where_, line_, fmt::format("integer literal {} is too large", digits));
      token.integer = value;
    }
    tokens_.push_back(std::move(token));
    return n;
  }

  // A quoted literal with Python's escapes (\n, \t, \xNN, \uNNNN, ...); an
  // unknown escape keeps its backslash, as Python's does.
  size_t lex_string(std::string_view rest) {
    const char quote = rest[0];
    const int start_line = line_;
    std::string value;
    size_t i = 1;
    while (true) {
      if (i >= rest.size()) fail_at(where_, start_line, "unterminated string literal");
      const char c = rest[i];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= rest.size()) fail_at(where_, start_line, "unterminated string literal");
      const char e = rest[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case 'a':
          value += '\a';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\n':
          ++line_;
          break;  // a backslash-newline joins lines
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t code = 0;
          for (size_t d = 0; d < digits; ++d) {
            const int h = i + d < rest.size() ? hex_value(rest[i + d]) : -1;
            if (h < 0) fail_at(where_, line_, fmt::format("bad \\{} escape in a string literal", std::string(1, e)));
            code = code * 16 + static_cast<uint32_t>(h);
          }
          if (code > 0x10FFFF) fail_at(where_, line_, "\\U escape beyond U+10FFFF");
          i += digits;
          append_utf8(value, code);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t code = static_cast<uint32_t>(e - '0');
            for (int d = 0; d < 2 && i < rest.size() && rest[i] >= '0' && rest[i] <= '7'; ++d) {
              code = code * 8 + static_cast<uint32_t>(rest[i++] - '0');
            }
            append_utf8(value, code);
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    Token token;
    token.kind = TokenKind::String;
    token.text = std::move(value);
    token.line = start_line;
    tokens_.push_back(std::move(token));
    return i + 1;
  }

  // {% raw %}: the tokens just pushed are StmtOpen, Name "raw", StmtClose.
  bool is_raw_open() const {
    const size_t n = tokens_.size();
    return n >= 3 && tokens_[n - 3].kind == TokenKind::StmtOpen && tokens_[n - 2].kind == TokenKind::Name &&
           tokens_[n - 2].text == "raw" && tokens_[n - 1].kind == TokenKind::StmtClose;
  }

  // Everything up to {% endraw %} is text, emitted as is.
  size_t lex_raw(size_t pos) {
    tokens_.resize(tokens_.size() - 3);
    const int open_line = line_;
    size_t search = pos;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string_view::npos) fail_at(where_, open_line, "{% raw %} without {% endraw %}");
      size_t i = open + 2;
      const char modifier = i < src_.size() ? src_[i] : '\0';
      if (modifier == '-' || modifier == '+') ++i;
      while (i < src_.size() && is_space(src_[i])) ++i;
      if (src_.substr(i, 6) != "endraw") {
        search = open + 2;
        continue;
      }
      i += 6;
      while (i < src_.size() && is_space(src_[i])) ++i;
      bool strip_after = false;
      if (i < src_.size() && src_[i] == '-') {
        strip_after = true;
        ++i;
      }
      if (src_.substr(i, 2) != "%}") {
        search = open + 2;
        continue;
      }
      emit_text(pos, open, modifier, true);
      line_ += count_lines(src_.substr(pos, i + 2 - pos));
      previous_ = strip_after ? Trim::All : Trim::Newline;
      return i + 2;
    }
  }

  std::string_view src_;
  const std::string& where_;
  std::vector<Token> tokens_;
  int line_ = 1;
  Trim previous_ = Trim::None;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const std::string& where) { return Lexer(source, where).run(); }

}  // namespace titan::data::jinja
