#include "titan/data/tiktoken_ranks.h"

#include <charconv>
#include <unordered_set>

#include "titan/core/error.h"
#include "titan/data/base64.h"

namespace titan::data {
namespace {

// Ranks index a vector: refuse sparse ids that would make it huge.
constexpr uint64_t kMaxRank = (1u << 24) - 1;

uint64_t parse_rank(std::string_view field, std::string_view source, size_t line) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  TITAN_CHECK(error == std::errc() && end == field.data() + field.size() && !field.empty(),
              "{}:{}: rank '{}' is not a non-negative integer", source, line, field);
  TITAN_CHECK(value <= kMaxRank, "{}:{}: rank {} is too large (at most {})", source, line, value, kMaxRank);
  return value;
}

class RankTable {
 public:
  RankTable(std::string_view source) : source_(source) {}

  void add(uint64_t rank, std::string token, size_t line) {
    TITAN_CHECK(!token.empty(), "{}:{}: empty token", source_, line);
    if (rank >= tokens_.size()) tokens_.resize(rank + 1);
    TITAN_CHECK(tokens_[rank].empty(), "{}:{}: rank {} appears twice", source_, line, rank);
    TITAN_CHECK(seen_.insert(token).second, "{}:{}: token for rank {} appears twice", source_, line, rank);
    tokens_[rank] = std::move(token);
  }

  std::vector<std::string> finish() {
    TITAN_CHECK(!seen_.empty(), "{}: no ranks found (empty file?)", source_);
    TITAN_CHECK(tokens_.size() <= 2 * seen_.size() + 1024, "{}: ranks are too sparse ({} tokens, largest rank {})",
                source_, seen_.size(), tokens_.size() - 1);
    return std::move(tokens_);
  }

 private:
  std::string_view source_;
  std::vector<std::string> tokens_;
  std::unordered_set<std::string> seen_;
};

template <typename Fn>
void for_each_line(std::string_view content, Fn&& fn) {
  size_t line = 0;
  while (!content.empty()) {
    ++line;
    const size_t newline = content.find('\n');
    std::string_view text = content.substr(0, newline);
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    fn(text, line);
    if (newline == std::string_view::npos) break;
    content.remove_prefix(newline + 1);
  }
}

}  // namespace

std::vector<std::string> parse_tiktoken_ranks(std::string_view content, std::string_view source) {
  RankTable table(source);
  std::string token;
  for_each_line(content, [&](std::string_view text, size_t line) {
    if (text.empty()) return;  // tiktoken skips blank lines too
    const size_t space = text.find(' ');
    TITAN_CHECK(space != std::string_view::npos && text.find(' ', space + 1) == std::string_view::npos,
                "{}:{}: expected '<base64 token> <rank>'", source, line);
    token.clear();
    TITAN_CHECK(base64_decode(text.substr(0, space), token), "{}:{}: token '{}' is not valid base64", source, line,
                text.substr(0, space));
    table.add(parse_rank(text.substr(space + 1), source, line), token, line);
  });
  return table.finish();
}

std::vector<std::string> parse_tiktoken_packed_ranks(std::string_view content, std::string_view source) {
  RankTable table(source);
  std::string token;
  for_each_line(content, [&](std::string_view text, size_t line) {
    if (text.empty()) return;
    // "<marker> <first rank> <token> <token> ...": ranks count up from the first.
    std::vector<std::string_view> fields;
    size_t start = 0;
    while (start <= text.size()) {
      const size_t space = text.find(' ', start);
      fields.push_back(text.substr(start, space == std::string_view::npos ? std::string_view::npos : space - start));
      if (space == std::string_view::npos) break;
      start = space + 1;
    }
    TITAN_CHECK(fields.size() >= 2, "{}:{}: expected '<marker> <first rank> <base64 tokens...>'", source, line);
    uint64_t rank = parse_rank(fields[1], source, line);
    for (size_t i = 2; i < fields.size(); ++i, ++rank) {
      TITAN_CHECK(rank <= kMaxRank, "{}:{}: rank {} is too large", source, line, rank);
      token.clear();
      TITAN_CHECK(base64_decode(fields[i], token), "{}:{}: token {} ('{}') is not valid base64", source, line, i - 1,
                  fields[i].substr(0, 40));
      table.add(rank, token, line);
    }
  });
  return table.finish();
}

}  // namespace titan::data
