#include "data/test_text.h"

#include <array>
#include <vector>

namespace titan::data::testing {
namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }
  template <typename T, size_t N>
  const T& pick(const std::array<T, N>& items) {
    return items[below(N)];
  }

 private:
  uint64_t state_;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_range(std::string& out, Rng& rng, uint32_t first, uint32_t last, size_t count) {
  for (size_t i = 0; i < count; ++i) append_utf8(out, first + static_cast<uint32_t>(rng.below(last - first + 1)));
}

const std::array<const char*, 96> kWords = {"the",
                                            "of",
                                            "and",
                                            "to",
                                            "in",
                                            "is",
                                            "was",
                                            "that",
                                            "for",
                                            "it",
                                            "with",
                                            "as",
                                            "his",
                                            "on",
                                            "be",
                                            "at",
                                            "by",
                                            "this",
                                            "had",
                                            "not",
                                            "are",
                                            "but",
                                            "from",
                                            "or",
                                            "have",
                                            "an",
                                            "they",
                                            "which",
                                            "one",
                                            "you",
                                            "were",
                                            "her",
                                            "all",
                                            "she",
                                            "there",
                                            "would",
                                            "their",
                                            "we",
                                            "him",
                                            "been",
                                            "has",
                                            "when",
                                            "who",
                                            "will",
                                            "more",
                                            "no",
                                            "if",
                                            "out",
                                            "so",
                                            "said",
                                            "what",
                                            "up",
                                            "its",
                                            "about",
                                            "into",
                                            "than",
                                            "them",
                                            "can",
                                            "only",
                                            "other",
                                            "new",
                                            "some",
                                            "could",
                                            "time",
                                            "these",
                                            "two",
                                            "may",
                                            "then",
                                            "do",
                                            "first",
                                            "any",
                                            "my",
                                            "now",
                                            "such",
                                            "like",
                                            "our",
                                            "over",
                                            "man",
                                            "me",
                                            "even",
                                            "most",
                                            "made",
                                            "after",
                                            "also",
                                            "did",
                                            "many",
                                            "before",
                                            "must",
                                            "through",
                                            "tokenizer",
                                            "internationalization",
                                            "antidisestablishmentarianism",
                                            "pneumonoultramicroscopic",
                                            "naïve",
                                            "café",
                                            "Zürich"};
const std::array<const char*, 14> kContractions = {"'s", "'t", "'re", "'ve", "'m",  "'ll", "'d",
                                                   "'S", "'T", "'RE", "'Ve", "'LL", "'D",  "’s"};
const std::array<const char*, 16> kMixedCase = {
    "HelloWorld", "iPhone", "XMLHttpRequest", "ALLCAPS",    "camelCase", "Über",  "McDonald", "snake_case",
    "ÉCOLE",      "eBay",   "NASA's",         "JavaScript", "IOError",   "ÀÉÎõü", "ǅemal",    "ΣΊΣΥΦΟΣ"};
const std::array<const char*, 12> kCode = {
    "#include <vector>\nint main(int argc, char** argv) {\n    std::vector<int> v{1, 2, 3};\n"
    "    for (auto& x : v) x *= 2;  // double\n    return v[0] != 2 ? 1 : 0;\n}\n",
    "def fib(n):\n\tif n < 2:\n\t\treturn n\n\treturn fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in "
    "range(10)])\n",
    "{\"name\": \"titan\", \"version\": [0, 1, 0], \"ok\": true, \"ratio\": 3.14159e-10, \"nested\": {\"a\": null}}\n",
    "SELECT id, COUNT(*) AS n FROM users WHERE email LIKE '%@example.com' GROUP BY id HAVING n > 1;\n",
    "if (a && b || !c) { x <<= 2; y >>= 3; z ^= 0xFF; p->q = &r; ns::f<T>(); }\n",
    "const re = /^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@([a-z]+)\\.com$/i;\nconsole.log(`${a}${b}`);\n",
    "    \"\"\"Docstring with    internal   spaces.\"\"\"\n        pass\n\n    \n",
    "https://example.com/path/to/page?query=value&other=1#fragment mailto:someone@example.org\n",
    "<html>\n  <body>\n    <p class=\"x\">Hello&nbsp;world &lt;3</p>\n  </body>\n</html>\n",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![0; 1024]; Ok(()) }\r\n",
    "$ ls -la | grep '^d' | awk '{print $9}' > dirs.txt 2>&1 && echo \"done\"\n",
    "x = [[1,2,3],[4,5,6]]; y = x[::-1]; z = {k: v**2 for k, v in d.items() if v % 2 == 0}\n"};
const std::array<const char*, 10> kEmojiSequences = {
    "👨‍👩‍👧‍👦",   "🏳️‍🌈", "👍🏽", "🇫🇷🇯🇵", "1️⃣", "❤️", "🧑🏿‍💻",
    "👩‍❤️‍💋‍👨", "✌🏻",        "🫠"};

void append_whitespace(std::string& out, Rng& rng, bool disputed) {
  switch (rng.below(disputed ? 12 : 10)) {
    case 0:
      out.append(1 + rng.below(40), ' ');
      break;
    case 1:
      out.append(1 + rng.below(6), '\t');
      break;
    case 2:
      out += "\n\n\n";
      break;
    case 3:
      out += " \t \n  \n\t";
      break;
    case 4:
      out += "\r\n";
      break;
    case 5:
      out += "   \r\n\r\n  ";
      break;
    case 6:
      append_utf8(out, 0x00A0);
      append_utf8(out, 0x00A0);
      break;  // no-break spaces
    case 7:
      append_utf8(out, 0x3000);
      break;  // ideographic space
    case 8:
      append_utf8(out, 0x2003);
      append_utf8(out, 0x2009);
      break;  // em + thin space
    case 9:
      append_utf8(out, 0x2028);
      out += ' ';
      break;  // line separator
    case 10:
      append_utf8(out, 0x0085);
      out += "  ";
      break;  // NEL
    default:
      out += ' ';
      append_utf8(out, rng.chance(50) ? 0xFEFF : 0x180E);
      out += ' ';
      break;
  }
}

void append_number(std::string& out, Rng& rng) {
  switch (rng.below(7)) {
    case 0:
      out += std::to_string(rng.below(10));
      break;
    case 1:
      out += std::to_string(rng.next() % 10000000);
      break;
    case 2:
      out += std::to_string(rng.below(1000)) + "," + std::to_string(100 + rng.below(900)) + ",000";
      break;
    case 3:
      out += std::to_string(rng.below(100)) + "." + std::to_string(rng.below(100000));
      break;
    case 4:
      append_range(out, rng, 0x0660, 0x0669, 1 + rng.below(5));
      break;  // Arabic-Indic digits
    case 5:
      append_range(out, rng, 0xFF10, 0xFF19, 1 + rng.below(5));
      break;  // fullwidth digits
    default:
      out += "½²³ⅫⅣ";
      break;  // No and Nl numbers
  }
}

void append_script(std::string& out, Rng& rng) {
  const size_t n = 1 + rng.below(12);
  switch (rng.below(12)) {
    case 0:
      append_range(out, rng, 0x4E00, 0x9FA5, n);
      out += rng.chance(50) ? "，" : "。";
      break;  // CJK
    case 1:
      append_range(out, rng, 0x3041, 0x3096, n);
      append_range(out, rng, 0x30A1, 0x30FA, 3);
      break;  // kana
    case 2:
      append_range(out, rng, 0xAC00, 0xD7A3, n);
      break;  // Hangul syllables
    case 3:
      append_range(out, rng, 0x0410, 0x044F, n);
      break;  // Cyrillic
    case 4:
      append_range(out, rng, 0x03B1, 0x03C9, n);
      break;  // Greek
    case 5:   // Arabic letters with harakat (combining marks)
      for (size_t i = 0; i < n; ++i) {
        append_range(out, rng, 0x0621, 0x063A, 1);
        if (rng.chance(40)) append_range(out, rng, 0x064B, 0x0652, 1);
      }
      break;
    case 6:
      append_range(out, rng, 0x05D0, 0x05EA, n);
      break;  // Hebrew
    case 7:   // Devanagari consonants with vowel signs and virama
      for (size_t i = 0; i < n; ++i) {
        append_range(out, rng, 0x0915, 0x0939, 1);
        if (rng.chance(50)) append_range(out, rng, 0x093E, 0x094D, 1);
      }
      break;
    case 8:  // Thai with above/below vowels
      for (size_t i = 0; i < n; ++i) {
        append_range(out, rng, 0x0E01, 0x0E2E, 1);
        if (rng.chance(30)) append_utf8(out, rng.chance(50) ? 0x0E31 : 0x0E35);
      }
      break;
    case 9:  // Latin with combining accents (not precomposed)
      for (size_t i = 0; i < n; ++i) {
        append_range(out, rng, 'a', 'z', 1);
        if (rng.chance(40)) append_range(out, rng, 0x0300, 0x036F, 1);
      }
      break;
    case 10:
      append_range(out, rng, 0x1F600, 0x1F64F, n);
      break;  // emoticons
    default:
      out += rng.pick(kEmojiSequences);
      append_range(out, rng, 0x1F300, 0x1F5FF, 1);
      break;
  }
}

void append_sentence(std::string& out, Rng& rng) {
  const size_t words = 3 + rng.below(15);
  for (size_t i = 0; i < words; ++i) {
    if (i > 0) out += ' ';
    std::string word = rng.chance(5) ? rng.pick(kMixedCase) : rng.pick(kWords);
    if (i == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
    out += word;
    if (rng.chance(8)) out += rng.pick(kContractions);
    if (rng.chance(6)) {
      out += ' ';
      append_number(out, rng);
    }
    if (rng.chance(5)) out += rng.chance(50) ? "," : ";";
    if (rng.chance(2)) out += " — “quoted” … «guillemets» ¿qué? ¡sí! ";
  }
  out += rng.chance(70) ? ". " : rng.chance(50) ? "?! " : "...\n";
}

}  // namespace

std::string make_test_text(const TestTextOptions& options) {
  Rng rng(options.seed);
  std::string out;
  out.reserve(options.min_bytes + 4096);
  while (out.size() < options.min_bytes) {
    const size_t kind = rng.below(100);
    if (kind < 45) {
      append_sentence(out, rng);
    } else if (kind < 57) {
      out += rng.pick(kCode);
    } else if (kind < 72) {
      append_whitespace(out, rng, options.disputed_whitespace);
    } else if (kind < 92) {
      append_script(out, rng);
      if (rng.chance(50)) out += ' ';
    } else {
      append_number(out, rng);
      out += rng.chance(50) ? " " : "\n";
    }
  }
  return out;
}

std::string make_random_bytes(size_t size, uint64_t seed) {
  Rng rng(seed);
  std::string out;
  static const std::array<const char*, 12> kInvalid = {
      "\x80", "\xBF\xBF", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
      "\xF5", "\xFF\xFE", "\xE2\x82", "\xF0\x9F\x98", "\xC3",         "\xFE\xFF\x00\x01"};
  while (out.size() < size) {
    const size_t kind = rng.below(10);
    if (kind < 4) {
      out += rng.pick(kInvalid);
    } else if (kind < 6) {
      for (size_t i = rng.below(8); i > 0; --i) out += static_cast<char>(rng.below(256));
    } else {
      std::string text = make_test_text({.min_bytes = 1, .seed = rng.next()});
      out += text.substr(0, 1 + rng.below(text.size()));
    }
  }
  out.resize(size);
  return out;
}

}  // namespace titan::data::testing
