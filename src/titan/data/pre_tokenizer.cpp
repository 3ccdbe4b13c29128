#include "titan/data/pre_tokenizer.h"

#include <algorithm>

#include "titan/core/error.h"

namespace titan::data {
namespace {

struct Span {
  size_t begin, end;
  bool match;
};

// Hugging Face's NormalizedString::split: the text as alternating spans, then
// each behaviour's merging rule, then the empty pieces dropped.
void split_piece(const PreToken& piece, const SplitPattern& pattern, PreTokenizerStep::Behavior behavior, bool invert,
                 std::vector<PreToken>& out, SplitScratchCache& scratch) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.find_matches(piece.text, matches, scratch.of(pattern));
  std::vector<Span> spans;
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > done) spans.push_back({done, begin, invert});
    spans.push_back({begin, end, !invert});
    done = end;
  }
  if (done < piece.text.size() || spans.empty()) spans.push_back({done, piece.text.size(), invert});

  std::vector<Span> kept;  // match = false here means "kept"
  using B = PreTokenizerStep::Behavior;
  bool previous_match = false;
  switch (behavior) {
    case B::kIsolated:
      for (const Span& span : spans) kept.push_back({span.begin, span.end, false});
      break;
    case B::kRemoved:
      for (const Span& span : spans) {
        if (!span.match) kept.push_back(span);
      }
      break;
    case B::kContiguous:
      for (const Span& span : spans) {
        if (span.match == previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.begin, span.end, false});
        }
        previous_match = span.match;
      }
      break;
    case B::kMergedWithPrevious:
      for (const Span& span : spans) {
        if (span.match && !previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.begin, span.end, false});
        }
        previous_match = span.match;
      }
      break;
    case B::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& span = spans[i];
        if (span.match && !previous_match && !kept.empty()) {
          kept.back().begin = span.begin;
        } else {
          kept.push_back({span.begin, span.end, false});
        }
        previous_match = span.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& span : kept) {
    if (span.end > span.begin) {
      out.push_back({piece.text.substr(span.begin, span.end - span.begin), piece.offset + span.begin});
    }
  }
}

std::string replace_spaces(std::string_view text, const std::string& replacement) {
  std::string out;
  out.reserve(text.size() + 8);
  for (const char c : text) {
    if (c == ' ') {
      out += replacement;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void pre_tokenize(const std::vector<PreTokenizerStep>& steps, std::string_view text, bool at_input_start,
                  std::vector<PreToken>& pieces, SplitScratchCache& scratch) {
  pieces.clear();
  if (!text.empty()) pieces.push_back({std::string(text), 0});
  std::vector<PreToken> next;
  for (const PreTokenizerStep& step : steps) {
    next.clear();
    for (PreToken& piece : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::kSplit:
          split_piece(piece, *step.pattern, step.behavior, step.invert, next, scratch);
          break;
        case PreTokenizerStep::kMetaspace: {
          PreToken rewritten{replace_spaces(piece.text, step.replacement), piece.offset};
          const bool starts_with = rewritten.text.compare(0, step.replacement.size(), step.replacement) == 0;
          const bool prepend = step.prepend == PreTokenizerStep::kAlways ||
                               (step.prepend == PreTokenizerStep::kFirst && at_input_start && piece.offset == 0);
          if (prepend && !starts_with) rewritten.text.insert(0, step.replacement);
          if (step.split) {
            // Each replacement character begins a piece (MergedWithNext on every single one).
            split_piece(rewritten, *step.pattern, PreTokenizerStep::kMergedWithNext, false, next, scratch);
          } else if (!rewritten.text.empty()) {
            next.push_back(std::move(rewritten));
          }
          break;
        }
        case PreTokenizerStep::kByteLevel: {
          PreToken prefixed = piece;
          if (step.add_prefix_space && prefixed.text[0] != ' ') prefixed.text.insert(0, " ");
          if (step.pattern) {
            split_piece(prefixed, *step.pattern, PreTokenizerStep::kIsolated, false, next, scratch);
          } else {
            next.push_back(std::move(prefixed));
          }
          break;
        }
      }
    }
    pieces.swap(next);
  }
}

}  // namespace titan::data
