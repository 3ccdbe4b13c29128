// Unit tests of titan's Jinja subset (data/jinja/). The expected strings in
// kCases are what Python's jinja2 3.1.6 renders for the same template and
// variables, in the environment Hugging Face's apply_chat_template uses
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its
// json.dumps-based tojson); the remaining tests check errors and limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "titan/core/error.h"
#include "titan/data/jinja/jinja_interpreter.h"

namespace titan::data::jinja {
namespace {

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

TEST(Jinja, UndefinedIsLenient) {
  // An attribute of an undefined value is undefined too (jinja2 would raise).
  EXPECT_EQ(render("[{{ a.b.c }}][{{ a['x'][0] }}]{% for x in a %}x{% endfor %}{{ a|length }}{{ a ~ 'z' }}"), "[][]0z");
  EXPECT_EQ(render("{{ a is defined }} {{ a.b is defined }} {{ a is undefined }}"), "False False True");
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

}  // namespace
}  // namespace titan::data::jinja
