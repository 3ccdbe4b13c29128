#include "titan/data/jinja/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

namespace titan::data::jinja {

namespace {

// Deeper nesting than this is refused rather than risking the stack.
constexpr int kMaxTemplateNesting = 200;

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::End:
      return "the end of the template";
    case TokenKind::Text:
      return "text";
    case TokenKind::ExprClose:
      return "'}}'";
    case TokenKind::StmtClose:
      return "'%}'";
    case TokenKind::ExprOpen:
      return "'{{'";
    case TokenKind::StmtOpen:
      return "'{%'";
    case TokenKind::String:
      return "a string";
    default:
      return "'" + token.text + "'";
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& where) : tokens_(tokens), where_(where) {}

  Body run() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser& parser) : parser_(parser) {
      if (++parser_.depth_ > kMaxTemplateNesting) parser_.error("the template nests too deeply");
    }
    ~DepthGuard() { --parser_.depth_; }
    Parser& parser_;
  };

  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& token = peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return token;
  }
  [[noreturn]] void error(const std::string& message) const { fail_at(where_, peek().line, message); }
  bool is_punct(const char* text, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Punct && peek(ahead).text == text;
  }
  bool is_name(const char* text, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == text;
  }
  bool accept_punct(const char* text) {
    if (!is_punct(text)) return false;
    next();
    return true;
  }
  bool accept_name(const char* text) {
    if (!is_name(text)) return false;
    next();
    return true;
  }
  void expect_punct(const char* text) {
    if (!accept_punct(text)) error(fmt::format("expected '{}', found {}", text, describe(peek())));
  }
  void expect_name(const char* text) {
    if (!accept_name(text)) error(fmt::format("expected '{}', found {}", text, describe(peek())));
  }
  std::string expect_identifier() {
    if (peek().kind != TokenKind::Name) error(fmt::format("expected a name, found {}", describe(peek())));
    return next().text;
  }
  void expect_stmt_close() {
    if (peek().kind != TokenKind::StmtClose) error(fmt::format("expected '%}}', found {}", describe(peek())));
    next();
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->line = line;
    return expr;
  }

  // Statements up to a {% tag %} whose keyword is in `ends` (left unconsumed
  // after the keyword: `end` receives it). An empty `ends` parses to the end.
  Body parse_body(std::initializer_list<const char*> ends, std::string& end) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = peek();
      if (token.kind == TokenKind::End) {
        if (ends.size() == 0) return body;
        error(fmt::format("unexpected end of template: expected {{% {} %}}", *(ends.end() - 1)));
      }
      if (token.kind == TokenKind::Text) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Text;
        node->line = token.line;
        node->text = token.text;
        body.push_back(std::move(node));
        next();
      } else if (token.kind == TokenKind::ExprOpen) {
        next();
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::Output;
        node->line = token.line;
        node->exprs.push_back(parse_tuple(true));
        if (peek().kind != TokenKind::ExprClose) error(fmt::format("expected '}}}}', found {}", describe(peek())));
        next();
        body.push_back(std::move(node));
      } else if (token.kind == TokenKind::StmtOpen) {
        const Token& keyword = peek(1);
        if (keyword.kind != TokenKind::Name) {
          next();
          error(fmt::format("expected a statement keyword, found {}", describe(peek())));
        }
        for (const char* candidate : ends) {
          if (keyword.text == candidate) {
            next();
            next();
            end = keyword.text;
            return body;
          }
        }
        next();
        parse_statement(body);
      } else {
        error(fmt::format("unexpected {}", describe(token)));
      }
    }
  }

  void parse_statement(Body& body) {
    const Token& keyword = next();
    const int line = keyword.line;
    const std::string& word = keyword.text;
    auto node = std::make_unique<Node>();
    node->line = line;
    std::string end;
    if (word == "if") {
      node->kind = Node::Kind::If;
      node->exprs.push_back(parse_tuple(true));
      expect_stmt_close();
      while (true) {
        node->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          node->exprs.push_back(parse_tuple(true));
          expect_stmt_close();
        } else if (end == "else") {
          expect_stmt_close();
          node->bodies.push_back(parse_body({"endif"}, end));
          expect_stmt_close();
          break;
        } else {
          expect_stmt_close();
          break;
        }
      }
    } else if (word == "for") {
      node->kind = Node::Kind::For;
      do {
        node->targets.push_back(expect_identifier());
      } while (accept_punct(","));
      expect_name("in");
      node->exprs.push_back(parse_tuple(false));
      if (accept_name("if")) {
        node->exprs.push_back(parse_expression(false));
      }
      if (accept_name("recursive")) error("recursive for loops are not supported");
      expect_stmt_close();
      node->bodies.push_back(parse_body({"else", "endfor"}, end));
      expect_stmt_close();
      node->bodies.emplace_back();
      if (end == "else") {
        node->bodies.back() = parse_body({"endfor"}, end);
        expect_stmt_close();
      }
    } else if (word == "set") {
      node->targets.push_back(expect_identifier());
      if (accept_punct(".")) {
        node->attr = expect_identifier();
      } else {
        while (accept_punct(",")) node->targets.push_back(expect_identifier());
      }
      if (accept_punct("=")) {
        node->kind = Node::Kind::Set;
        node->exprs.push_back(parse_tuple(true));
        expect_stmt_close();
      } else {
        if (node->targets.size() != 1 || !node->attr.empty()) error("a block set assigns one plain name");
        if (peek().kind == TokenKind::Punct && peek().text == "|") error("filtered block sets are not supported");
        expect_stmt_close();
        node->kind = Node::Kind::SetBlock;
        node->bodies.push_back(parse_body({"endset"}, end));
        expect_stmt_close();
      }
    } else if (word == "macro") {
      node->kind = Node::Kind::Macro;
      node->text = expect_identifier();
      expect_punct("(");
      while (!accept_punct(")")) {
        node->targets.push_back(expect_identifier());
        node->exprs.push_back(accept_punct("=") ? parse_expression(true) : nullptr);
        if (!is_punct(")")) expect_punct(",");
      }
      expect_stmt_close();
      node->bodies.push_back(parse_body({"endmacro"}, end));
      if (peek().kind == TokenKind::Name) next();  // {% endmacro name %}
      expect_stmt_close();
    } else if (word == "break" || word == "continue") {
      node->kind = word == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_stmt_close();
    } else if (word == "generation") {
      // Transformers' assistant-mask marker: renders its body unchanged.
      expect_stmt_close();
      Body inner = parse_body({"endgeneration"}, end);
      expect_stmt_close();
      for (auto& child : inner) body.push_back(std::move(child));
      return;
    } else {
      fail_at(where_, line, fmt::format("unknown or unsupported statement '{}'", word));
    }
    body.push_back(std::move(node));
  }

  // A comma-separated list without brackets is a tuple, as in Jinja.
  ExprPtr parse_tuple(bool allow_conditional) {
    const int line = peek().line;
    ExprPtr first = parse_expression(allow_conditional);
    if (!is_punct(",")) return first;
    ExprPtr tuple = make(Expr::Kind::Tuple, line);
    tuple->args.push_back(std::move(first));
    while (accept_punct(",")) {
      if (peek().kind == TokenKind::ExprClose || peek().kind == TokenKind::StmtClose) break;
      tuple->args.push_back(parse_expression(allow_conditional));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool allow_conditional) {
    DepthGuard guard(*this);
    ExprPtr expr = parse_or();
    if (!allow_conditional) return expr;
    while (is_name("if")) {
      const int line = next().line;
      ExprPtr ternary = make(Expr::Kind::Ternary, line);
      ExprPtr condition = parse_or();
      ExprPtr otherwise = accept_name("else") ? parse_expression(true) : nullptr;
      ternary->args.push_back(std::move(condition));
      ternary->args.push_back(std::move(expr));
      ternary->args.push_back(std::move(otherwise));
      expr = std::move(ternary);
    }
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr expr = make(Expr::Kind::Binary, line);
    expr->name = std::move(op);
    expr->args.push_back(std::move(left));
    expr->args.push_back(std::move(right));
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      ExprPtr expr = make(Expr::Kind::Unary, line);
      expr->name = "not";
      expr->args.push_back(parse_not());
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const int line = peek().line;
      std::string op;
      if (peek().kind == TokenKind::Punct && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                              peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), line);
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_punct("+") || is_punct("-")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_punct("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_punct("*") || is_punct("/") || is_punct("//") || is_punct("%")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_punct("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr expr;
    if (is_punct("-") || is_punct("+")) {
      const Token& op = next();
      expr = make(Expr::Kind::Unary, op.line);
      expr->name = op.text;
      expr->args.push_back(parse_unary(false));
    } else {
      expr = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token& token = peek();
    const int line = token.line;
    switch (token.kind) {
      case TokenKind::Name: {
        next();
        if (token.text == "true" || token.text == "True" || token.text == "false" || token.text == "False") {
          ExprPtr expr = make(Expr::Kind::Bool, line);
          expr->flag = token.text[0] == 't' || token.text[0] == 'T';
          return expr;
        }
        if (token.text == "none" || token.text == "None") return make(Expr::Kind::None, line);
        ExprPtr expr = make(Expr::Kind::Name, line);
        expr->name = token.text;
        return expr;
      }
      case TokenKind::String: {
        ExprPtr expr = make(Expr::Kind::String, line);
        // Adjacent literals join, as in Python.
        while (peek().kind == TokenKind::String) expr->name += next().text;
        return expr;
      }
      case TokenKind::Integer: {
        ExprPtr expr = make(Expr::Kind::Integer, line);
        expr->integer = next().integer;
        return expr;
      }
      case TokenKind::Float: {
        ExprPtr expr = make(Expr::Kind::Float, line);
        expr->number = next().number;
        return expr;
      }
      case TokenKind::Punct:
        if (token.text == "(") {
          next();
          if (accept_punct(")")) return make(Expr::Kind::Tuple, line);
          ExprPtr first = parse_expression(true);
          if (accept_punct(")")) return first;
          ExprPtr tuple = make(Expr::Kind::Tuple, line);
          tuple->args.push_back(std::move(first));
          while (accept_punct(",")) {
            if (is_punct(")")) break;
            tuple->args.push_back(parse_expression(true));
          }
          expect_punct(")");
          return tuple;
        }
        if (token.text == "[") {
          next();
          ExprPtr list = make(Expr::Kind::List, line);
          while (!accept_punct("]")) {
            list->args.push_back(parse_expression(true));
            if (!is_punct("]")) expect_punct(",");
          }
          return list;
        }
        if (token.text == "{") {
          next();
          ExprPtr dict = make(Expr::Kind::Dict, line);
          while (!accept_punct("}")) {
            dict->args.push_back(parse_expression(true));
            expect_punct(":");
            dict->args.push_back(parse_expression(true));
            if (!is_punct("}")) expect_punct(",");
          }
          return dict;
        }
        break;
      default:
        break;
    }
    error(fmt::format("unexpected {} in an expression", describe(token)));
  }

  // (args...) after a callee, filter or test: positional, then name=value.
  void parse_call_args(Expr& call) {
    expect_punct("(");
    while (!accept_punct(")")) {
      if (peek().kind == TokenKind::Name && is_punct("=", 1)) {
        call.kwargs.push_back(next().text);
        next();
        call.args.push_back(parse_expression(true));
      } else {
        if (!call.kwargs.empty()) error("a positional argument follows a keyword argument");
        call.args.push_back(parse_expression(true));
      }
      if (!is_punct(")")) expect_punct(",");
    }
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      const int line = peek().line;
      if (accept_punct(".")) {
        ExprPtr attr;
        if (peek().kind == TokenKind::Integer) {
          attr = make(Expr::Kind::Item, line);
          attr->args.push_back(std::move(expr));
          ExprPtr index = make(Expr::Kind::Integer, line);
          index->integer = next().integer;
          attr->args.push_back(std::move(index));
        } else {
          attr = make(Expr::Kind::Attr, line);
          attr->name = expect_identifier();
          attr->args.push_back(std::move(expr));
        }
        expr = std::move(attr);
      } else if (accept_punct("[")) {
        ExprPtr parts[3];
        bool slice = false;
        for (int part = 0; part < 3; ++part) {
          if (!is_punct(":") && !is_punct("]")) parts[part] = parse_expression(true);
          if (part < 2 && accept_punct(":")) {
            slice = true;
          } else {
            break;
          }
        }
        expect_punct("]");
        if (!slice && parts[0] == nullptr) error("empty subscript");
        ExprPtr access = make(slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
        access->args.push_back(std::move(expr));
        if (slice) {
          for (auto& part : parts) access->args.push_back(std::move(part));
        } else {
          access->args.push_back(std::move(parts[0]));
        }
        expr = std::move(access);
      } else if (is_punct("(")) {
        ExprPtr call = make(Expr::Kind::Call, line);
        call->args.push_back(std::move(expr));
        parse_call_args(*call);
        expr = std::move(call);
      } else {
        return expr;
      }
    }
  }

  bool starts_test_argument() const {
    const Token& token = peek();
    if (token.kind == TokenKind::String || token.kind == TokenKind::Integer || token.kind == TokenKind::Float) {
      return true;
    }
    if (token.kind == TokenKind::Punct) return token.text == "[" || token.text == "{";
    if (token.kind != TokenKind::Name) return false;
    for (const char* keyword : {"else", "or", "and", "if", "in", "is", "not"}) {
      if (token.text == keyword) return false;
    }
    return true;
  }

  ExprPtr parse_filters(ExprPtr expr) {
    while (true) {
      const int line = peek().line;
      if (accept_punct("|")) {
        ExprPtr filter = make(Expr::Kind::Filter, line);
        filter->name = expect_identifier();
        filter->args.push_back(std::move(expr));
        if (is_punct("(")) parse_call_args(*filter);
        expr = std::move(filter);
      } else if (accept_name("is")) {
        ExprPtr test = make(Expr::Kind::Test, line);
        test->flag = accept_name("not");
        // `none`, `true` and `false` lex as names; they name tests here.
        test->name = expect_identifier();
        test->args.push_back(std::move(expr));
        if (is_punct("(")) {
          parse_call_args(*test);
        } else if (starts_test_argument()) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        expr = std::move(test);
      } else {
        return expr;
      }
    }
  }

  const std::vector<Token>& tokens_;
  const std::string& where_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& where) { return Parser(tokens, where).run(); }

}  // namespace titan::data::jinja
