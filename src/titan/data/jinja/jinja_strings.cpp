// The string helpers behind the str methods and filters: Python's ASCII
// case changes, jinja's title, str.replace sized before it is built, and the
// case-blind ordering dictsort uses.
#include "titan/data/jinja/jinja_renderer.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data::jinja::detail {

// Python's str.upper()/lower() restricted to ASCII: chat templates apply them
// to roles and keywords; other letters pass through unchanged.
std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string capitalize(const std::string& s) {
  std::string out = ascii_lower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

// Jinja's title filter: each run after a space, '-', '(', '{', '[' or '<'
// starts upper case, the rest lower case.
std::string title(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool word_start = true;
  for (const char c : s) {
    const bool separator = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '-' ||
                           c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else {
      const bool lower = c >= 'a' && c <= 'z';
      const bool upper = c >= 'A' && c <= 'Z';
      if (word_start && lower) {
        out += static_cast<char>(c - 'a' + 'A');
      } else if (!word_start && upper) {
        out += static_cast<char>(c - 'A' + 'a');
      } else {
        out += c;
      }
      word_start = false;
    }
  }
  return out;
}

// Python's str.replace, including the empty `old` (insert between code
// points). The result's size is known before it is built, so a replacement
// that would exceed `max_size` bytes fails before allocating; `out` is charged.
void replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count,
             size_t max_size, TextBuffer& out) {
  size_t hits = 0;
  if (old.empty()) {
    hits = code_point_count(s) + 1;
  } else {
    for (size_t pos = s.find(old); pos != std::string::npos; pos = s.find(old, pos + old.size())) ++hits;
  }
  if (count >= 0) hits = std::min(hits, static_cast<size_t>(count));
  const size_t kept = s.size() - (old.empty() ? 0 : hits * old.size());
  if (!replacement.empty() && hits > (max_size - std::min(kept, max_size)) / replacement.size()) {
    fail_string_size(max_size);
  }
  if (kept > max_size) fail_string_size(max_size);
  out.reserve(kept + hits * replacement.size());
  const std::string_view text(s);
  size_t done = 0;
  if (old.empty()) {
    for (size_t i = 0; i < text.size();) {
      if (done < hits) {
        out.append(replacement);
        ++done;
      }
      const size_t n = code_point_length(text, i);
      out.append(text.substr(i, n));
      i += n;
    }
    if (done < hits) out.append(replacement);
    return;
  }
  size_t pos = 0;
  while (done < hits) {
    const size_t hit = text.find(old, pos);
    out.append(text.substr(pos, hit - pos));
    out.append(replacement);
    pos = hit + old.size();
    ++done;
  }
  out.append(text.substr(pos));
}

// a < b for strings, ignoring ASCII case, without lowering copies.
bool ascii_less_ignoring_case(const std::string& a, const std::string& b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [&](char x, char y) {
    return static_cast<unsigned char>(lower(x)) < static_cast<unsigned char>(lower(y));
  });
}

bool has_ascii_in_range(const std::string& s, char first, char last) {
  return std::any_of(s.begin(), s.end(), [&](char c) { return c >= first && c <= last; });
}

}  // namespace titan::data::jinja::detail
