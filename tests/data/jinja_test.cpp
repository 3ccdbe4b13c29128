// Unit tests of titan's Jinja subset (data/jinja/). The expected strings in
// kCases are what Python's jinja2 3.1.6 renders for the same template and
// variables, in the environment Hugging Face's apply_chat_template uses
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
// json.dumps-based tojson); the remaining tests check errors, undefined values
// as jinja2's default Undefined treats them, and the limits on work and memory.
#include <gtest/gtest.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <string>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_interpreter.h"

namespace titan::data::jinja {
namespace jinja_test {

std::string render(const std::string& source, const std::string& variables = "{}", const Limits& limits = {}) {
  return Template(source, "test.jinja: chat_template").render(nlohmann::ordered_json::parse(variables), limits);
}

// The error message a render (or parse) throws, or "" when it succeeds.
std::string render_error(const std::string& source, const std::string& variables = "{}", const Limits& limits = {}) {
  try {
    render(source, variables, limits);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

struct Case {
  const char* name;
  const char* source;
  const char* variables;
  const char* expected;
};

const Case kCases[] = {
    {"Text", R"(hello)", R"({})", R"(hello)"},
    {"TrailingNewlineDropped", R"(a
)",
     R"({})", R"(a)"},
    {"Arithmetic",
     R"({{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }} {{ 4 / 2 }})",
     R"({})", R"(7 3 -4 1 2 3.5 1024 2.5 2.0)"},
    {"Comparisons",
     R"({{ 1 < 2 }} {{ 'a' == 'a' }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 'b' > 'a' }} {{ 3 != 3 }})", R"({})",
     R"(True True True True True False)"},
    {"Logic", R"({{ true and false }} {{ true or false }} {{ not true }} {{ 0 or 'x' }} {{ '' and 'y' }} {{ none }})",
     R"({})", R"(False True False x  None)"},
    {"Concat", R"({{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ [1] + [2] }})", R"({})", R"(a1NoneTrue ab [1, 2])"},
    {"Membership", R"({{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }})", R"({})",
     R"(True True True True)"},
    {"Ternary", R"({{ 'yes' if x else 'no' }} {{ 'yes' if y else 'no' }})", R"({"x": 1, "y": 0})", R"(yes no)"},
    {"Subscripts",
     R"({{ m['role'] }} {{ m.role }} {{ xs[0] }} {{ xs[-1] }} {{ xs[1:] }} {{ xs[::-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ xs[:-1] }})",
     R"({"m": {"role": "user"}, "xs": [1, 2, 3], "s": "héllo"})", R"(user user 1 3 [2, 3] [3, 2, 1] él olléh [1, 2])"},
    {"UndefinedRendersEmpty", R"([{{ missing }}][{{ m.nothing }}][{{ xs[9] }}])", R"({"m": {}, "xs": []})",
     R"([][][])"},
    {"Tests",
     R"({{ x is defined }} {{ y is defined }} {{ y is not defined }} {{ none is none }} {{ 's' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is number }} {{ 1.5 is number }} {{ 's' is number }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 'a' is eq 'a' }})",
     R"({"x": 1})", R"(True False True True True True True True True False True True True True)"},
    {"StringFilters",
     R"({{ '  hi  '|trim }}|{{ 'ab'|upper }}|{{ 'AB'|lower }}|{{ 'hello world'|capitalize }}|{{ 'hello big-world'|title }}|{{ 'aXbXc'|replace('X', '-') }}|{{ 'abc'|length }}|{{ 'héllo'|length }})",
     R"({})", R"(hi|AB|ab|Hello world|Hello Big-World|a-b-c|3|5)"},
    {"ListFilters",
     R"({{ xs|first }} {{ xs|last }} {{ xs|join(', ') }} {{ xs|length }} {{ xs|join }} {{ 'abc'|list }} {{ xs|reverse|list }})",
     R"({"xs": ["a", "b", "c"]})", R"(a c a, b, c 3 abc ['a', 'b', 'c'] ['c', 'b', 'a'])"},
    {"DefaultFilter", R"({{ missing|default('d') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ x|d('f') }})",
     R"({"x": "set"})", R"(d  e set)"},
    {"Conversions",
     R"({{ '42'|int + 1 }} {{ 'x'|int }} {{ 3.9|int }} {{ 2|string ~ 'b' }} {{ '1.5'|float }} {{ -3|abs }})", R"({})",
     R"(43 0 3 2b 1.5 3)"},
    {"ToJson", R"({{ d|tojson }} {{ xs|tojson }} {{ 'é"\\
'|tojson }} {{ none|tojson }} {{ 1.0|tojson }})",
     R"({"d": {"b": 1, "a": [true, null, "x"]}, "xs": []})",
     R"({"b": 1, "a": [true, null, "x"]} [] "é\"\\\n" null 1.0)"},
    {"ToJsonIndent", R"({{ d|tojson(indent=2) }})", R"({"d": {"b": 1, "a": [1, {"c": "d"}], "e": {}}})", R"({
  "b": 1,
  "a": [
    1,
    {
      "c": "d"
    }
  ],
  "e": {}
})"},
    {"ItemsAndDictMethods",
     R"({% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {{ d.keys()|list }} {{ d.values()|list }})",
     R"({"d": {"a": 1, "b": 2}})", R"(a=1;b=2; a:1,b:2, 1 dflt None ['a', 'b'] [1, 2])"},
    {"StringMethods",
     R"({{ '  x '.strip() }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith('bc') }}|{{ 'a,b,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'xxhixx'.strip('x') }})",
     R"({})", R"(x|x |  x|True|True|['a', 'b', 'c']|['a', 'b']|ABab|bba|hi)"},
    {"LoopVariables",
     R"({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %})",
     R"({"xs": ["a", "b", "c"]})", R"(10TrueFalse33|21FalseFalse32|32FalseTrue31|)"},
    {"LoopElseAndFilter",
     R"({% for x in xs if x > 1 %}{{ x }}:{{ loop.length }}{{ loop.last }},{% else %}none{% endfor %} {% for x in [] %}x{% else %}empty{% endfor %})",
     R"({"xs": [1, 2, 3]})", R"(2:2False,3:2True, empty)"},
    {"LoopScopeAndNamespace",
     R"({% set n = 0 %}{% set ns = namespace(count=0, seen='') %}{% for x in xs %}{% set n = n + 1 %}{% set ns.count = ns.count + 1 %}{% set ns.seen = ns.seen ~ x %}{% endfor %}{{ n }} {{ ns.count }} {{ ns.seen }})",
     R"({"xs": ["a", "b"]})", R"(0 2 ab)"},
    {"BreakContinue",
     R"({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})",
     R"({})", R"(0134)"},
    {"Range", R"({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }})", R"({})",
     R"([0, 1, 2] [1, 3, 5] [3, 2, 1])"},
    {"IfElifElse",
     R"({% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %})", R"({})",
     R"(one two many )"},
    {"Macro",
     R"({% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }})",
     R"({})", R"(Hello a! Hello b? Hello c.)"},
    {"SetBlock", R"({% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}])", R"({})", R"([inner 2])"},
    {"WhitespaceControl", R"(a  {{- ' b ' -}}  c {%- if true -%}  d  {%- endif -%} e {# comment #} f {#- c -#} g)",
     R"({})", R"(a b cde  fg)"},
    {"TrimBlocks", R"({% if true %}
line
{% endif %}
after
)",
     R"({})", R"(line
after)"},
    {"LstripBlocks", R"(<ul>
    {% for x in xs %}
    <li>{{ x }}</li>
    {% endfor %}
</ul>)",
     R"({"xs": [1, 2]})", R"(<ul>
    <li>1</li>
    <li>2</li>
</ul>)"},
    {"LstripNotMidLine", R"(a {% if true %}b{% endif %} c
  {{ 'expr' }}
)",
     R"({})", R"(a b c
  expr)"},
    {"CommentLines", R"(x
  {# a comment #}
y)",
     R"({})", R"(x
y)"},
    {"Escapes", R"({{ 'tab\tnl\nq\'dq\"bs\\' }}|{{ "\u00e9\x41" }})", R"({})", R"(tab	nl
q'dq"bs\|éA)"},
    {"SelectAttrMap",
     R"({{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }} {{ ms|rejectattr('role', 'equalto', 'user')|list|length }})",
     R"({"ms": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}, {"role": "user", "content": "b"}]})",
     R"(a,b 1)"},
    {"ReprOfContainers", R"({{ ['a', "b'c", 1, none, true] }} {{ {'k': 'v'} }})", R"({})",
     R"(['a', "b'c", 1, None, True] {'k': 'v'})"},
    {"Indent", R"({{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }})", R"({})", R"(a
  b

  c|  a
  b)"},

};

TEST(Jinja, MatchesPythonJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(render(c.source, c.variables), c.expected);
  }
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render_error("line one\n{{ 1 + }}"), "test.jinja: chat_template line 2: unexpected '}}' in an expression");
  EXPECT_EQ(render_error("a\nb\n{% if x %}\nno end"),
            "test.jinja: chat_template line 4: unexpected end of template: "
            "expected {% endif %}");
  EXPECT_EQ(render_error("\n\n{{ 'open"), "test.jinja: chat_template line 3: unterminated string literal");
  EXPECT_EQ(render_error("{% frobnicate %}"),
            "test.jinja: chat_template line 1: unknown or unsupported statement "
            "'frobnicate'");
  EXPECT_EQ(render_error("x\n{{ a"), "test.jinja: chat_template line 2: unclosed '{{'");
  EXPECT_EQ(render_error("{# never closed"), "test.jinja: chat_template line 1: unclosed comment '{#'");
  EXPECT_EQ(render_error("{{ a ? b }}"), "test.jinja: chat_template line 1: unexpected character '?' in a tag");
}

TEST(Jinja, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render_error("ok\n\n{{ raise_exception('Only user and assistant roles are supported!') }}"),
            "test.jinja: chat_template line 3: Only user and assistant roles are supported!");
  EXPECT_EQ(render_error("{% for m in ms %}\n{% if m == 2 %}\n{{ raise_exception('bad ' ~ m) }}{% endif %}{% endfor %}",
                         R"({"ms": [1, 2]})"),
            "test.jinja: chat_template line 3: bad 2");
  EXPECT_EQ(render_error("\n{{ x|frobnicate }}"), "test.jinja: chat_template line 2: unknown filter 'frobnicate'");
  EXPECT_EQ(render_error("{{ x is frobnicated }}"), "test.jinja: chat_template line 1: unknown test 'frobnicated'");
  EXPECT_EQ(render_error("\n\n{{ nothing() }}"), "test.jinja: chat_template line 3: 'nothing' is undefined");
  EXPECT_EQ(render_error("{{ 1 / 0 }}"), "test.jinja: chat_template line 1: division by zero");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"),
            "test.jinja: chat_template line 1: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"),
            "test.jinja: chat_template line 1: cannot assign attribute 'a' on 'x': it is not a namespace");
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}"), "test.jinja: chat_template line 1: integer overflow");
}

// jinja2's default Undefined: a missing variable, attribute or item prints as
// nothing, iterates as empty and can be tested and defaulted, but looking
// inside it (attribute, item, slice, call) or computing with it is an
// UndefinedError that says how it came about.
TEST(Jinja, UndefinedPrintsEmptyAndIsTestable) {
  const std::string m = R"({"m": {"role": "user"}, "xs": [1]})";
  EXPECT_EQ(render("[{{ m.nothing }}][{{ m['nothing'] }}][{{ xs[5] }}][{{ missing }}][{{ none.x }}][{{ 'abc'.x }}]", m),
            "[][][][][][]");
  EXPECT_EQ(render("{{ m.nothing is defined }} {{ m.nothing is undefined }} {{ m.role is defined }}", m),
            "False True True");
  EXPECT_EQ(
      render("{{ m.nothing|default('d') }} {{ m.nothing|d('e') }} {{ m.nothing|length }} {{ m.nothing ~ 'z' }}", m),
      "d e 0 z");
  EXPECT_EQ(
      render("{% for x in m.nothing %}x{% else %}empty{% endfor %} {{ not m.nothing }} {{ m.nothing == none }}", m),
      "empty True False");
  EXPECT_EQ(render("{% if m.nothing %}y{% else %}n{% endif %}{{ m.nothing|list }}", m), "n[]");
}

TEST(Jinja, LookingInsideUndefinedNamesWhatIsMissing) {
  const std::string vars = R"({"messages": [{"role": "user", "content": "hi"}], "m": {}, "xs": [1, 2]})";
  const auto error = [&](const std::string& source) { return render_error(source, vars); };
  // The probe's case: an attribute of a missing attribute.
  EXPECT_EQ(error("ok\n{{ messages[0].nonexistent.deeper }}"),
            "test.jinja: chat_template line 2: 'dict object' has no attribute 'nonexistent'");
  EXPECT_EQ(error("{{ m['a']['b'] }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(error("{{ missing.attribute }}"), "test.jinja: chat_template line 1: 'missing' is undefined");
  EXPECT_EQ(error("{{ missing[0] }}"), "test.jinja: chat_template line 1: 'missing' is undefined");
  EXPECT_EQ(error("{{ xs[5].a }}"), "test.jinja: chat_template line 1: list object has no element 5");
  EXPECT_EQ(error("{{ m[1.5].a }}"), "test.jinja: chat_template line 1: dict object has no element 1.5");
  EXPECT_EQ(error("{{ none.x.y }}"), "test.jinja: chat_template line 1: 'None' has no attribute 'x'");
  EXPECT_EQ(error("{{ 'abc'.x.y }}"), "test.jinja: chat_template line 1: 'str object' has no attribute 'x'");
  EXPECT_EQ(error("{% set ns = namespace() %}{{ ns.a.b }}"),
            "test.jinja: chat_template line 1: 'jinja2.utils.Namespace object' has no attribute 'a'");
  EXPECT_EQ(error("{{ m.nothing[1:] }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'nothing'");
  // Calling it, or a method of it.
  EXPECT_EQ(error("{{ m.nothing() }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'nothing'");
  EXPECT_EQ(error("{{ m.nothing.strip() }}"),
            "test.jinja: chat_template line 1: 'dict object' has no attribute 'nothing'");
  // Arithmetic and ordering.
  EXPECT_EQ(error("{{ m.count + 1 }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'count'");
  EXPECT_EQ(error("{{ 1 < m.count }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'count'");
  EXPECT_EQ(error("{{ -m.count }}"), "test.jinja: chat_template line 1: 'dict object' has no attribute 'count'");
  // The undefined values jinja2 makes itself carry its hints.
  EXPECT_EQ(error("{% for x in xs %}{{ loop.previtem.a }}{% endfor %}"),
            "test.jinja: chat_template line 1: there is no previous item");
  EXPECT_EQ(error("{% macro f(a) %}\n{{ a.b }}{% endmacro %}{{ f() }}"),
            "test.jinja: chat_template line 2: parameter 'a' was not provided");
  EXPECT_EQ(error("{{ (xs|first if false).a }}"),
            "test.jinja: chat_template line 1: the inline if-expression on line 1 evaluated to false and no else "
            "section was defined.");
  EXPECT_EQ(error("{{ ([]|first).a }}"), "test.jinja: chat_template line 1: No first item, sequence was empty.");
  // A stored undefined keeps its story.
  EXPECT_EQ(error("{% set x = m.gone %}\n{{ x|default('ok') }}\n{{ x.y }}"),
            "test.jinja: chat_template line 3: 'dict object' has no attribute 'gone'");
  // And a missing key in a template that checks it first is fine.
  EXPECT_EQ(render("{% if m.tool_calls is defined %}{{ m.tool_calls.x }}{% endif %}ok", vars), "ok");
}

TEST(Jinja, NamespaceSurvivesLoopsAndPlainSetDoesNot) {
  const std::string source =
      "{% set found = 'no' %}{% set ns = namespace(found='no') %}"
      "{% for m in messages %}{% if m.role == 'system' %}{% set found = 'yes' %}{% set ns.found = 'yes' %}"
      "{% endif %}{% endfor %}{{ found }} {{ ns.found }}";
  EXPECT_EQ(render(source, R"({"messages": [{"role": "system"}, {"role": "user"}]})"), "no yes");
}

TEST(Jinja, UnicodeIsCountedInCodePoints) {
  EXPECT_EQ(render("{{ s|length }} {{ s[0] }} {{ s[-1] }} {{ s|reverse }}", R"({"s": "日本語😀"})"), "4 日 😀 😀語本日");
  // Python's str.strip() strips Unicode spaces (U+3000, U+00A0) too.
  EXPECT_EQ(render("[{{ s|trim }}]", R"({"s": "\u3000\u00a0 hi \u3000"})"), "[hi]");
}

TEST(Jinja, ToJsonKeepsNonAscii) {
  EXPECT_EQ(render("{{ m|tojson }}", R"({"m": {"content": "héllo 日本 😀\u0001"}})"),
            R"({"content": "héllo 日本 😀\u0001"})");
  EXPECT_EQ(render("{{ m|tojson(separators=[',', ':'], sort_keys=true) }}", R"({"m": {"b": 1, "a": 2}})"),
            R"({"a":2,"b":1})");
}

TEST(Jinja, RawBlocksAreText) {
  EXPECT_EQ(render("{% raw %}{{ not evaluated }}{% endraw %}!"), "{{ not evaluated }}!");
}

TEST(Jinja, LimitsStopRunawayTemplates) {
  Limits limits;
  limits.max_output = 1000;
  limits.max_work = 100000;
  EXPECT_NE(
      render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", limits)
          .find("too much work"),
      std::string::npos);
  EXPECT_NE(render_error("{% for i in range(2000) %}x{% endfor %}", "{}", limits).find("output exceeds"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'ab' * 100000 }}", "{}", limits).find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", limits).find("nest deeper"),
            std::string::npos);
  // A namespace holding itself prints as far as the depth limit, then fails cleanly.
  EXPECT_NE(render_error("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns }}").find("nests too deeply"),
            std::string::npos);
  std::string deep(300, '(');
  EXPECT_NE(render_error("{{ " + deep + " }}").find("nests too deeply"), std::string::npos);
}

// ----- memory -----

struct Outcome {
  std::string error;  // "" when the render succeeded
  RenderStats stats;
};

Outcome render_stats(const std::string& source, const Limits& limits = {}, const std::string& variables = "{}") {
  Outcome outcome;
  try {
    Template(source, "test.jinja: chat_template")
        .render(nlohmann::ordered_json::parse(variables), limits, &outcome.stats);
  } catch (const Error& error) {
    outcome.error = error.what();
  }
  return outcome;
}

// The error names the limit, its size and the template line (one of `lines`).
void expect_limit(const Outcome& outcome, std::initializer_list<int> lines, const std::string& limit) {
  bool line_named = false;
  for (const int line : lines) {
    const std::string prefix = "test.jinja: chat_template line " + std::to_string(line) + ": ";
    line_named = line_named || outcome.error.rfind(prefix, 0) == 0;
  }
  EXPECT_TRUE(line_named) << outcome.error;
  EXPECT_NE(outcome.error.find(limit), std::string::npos) << outcome.error;
  EXPECT_EQ(outcome.stats.leaked_bytes, 0u);
}
void expect_limit(const Outcome& outcome, int line, const std::string& limit) { expect_limit(outcome, {line}, limit); }

std::string live_limit(size_t bytes) {
  return "holds more than " + std::to_string(bytes) + " bytes of values and text at once (the live-memory limit)";
}

Limits small_memory(size_t live_mib) {
  Limits limits;
  limits.max_live_bytes = live_mib << 20;
  return limits;
}

// The probe's first case: before values were freed during a render, each inner
// range(100000) leaked a 100k-item list per outer iteration, 24 GB in all.
TEST(JinjaMemory, NestedRangeCounterStopsAtTheWorkLimitInLittleMemory) {
  const Outcome outcome = render_stats(
      "{% set ns = namespace(count=0) %}\n"
      "{% for i in range(100000) %}{% for j in range(100000) %}\n"
      "{% set ns.count = ns.count + 1 %}\n"
      "{% endfor %}{% endfor %}{{ ns.count }}");
  const std::regex expected(
      "test\\.jinja: chat_template line [2-4]: the template does too much work \\(over 268435456 steps\\)");
  EXPECT_TRUE(std::regex_match(outcome.error, expected)) << outcome.error;
  EXPECT_LT(outcome.stats.peak_live_bytes, size_t{64} << 10);
  EXPECT_EQ(outcome.stats.leaked_bytes, 0u);
}

TEST(JinjaMemory, PrintingDoubleLoopStops) {
  const std::string source =
      "{% for i in range(100000) %}\n{% for j in range(100000) %}\n{{ i }} {{ j }}\n{% endfor %}{% endfor %}";
  const Outcome defaults = render_stats(source);
  EXPECT_NE(defaults.error.find("too much work (over 268435456 steps)"), std::string::npos) << defaults.error;
  // The output is the only thing it keeps: under the output limit's buffer.
  EXPECT_LT(defaults.stats.peak_live_bytes, size_t{130} << 20);
  Limits limits;
  limits.max_output = 1 << 20;
  expect_limit(render_stats(source, limits), 3, "the output exceeds the limit of 1048576 bytes");
}

TEST(JinjaMemory, BigStringCopiesIntoAListHitTheLiveLimit) {
  const Outcome outcome = render_stats(
      "{% set big = 'x' * 1000000 %}{% set ns = namespace(items=[]) %}\n"
      "{% for i in range(100000) %}\n"
      "{% set ns.items = ns.items + [big ~ i] %}\n"
      "{% endfor %}",
      small_memory(64));
  expect_limit(outcome, 3, live_limit(size_t{64} << 20));
  EXPECT_LE(outcome.stats.peak_live_bytes, size_t{64} << 20);
  EXPECT_GT(outcome.stats.peak_live_bytes, size_t{60} << 20);
}

TEST(JinjaMemory, SharedBigStringIsHeldOnceAndChurnHitsTheAllocationLimit) {
  // The same 1 MB string appended again and again is one string: what grows
  // is the list, rebuilt each time, so the churn limit stops it.
  Limits limits;
  limits.max_allocated_bytes = size_t{256} << 20;
  const Outcome outcome = render_stats(
      "{% set big = 'x' * 1000000 %}{% set ns = namespace(items=[]) %}{% for i in range(1000000) %}\n"
      "{% set ns.items = ns.items + [big] %}{% endfor %}",
      limits);
  expect_limit(outcome, 2, "allocates more than 268435456 bytes in all (the allocation limit)");
  EXPECT_LT(outcome.stats.peak_live_bytes, size_t{8} << 20);
}

TEST(JinjaMemory, GrowingDictChainHitsTheLiveLimit) {
  expect_limit(render_stats("{% set ns = namespace(d={}) %}{% for i in range(1000000) %}\n"
                            "{% set ns.d = {'inner': ns.d, 'pad': 'x' * 100 ~ i} %}{% endfor %}",
                            small_memory(16)),
               2, live_limit(size_t{16} << 20));
}

TEST(JinjaMemory, SelfReferencingNamespacesCountUntilTheRenderEnds) {
  // A cycle is freed only when the render ends; until then its bytes count.
  const Outcome outcome = render_stats(
      "{% for i in range(1000000) %}{% set n = namespace(pad='x' * 1000 ~ i) %}\n"
      "{% set n.self = n %}{% endfor %}",
      small_memory(16));
  EXPECT_NE(outcome.error.find(live_limit(size_t{16} << 20)), std::string::npos) << outcome.error;
  EXPECT_EQ(outcome.stats.leaked_bytes, 0u);
  // A finished render frees its cycles too.
  const Outcome finished = render_stats(
      "{% for i in range(100) %}{% set n = namespace(pad='x' * 1000 ~ i) %}{% set n.self = n %}"
      "{% set n.list = [n, [n]] %}{% endfor %}ok",
      small_memory(16));
  EXPECT_EQ(finished.error, "");
  EXPECT_GT(finished.stats.peak_live_bytes, 100u * 1000u);
  EXPECT_EQ(finished.stats.leaked_bytes, 0u);
}

TEST(JinjaMemory, MacrosReturningBigStringsHitTheLiveLimit) {
  // The limit trips inside the macro (line 1) or where its result is kept (line 3).
  expect_limit(render_stats("{% macro big(n) %}{{ 'x' * 100000 }}{{ n }}{% endmacro %}\n"
                            "{% set ns = namespace(all=[]) %}{% for i in range(100000) %}\n"
                            "{% set ns.all = ns.all + [big(i)] %}{% endfor %}",
                            small_memory(16)),
               {1, 3}, live_limit(size_t{16} << 20));
}

TEST(JinjaMemory, StringOperationsAreSizedOrCharged) {
  const std::string output_limit = "a string exceeds the output limit of 67108864 bytes";
  // Sized before they are built.
  expect_limit(render_stats("{% set s = 'x' * 50000000 %}\n{{ s ~ s }}"), 2, output_limit);
  expect_limit(render_stats("{% set s = 'x' * 50000000 %}\n{{ s + s }}"), 2, output_limit);
  expect_limit(render_stats("\n{{ ('ab' * 1000000).replace('', 'xyz' * 100) }}"), 2, output_limit);
  expect_limit(render_stats("\n{{ range(100000)|join(',') * 1000 }}"), 2, output_limit);
  expect_limit(render_stats("\n{{ ['x' * 40000000, 'y' * 40000000]|join }}"), 2, output_limit);
  // Lists whose length the input decides are charged as they grow.
  expect_limit(render_stats("\n{{ range(100000000)|list|length }}"), 2, live_limit(size_t{256} << 20));
  expect_limit(render_stats("{% set s = 'a ' * 10000000 %}\n{{ s.split()|length }}"), 2, live_limit(size_t{256} << 20));
  expect_limit(render_stats("{% set s = 'x' * 10000000 %}\n{{ s|list|length }}"), 2, live_limit(size_t{256} << 20));
  // Dict keys count too.
  expect_limit(render_stats("{% set ns = namespace(keys=[]) %}{% for i in range(100000) %}\n"
                            "{% set ns.keys = ns.keys + [{('k' * 1000 ~ i): 1}] %}{% endfor %}",
                            small_memory(4)),
               2, live_limit(size_t{4} << 20));
}

TEST(JinjaMemory, DroppedValuesAreFreedEachIteration) {
  // Each iteration builds a list, a string, a dict and a namespace and drops
  // them at the next: the most held at once does not grow with the loop.
  const auto source = [](int n) {
    return "{% set total = namespace(n=0) %}{% for i in range(" + std::to_string(n) +
           ") %}{% set xs = range(1000)|list %}{% set s = 'x' * 1000 ~ i %}"
           "{% set d = {'xs': xs, 's': s} %}{% set n = namespace(d=d) %}{% set total.n = total.n + xs|length %}"
           "{% endfor %}{{ total.n }}";
  };
  const Outcome few = render_stats(source(10));
  const Outcome many = render_stats(source(3000));
  ASSERT_EQ(few.error, "");
  ASSERT_EQ(many.error, "");
  EXPECT_GT(few.stats.peak_live_bytes, size_t{40000});  // at least the 1000-item list
  // `s` is a few bytes longer once i has more digits; nothing else may grow.
  EXPECT_LE(many.stats.peak_live_bytes, few.stats.peak_live_bytes + 64);
  EXPECT_GT(many.stats.allocated_bytes, 100 * few.stats.allocated_bytes);
  EXPECT_EQ(many.stats.leaked_bytes, 0u);
  // The same loop keeping everything hits the live limit.
  expect_limit(render_stats("{% set ns = namespace(kept=[]) %}{% for i in range(1000000) %}\n"
                            "{% set ns.kept = ns.kept + [range(1000)|list] %}{% endfor %}",
                            small_memory(16)),
               2, live_limit(size_t{16} << 20));
}

TEST(JinjaMemory, DeepChainsAreFreedWithoutRecursion) {
  // A million nested lists: freeing them one by one must not overflow the stack.
  const Outcome outcome = render_stats(
      "{% set ns = namespace(x=none) %}{% for i in range(1000000) %}{% set ns.x = [ns.x] %}{% endfor %}ok");
  EXPECT_EQ(outcome.error, "");
  EXPECT_GT(outcome.stats.peak_live_bytes, size_t{50} << 20);
  EXPECT_EQ(outcome.stats.leaked_bytes, 0u);
}

// ----- the accounting against the process's real memory -----

// A /proc/self/status field in bytes ("VmRSS", "VmHWM"), if Linux has it.
std::optional<size_t> status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return std::nullopt;
}

// Makes VmHWM (peak resident memory) restart from VmRSS (Linux 4.0+).
bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.close();
  return !clear_refs.fail();
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// What the process really needed for a render, next to what the heap counted:
// the accounting may overstate (capacity never touched) but must not
// understate by more than kRssFactor plus kRssSlack (the template's syntax
// tree, scopes and the short-lived text a filter builds before it becomes a
// value are not values).
constexpr double kRssFactor = 2.0;
constexpr size_t kRssSlack = size_t{32} << 20;

struct RssCheck {
  bool available = false;
  size_t growth = 0;  // peak resident bytes during the render above those before it
};

Outcome render_measured(const Template& chat_template, const nlohmann::ordered_json& variables, RssCheck& rss) {
  Outcome outcome;
#if defined(__GLIBC__)
  // Hand freed pages back first, so that reusing them shows as growth again.
  malloc_trim(0);
#endif
  const std::optional<size_t> before = status_bytes("VmRSS");
  rss.available = !kAddressSanitizer && before.has_value() && reset_peak_rss();
  try {
    chat_template.render(variables, {}, &outcome.stats);
  } catch (const Error& error) {
    outcome.error = error.what();
  }
  const std::optional<size_t> peak = status_bytes("VmHWM");
  rss.available = rss.available && peak.has_value();
  if (rss.available) rss.growth = *peak > *before ? *peak - *before : 0;
  return outcome;
}

TEST(JinjaMemory, AccountingMatchesResidentMemory) {
  const Template chat_template("{% set xs = range(2000000)|list %}{% set s = 'x' * 50000000 %}{{ xs|length }}",
                               "test.jinja: chat_template");
  RssCheck rss;
  const Outcome outcome = render_measured(chat_template, nlohmann::ordered_json::object(), rss);
  ASSERT_EQ(outcome.error, "");
  // 2M values of 48 bytes (96 MB) and 50 MB of text.
  EXPECT_GT(outcome.stats.peak_live_bytes, size_t{135} << 20);
  EXPECT_LT(outcome.stats.peak_live_bytes, size_t{150} << 20);
  if (!rss.available) GTEST_SKIP() << "no /proc peak resident memory here (or AddressSanitizer holds freed memory)";
  EXPECT_GT(static_cast<double>(rss.growth), 0.8 * static_cast<double>(outcome.stats.peak_live_bytes));
  EXPECT_LE(static_cast<double>(rss.growth),
            kRssFactor * static_cast<double>(outcome.stats.peak_live_bytes) + static_cast<double>(kRssSlack));
}

// Random templates from a small grammar of loops, sets, namespaces, appends
// and string operations, rendered with the default limits.
class TemplateGenerator {
 public:
  explicit TemplateGenerator(uint64_t seed) : rng_(seed) {}

  std::string make() {
    std::string out =
        "{% macro wrap(p) %}[{{ p }}]{% endmacro %}"
        "{% set ns = namespace(s='seed', l=['a', 'b'], d={'k': 'v'}, n=0) %}";
    out += block(0, 2 + pick(4));
    return out;
  }

 private:
  size_t pick(size_t n) { return static_cast<size_t>(rng_() % n); }
  std::string count() {
    static const char* const kCounts[] = {"2", "3", "10", "50", "200", "1000"};
    return kCounts[pick(std::size(kCounts))];
  }
  std::string repeat_count() {
    static const char* const kCounts[] = {"2", "5", "100", "1000", "30000"};
    return kCounts[pick(std::size(kCounts))];
  }
  std::string loop_var(int depth) { return depth > 0 ? "v" + std::to_string(pick(depth)) : "ns.n"; }

  std::string block(int depth, size_t statements) {
    std::string out;
    for (size_t i = 0; i < statements; ++i) out += statement(depth);
    return out;
  }

  std::string statement(int depth) {
    switch (pick(depth < 2 ? 10 : 8)) {
      case 0:
        return "{% set ns.s = " + text(depth, 0) + " %}";
      case 1:
        return "{% set ns.l = " + list(depth, 0) + " %}";
      case 2:
        return "{% set ns.d = {'k': " + value(depth, 0) + ", 'prev': ns.d} %}";
      case 3:
        return "{% set ns.n = ns.n + 1 %}{% set a = " + value(depth, 0) + " %}";
      case 4:
        return "{{ " + text(depth, 0) + " }}";
      case 5:
        return "{% set t = namespace(x=" + value(depth, 0) + ") %}{% set t.me = t %}";
      case 6:
        return "{% if ns.n % 2 == 0 %}" + statement(depth) + "{% else %}{% set ns.l = ns.l[1:] %}{% endif %}";
      case 7:
        return "{% set ns.l = ns.l + [" + value(depth, 0) + "] %}";
      default: {
        const std::string var = "v" + std::to_string(depth);
        static const char* const kSources[] = {"ns.l", "messages", "ns.s", "ns.l|reverse"};
        const std::string source = pick(2) == 0 ? "range(" + count() + ")" : kSources[pick(std::size(kSources))];
        return "{% for " + var + " in " + source + " %}" + block(depth + 1, 1 + pick(3)) + "{% endfor %}";
      }
    }
  }

  std::string value(int depth, int nesting) {
    switch (pick(4)) {
      case 0:
        return list(depth, nesting);
      case 1:
        return "namespace(v=" + text(depth, nesting + 1) + ")";
      default:
        return text(depth, nesting);
    }
  }

  std::string text(int depth, int nesting) {
    if (nesting > 3) return "ns.s";
    switch (pick(14)) {
      case 0:
        return "'abc'";
      case 1:
        return "ns.s";
      case 2:
        return "(" + text(depth, nesting + 1) + " ~ " + text(depth, nesting + 1) + ")";
      case 3:
        return "(" + text(depth, nesting + 1) + " * " + repeat_count() + ")";
      case 4:
        return text(depth, nesting + 1) + "|upper";
      case 5:
        return text(depth, nesting + 1) + "|replace('a', 'xyz')";
      case 6:
        return "(" + text(depth, nesting + 1) + ")[::2]";
      case 7:
        return list(depth, nesting + 1) + "|join(',')";
      case 8:
        return "(" + text(depth, nesting + 1) + ").strip('a')";
      case 9:
        return list(depth, nesting + 1) + "|tojson";
      case 10:
        return "wrap(" + text(depth, nesting + 1) + ")";
      case 11:
        return "(" + loop_var(depth) + "|string)";
      case 12:
        return "messages[0].content";
      default:
        return "range(" + count() + ")|join(' ')";
    }
  }

  std::string list(int depth, int nesting) {
    if (nesting > 3) return "ns.l";
    switch (pick(8)) {
      case 0:
        return "[" + value(depth, nesting + 1) + ", " + value(depth, nesting + 1) + "]";
      case 1:
        return "(ns.l + [" + value(depth, nesting + 1) + "])";
      case 2:
        return "(range(" + count() + ")|list)";
      case 3:
        return "(" + text(depth, nesting + 1) + ").split('a')";
      case 4:
        return "ns.l[1:]";
      case 5:
        return "(messages|map(attribute='content')|list)";
      case 6:
        return "(ns.l * " + repeat_count() + ")";
      default:
        return "(" + text(depth, nesting + 1) + "|list)";
    }
  }

  std::mt19937_64 rng_;
};

TEST(JinjaMemory, RandomTemplatesStayUnderTheLimitsAndTheAccountingHolds) {
  const auto variables = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "a banana"}, {"role": "assistant", "content": "an apple"}]})");
  const Limits limits;
  TemplateGenerator generator(20240527);
  int succeeded = 0;
  int memory_errors = 0;
  int other_errors = 0;
  size_t most_held = 0;
  double worst_ratio = 0;
  for (int i = 0; i < 160; ++i) {
    const std::string source = generator.make();
    SCOPED_TRACE(source);
    const Template chat_template(source, "test.jinja: chat_template");
    RssCheck rss;
    const Outcome outcome = render_measured(chat_template, variables, rss);
    if (outcome.error.empty()) {
      ++succeeded;
    } else if (outcome.error.find("memory limit") != std::string::npos ||
               outcome.error.find("allocation limit") != std::string::npos) {
      ++memory_errors;
    } else {
      ++other_errors;
    }
    // Every failure is a clean error naming its line.
    if (!outcome.error.empty()) {
      EXPECT_EQ(outcome.error.rfind("test.jinja: chat_template line ", 0), 0u) << outcome.error;
    }
    EXPECT_LE(outcome.stats.peak_live_bytes, limits.max_live_bytes);
    EXPECT_LE(outcome.stats.allocated_bytes, limits.max_allocated_bytes);
    EXPECT_LE(outcome.stats.work, limits.max_work);
    EXPECT_EQ(outcome.stats.leaked_bytes, 0u);
    most_held = std::max(most_held, outcome.stats.peak_live_bytes);
    if (rss.available) {
      EXPECT_LE(static_cast<double>(rss.growth),
                kRssFactor * static_cast<double>(outcome.stats.peak_live_bytes) + static_cast<double>(kRssSlack))
          << "peak counted " << outcome.stats.peak_live_bytes << ", resident growth " << rss.growth;
      if (rss.growth > (size_t{8} << 20)) {
        worst_ratio = std::max(worst_ratio, static_cast<double>(rss.growth) / static_cast<double>(std::max<size_t>(
                                                                                  outcome.stats.peak_live_bytes, 1)));
      }
    }
  }
  std::cout << "random templates: " << succeeded << " rendered, " << memory_errors << " hit a memory limit, "
            << other_errors << " another error; most held " << (most_held >> 20) << " MiB; worst resident/counted "
            << worst_ratio << "\n";
  // The grammar reaches both ends: templates that render and ones the memory limits stop.
  EXPECT_GE(succeeded, 40);
  EXPECT_GE(memory_errors, 5);
}

}  // namespace jinja_test
}  // namespace titan::data::jinja
