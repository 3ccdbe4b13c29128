// The pre-tokenizer's split regex (tiktoken's pat_str, a tokenizer.json Split
// pattern): PCRE2 with UTF and Unicode properties, JIT-compiled. It cuts a
// well-formed UTF-8 segment into pieces that BPE then encodes one by one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_match_context_8;
struct pcre2_real_jit_stack_8;

namespace titan::data {

class SplitPattern {
 public:
  // Per-thread matching state (PCRE2 match data and JIT stack).
  class Scratch {
   public:
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;

   private:
    friend class SplitPattern;
    Scratch() = default;
    pcre2_real_match_data_8* match_data = nullptr;
    pcre2_real_match_context_8* context = nullptr;
    pcre2_real_jit_stack_8* jit_stack = nullptr;
  };

  // Compiles `pattern`; a syntax error is a titan::Error naming `source` (the
  // file it came from) and the offset. `literal` matches the text as is.
  SplitPattern(std::string pattern, std::string_view source, bool literal = false);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  const std::string& pattern() const { return pattern_; }
  bool literal() const { return literal_; }
  std::unique_ptr<Scratch> make_scratch() const;

  // Splits subject[begin, ...) into pieces and appends each piece's end offset
  // (into subject) to `ends`, stopping after the first piece that reaches
  // `stop` or the end. Matches are pieces, and so is each run of text between
  // matches (Hugging Face's "Isolated" behaviour; tiktoken's patterns match
  // everything, so there are none there). `subject` must be valid UTF-8: the
  // whole of it is what lookaheads see. Returns where the last piece ended.
  size_t split(std::string_view subject, size_t begin, size_t stop, std::vector<size_t>& ends, Scratch& scratch) const;

  // The non-empty matches in valid UTF-8 `subject`, left to right, as
  // [begin, end) offsets (for Split behaviours other than Isolated, and Replace).
  void find_matches(std::string_view subject, std::vector<std::pair<size_t, size_t>>& matches, Scratch& scratch) const;

 private:
  std::string pattern_;
  bool literal_ = false;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// Scratches for several patterns, each made on first use: one per thread,
// kept across calls (making a scratch allocates PCRE2's JIT stack).
class SplitScratchCache {
 public:
  SplitPattern::Scratch& of(const SplitPattern& pattern);

 private:
  std::vector<std::pair<const SplitPattern*, std::unique_ptr<SplitPattern::Scratch>>> scratches_;
};

}  // namespace titan::data
