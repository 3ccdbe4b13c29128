#define PCRE2_CODE_UNIT_WIDTH 8
#include "titan/data/split_pattern.h"

#include <pcre2.h>

#include "titan/core/error.h"

namespace titan::data {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Byte length of the UTF-8 character starting at s[i] (the subject is valid).
size_t char_length(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  const size_t length = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(length, s.size() - i);
}

// Unicode's White_Space property, which \s means in Rust's regex (tiktoken)
// and Oniguruma (Hugging Face). PCRE2's \s with UCP also takes U+180E, which
// Unicode dropped from White_Space in 6.3, so \s and \S are spelled out.
constexpr const char* kWhiteSpace =
    R"(\t-\r\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000})";

std::string spell_out_whitespace(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t i = 0;
  const size_t n = pattern.size();
  while (i < n) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      const char d = pattern[i + 1];
      if (d == 'Q') {  // \Q...\E: quoted text, copied as is
        const size_t end = pattern.find("\\E", i + 2);
        const size_t stop = end == std::string::npos ? n : end + 2;
        out.append(pattern, i, stop - i);
        i = stop;
      } else if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
        i += 2;
      } else if (d == 'S' && !in_class) {  // inside a class \S keeps PCRE2's meaning
        out += "[^" + std::string(kWhiteSpace) + "]";
        i += 2;
      } else {
        out.append(pattern, i, 2);
        i += 2;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < n && pattern[i] == '^') out += pattern[i++];
      if (i < n && pattern[i] == ']') out += pattern[i++];  // a leading ] is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') {  // [:alpha:]
      const size_t end = pattern.find(":]", i + 2);
      const size_t stop = end == std::string::npos ? n : end + 2;
      out.append(pattern, i, stop - i);
      i = stop;
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

SplitPattern::Scratch::~Scratch() {
  pcre2_match_data_free(match_data);
  pcre2_match_context_free(context);
  pcre2_jit_stack_free(jit_stack);
}

SplitPattern::SplitPattern(std::string pattern, std::string_view source, bool literal)
    : pattern_(std::move(pattern)), literal_(literal) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP makes \s, \d, \w and [[:classes:]] Unicode-aware, as in the Rust regex
  // engine tiktoken uses; the caller guarantees valid UTF-8 and checks it once.
  // PCRE2 refuses UCP beside LITERAL (a literal has no classes for it to change).
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  const std::string compiled = literal ? pattern_ : spell_out_whitespace(pattern_);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error_code,
                        &error_offset, nullptr);
  if (code_ == nullptr && !literal) {
    // Report the offset in the pattern as written, not as rewritten.
    pcre2_code_free(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options, &error_code,
                                  &error_offset, nullptr));
  }
  if (code_ == nullptr) {
    fail("{}: split pattern does not compile at offset {}: {} (pattern: {})", source, error_offset,
         pcre2_message(error_code), pattern_);
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

SplitPattern::~SplitPattern() { pcre2_code_free(code_); }

std::unique_ptr<SplitPattern::Scratch> SplitPattern::make_scratch() const {
  std::unique_ptr<Scratch> scratch(new Scratch());
  scratch->match_data = pcre2_match_data_create_from_pattern(code_, nullptr);
  scratch->context = pcre2_match_context_create(nullptr);
  TITAN_CHECK(scratch->match_data != nullptr && scratch->context != nullptr, "split pattern: out of memory");
  // A run of tens of megabytes of one character class (spaces, "!!!!")
  // backtracks once per character: lift PCRE2's default limit of 10 million
  // steps, which would otherwise refuse such input.
  pcre2_set_match_limit(scratch->context, 0xFFFFFFFFu);
  if (jit_) {
    scratch->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(scratch->context, nullptr, scratch->jit_stack);
  }
  return scratch;
}

size_t SplitPattern::split(std::string_view subject, size_t begin, size_t stop, std::vector<size_t>& ends,
                           Scratch& scratch) const {
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t end = subject.size();
  size_t gap_start = begin;  // start of text not yet covered by a piece
  size_t search = begin;
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
  while (gap_start < end && gap_start < stop) {
    const int rc = jit_
                       ? pcre2_jit_match(code_, text, end, search, 0, scratch.match_data, scratch.context)
                       : pcre2_match(code_, text, end, search, PCRE2_NO_UTF_CHECK, scratch.match_data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) {
      ends.push_back(end);
      return end;
    }
    if (rc < 0) fail("split pattern: matching failed: {} (pattern: {})", pcre2_message(rc), pattern_);
    const size_t match_start = ovector[0], match_end = ovector[1];
    if (match_start == match_end) {
      // An empty match covers nothing: step one character and search again,
      // leaving the skipped character in the gap.
      if (match_start >= end) {
        ends.push_back(end);
        return end;
      }
      search = match_start + char_length(subject, match_start);
      continue;
    }
    if (match_start > gap_start) {
      ends.push_back(match_start);
      if (match_start >= stop) return match_start;
    }
    ends.push_back(match_end);
    gap_start = search = match_end;
  }
  return gap_start;
}

void SplitPattern::find_matches(std::string_view subject, std::vector<std::pair<size_t, size_t>>& matches,
                                Scratch& scratch) const {
  matches.clear();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t end = subject.size();
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
  for (size_t search = 0; search < end;) {
    const int rc = jit_
                       ? pcre2_jit_match(code_, text, end, search, 0, scratch.match_data, scratch.context)
                       : pcre2_match(code_, text, end, search, PCRE2_NO_UTF_CHECK, scratch.match_data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("split pattern: matching failed: {} (pattern: {})", pcre2_message(rc), pattern_);
    const size_t match_start = ovector[0], match_end = ovector[1];
    if (match_start == match_end) {  // an empty match cuts nothing: look again one character on
      if (match_start >= end) return;
      search = match_start + char_length(subject, match_start);
      continue;
    }
    matches.emplace_back(match_start, match_end);
    search = match_end;
  }
}

SplitPattern::Scratch& SplitScratchCache::of(const SplitPattern& pattern) {
  for (auto& [owner, scratch] : scratches_) {
    if (owner == &pattern) return *scratch;
  }
  scratches_.emplace_back(&pattern, pattern.make_scratch());
  return *scratches_.back().second;
}

}  // namespace titan::data
