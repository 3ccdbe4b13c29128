// The Renderer's frame: one render's start, the values and text it makes, its
// variables and scopes, and the statements (if, for, set, macro) it executes.
#include "titan/data/jinja/jinja_renderer.h"

#include <fmt/format.h>

#include <iterator>
#include <limits>
#include <string>
#include <unordered_map>

namespace titan::data::jinja::detail {

namespace {

// jinja2's hints for the undefined values it makes itself.
const std::string kNoPreviousItem = "there is no previous item";
const std::string kNoNextItem = "there is no next item";

}  // namespace

std::string Renderer::run(const Body& body, const nlohmann::ordered_json& variables) {
  static const std::string kBuiltins[] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};
  scopes_.emplace_back();  // 0: built-in functions
  for (const std::string& name : kBuiltins) {
    Value function = Value::make(Kind::Function);
    function.text = &name;
    scopes_[0][name] = function;
  }
  scopes_.emplace_back();  // 1: the template's variables and top-level sets
  if (variables.is_object()) {
    for (const auto& [key, item] : variables.items()) scopes_[1][key] = from_json(item, 0);
  }
  floor_ = 1;
  TextBuffer out(heap_, limits_.max_output);
  out_ = &out;
  exec_body(body);
  out_ = nullptr;
  return out.take();
}

Value Renderer::new_string(std::string s) {
  check_string_size(s.size());
  charge(s.size() + 1);
  return heap_.string(std::move(s));
}
// The string a TextBuffer built (each append was checked against the size limit).
Value Renderer::new_string(TextBuffer& text) {
  charge(text.size() + 1);
  return text.into_value();
}

// Python's str(value) as a string value (a string is itself), no longer than a string may be.
Value Renderer::str_of(const Value& value) {
  if (value.kind == Kind::String) return value;
  Value text = to_str(value, heap_, limits_.max_output);
  charge(text.str().size());
  return text;
}

// s.strip(chars) and its kin; the set of code points in `chars` is charged while it lives.
Value Renderer::stripped(const std::string& s, bool left, bool right, const Value* chars) {
  const std::string* set = chars != nullptr && chars->kind == Kind::String ? &chars->str() : nullptr;
  const Scratch scratch(heap_, set != nullptr ? set->size() * sizeof(std::string_view) : 0);
  return new_string(strip(s, left, right, set));
}

// The variables' strings are borrowed, not copied: the JSON outlives the render.
Value Renderer::from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth > 64) throw ValueError("a template variable nests too deeply");
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::of_bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::of_int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value::of_float(double(u));
      return Value::of_int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::of_float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::borrowed(json.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      ListBuilder items(heap_);
      items.reserve(json.size());
      for (const auto& item : json) items.push(from_json(item, depth + 1));
      return items.finish();
    }
    case nlohmann::ordered_json::value_t::object: {
      Value dict = heap_.dict(Kind::Dict);
      dict.dict()->reserve(json.size());
      // An ordered_json object's keys are already unique.
      for (const auto& [key, item] : json.items()) dict.dict()->append(key, from_json(item, depth + 1));
      return dict;
    }
    default:
      return Value();
  }
}

void Renderer::emit(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output) {
    throw ValueError(fmt::format("the output exceeds the limit of {} bytes", limits_.max_output));
  }
  charge(text.size());
  out_->append(text);
}
void Renderer::emit_value(const Value& value) {
  if (value.kind == Kind::String) {
    emit(value.str());
  } else {
    emit(str_of(value).str());
  }
}

// ----- variables -----

const Value* Renderer::lookup(const std::string& name) const {
  for (size_t i = scopes_.size(); i-- > floor_;) {
    const auto found = scopes_[i].find(name);
    if (found != scopes_[i].end()) return &found->second;
  }
  for (const size_t i : {size_t{1}, size_t{0}}) {
    if (i >= floor_) continue;
    const auto found = scopes_[i].find(name);
    if (found != scopes_[i].end()) return &found->second;
  }
  return nullptr;
}
void Renderer::assign(const std::string& name, Value value) { scopes_.back()[name] = std::move(value); }

// ----- statements -----

Renderer::Flow Renderer::exec_body(const Body& body) {
  for (const auto& node : body) {
    const Flow flow = exec(*node);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec(const Node& node) {
  try {
    return exec_node(node);
  } catch (const ValueError& error) {
    fail(node.line, error.what());
  }
}

Renderer::Flow Renderer::exec_node(const Node& node) {
  charge(kStepWork);
  switch (node.kind) {
    case Node::Kind::Text:
      emit(node.text);
      return Flow::Normal;
    case Node::Kind::Output:
      emit_value(eval(*node.exprs[0]));
      return Flow::Normal;
    case Node::Kind::If:
      for (size_t i = 0; i < node.exprs.size(); ++i) {
        if (truthy(eval(*node.exprs[i]))) return exec_body(node.bodies[i]);
      }
      if (node.bodies.size() > node.exprs.size()) return exec_body(node.bodies.back());
      return Flow::Normal;
    case Node::Kind::For:
      exec_for(node);
      return Flow::Normal;
    case Node::Kind::Set: {
      Value value = eval(*node.exprs[0]);
      if (!node.attr.empty()) {
        const Value* target = lookup(node.targets[0]);
        if (target == nullptr || target->kind != Kind::Namespace) {
          fail(node.line,
               fmt::format("cannot assign attribute '{}' on '{}': it is not a namespace", node.attr, node.targets[0]));
        }
        target->dict()->set(node.attr, std::move(value));
      } else if (node.targets.size() == 1) {
        assign(node.targets[0], std::move(value));
      } else {
        const std::vector<Value> parts = unpack(value, node.targets.size());
        for (size_t i = 0; i < parts.size(); ++i) assign(node.targets[i], parts[i]);
      }
      return Flow::Normal;
    }
    case Node::Kind::SetBlock: {
      TextBuffer captured(heap_, limits_.max_output);
      TextBuffer* saved = out_;
      out_ = &captured;
      try {
        exec_body(node.bodies[0]);
      } catch (...) {
        out_ = saved;
        throw;
      }
      out_ = saved;
      assign(node.targets[0], captured.into_value());
      return Flow::Normal;
    }
    case Node::Kind::Macro: {
      Value macro = Value::make(Kind::Macro);
      macro.macro = &node;
      macro.text = &node.text;
      assign(node.text, macro);
      return Flow::Normal;
    }
    case Node::Kind::Break:
      return Flow::Break;
    case Node::Kind::Continue:
      return Flow::Continue;
  }
  return Flow::Normal;
}

std::vector<Value> Renderer::unpack(const Value& value, size_t count) {
  if (value.kind != Kind::List) {
    throw ValueError(fmt::format("cannot unpack a {} into {} names", type_name(value), count));
  }
  if (value.list()->items.size() != count) {
    throw ValueError(fmt::format("expected {} values to unpack, got {}", count, value.list()->items.size()));
  }
  return value.list()->items;
}

// The items a for loop or a filter walks, as a list: a list itself (shared),
// a dict's keys, a string's code points.
Value Renderer::iterate(const Value& value) {
  switch (value.kind) {
    case Kind::Undefined:
      return ListBuilder(heap_).finish();
    case Kind::List:
      return value;
    case Kind::Dict: {
      ListBuilder keys(heap_);
      keys.reserve(value.dict()->items.size());
      // The keys stay in the dict, which lives as long as any of them.
      for (const auto& entry : value.dict()->items) keys.push(Value::borrowed(entry.first, value.object));
      return keys.finish();
    }
    case Kind::String: {
      const std::string& s = value.str();
      charge(s.size());
      ListBuilder chars(heap_);
      for (size_t i = 0; i < s.size();) {
        const size_t n = code_point_length(s, i);
        chars.push(heap_.code_point(std::string_view(s).substr(i, n)));
        i += n;
      }
      return chars.finish();
    }
    default:
      throw ValueError(fmt::format("'{}' object is not iterable", type_name(value)));
  }
}

void Renderer::bind_targets(const Node& node, const Value& item) {
  if (node.targets.size() == 1) {
    assign(node.targets[0], item);
  } else {
    const std::vector<Value> parts = unpack(item, node.targets.size());
    for (size_t i = 0; i < parts.size(); ++i) assign(node.targets[i], parts[i]);
  }
}

// `expr` calls the built-in range(): a for loop then counts instead of listing.
bool Renderer::is_range_call(const Expr& expr) const {
  if (expr.kind != Expr::Kind::Call || expr.args[0]->kind != Expr::Kind::Name || expr.args[0]->name != "range") {
    return false;
  }
  const Value* function = lookup("range");
  return function != nullptr && function->kind == Kind::Function && function->str() == "range";
}

Sequence Renderer::sequence_of(const Expr& expr) {
  Sequence sequence;
  if (is_range_call(expr)) {
    charge(kStepWork);
    sequence.range = range_of(eval_args(expr, 1));
    sequence.length = sequence.range.length;
    return sequence;
  }
  sequence.list = iterate(eval(expr));
  sequence.length = sequence.list.list()->items.size();
  return sequence;
}

void Renderer::exec_for(const Node& node) {
  Sequence sequence = sequence_of(*node.exprs[0]);
  scopes_.emplace_back();
  struct PopScope {
    ~PopScope() { scopes.pop_back(); }
    std::vector<std::unordered_map<std::string, Value>>& scopes;
  } pop{scopes_};
  // `for x in xs if cond` filters first: loop.length and loop.last count the kept items.
  if (node.exprs.size() > 1) {
    ListBuilder kept(heap_);
    for (size_t i = 0; i < sequence.length; ++i) {
      charge(kStepWork);
      Value item = sequence.at(i);
      bind_targets(node, item);
      if (truthy(eval(*node.exprs[1]))) kept.push(std::move(item));
    }
    sequence = Sequence();
    sequence.length = kept.size();
    sequence.list = kept.finish();
  }
  if (sequence.length == 0) {
    exec_body(node.bodies[1]);
    return;
  }
  Value loop;
  for (size_t i = 0; i < sequence.length; ++i) {
    charge(kStepWork);
    update_loop(loop, sequence, i);
    bind_targets(node, sequence.at(i));
    if (exec_body(node.bodies[0]) == Flow::Break) break;
  }
}

// Points `loop` at iteration i. The dict is updated in place while only
// this loop holds it (here and in the scope), instead of made anew each time.
void Renderer::update_loop(Value& loop, const Sequence& sequence, size_t i) {
  static const char* const kKeys[] = {"index",  "index0", "revindex", "revindex0", "first",   "last",
                                      "length", "depth",  "depth0",   "previtem",  "nextitem"};
  Value& slot = scopes_.back()["loop"];
  if (loop.kind != Kind::Dict || slot.object != loop.object || loop.object->refs != 2) {
    loop = heap_.dict(Kind::Dict);
    loop.dict()->reserve(std::size(kKeys));
    for (const char* key : kKeys) loop.dict()->append(key, Value());
    slot = loop;
  }
  auto& items = loop.dict()->items;
  const auto length = static_cast<int64_t>(sequence.length);
  const auto index = static_cast<int64_t>(i);
  items[0].second = Value::of_int(index + 1);
  items[1].second = Value::of_int(index);
  items[2].second = Value::of_int(length - index);
  items[3].second = Value::of_int(length - index - 1);
  items[4].second = Value::of_bool(i == 0);
  items[5].second = Value::of_bool(i + 1 == sequence.length);
  items[6].second = Value::of_int(length);
  items[7].second = Value::of_int(1);
  items[8].second = Value::of_int(0);
  items[9].second = i > 0 ? sequence.at(i - 1) : Value::undefined(Missing::Hint, kNoPreviousItem);
  items[10].second = i + 1 < sequence.length ? sequence.at(i + 1) : Value::undefined(Missing::Hint, kNoNextItem);
}

}  // namespace titan::data::jinja::detail
