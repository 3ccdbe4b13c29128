// The syntax tree of titan's Jinja subset: expressions and statements, each
// with the template line it came from, so every runtime error can name it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace titan::data::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    None,     // the literal none
    Bool,     // boolean literal
    Integer,  // integer literal
    Float,    // float literal
    String,   // string literal
    Name,     // a variable: `name`
    List,     // [args...]
    Tuple,    // (args...)
    Dict,     // {args[0]: args[1], ...}
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], any of the three may be null
    Call,     // args[0](args[1:]); the last kwargs.size() arguments are keyword arguments
    Filter,   // args[0] | name(args[1:]), kwargs as for Call
    Test,     // args[0] is [not] name(args[1:])
    Unary,    // name ("-", "+", "not") args[0]
    Binary,   // args[0] name args[1]; "and"/"or" short-circuit
    Ternary,  // args[1] if args[0] else args[2] (null: undefined)
  };
  Kind kind = Kind::None;
  int line = 0;
  std::string name;  // a string literal's value, a name, attribute, filter, test or operator
  int64_t integer = 0;
  double number = 0;
  bool flag = false;  // a bool literal's value; a test's `not`
  std::vector<ExprPtr> args;
  std::vector<std::string> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    Text,      // text
    Output,    // {{ exprs[0] }}
    If,        // exprs[i] guards bodies[i]; a last extra body is the else
    For,       // for targets in exprs[0] [if exprs[1]]: bodies[0], else bodies[1]
    Set,       // set targets = exprs[0], or set targets[0].attr = exprs[0]
    SetBlock,  // set targets[0] %}bodies[0]{% endset
    Macro,     // macro text(targets...) with defaults exprs (null: required): bodies[0]
    Break,
    Continue,
  };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;
  std::string attr;
  std::vector<std::string> targets;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
};

}  // namespace titan::data::jinja
