#include "titan/data/precompiled_charsmap.h"

#include <cstring>

#include "titan/core/error.h"
#include "titan/data/split_pattern.h"
#include "titan/data/utf8.h"

namespace titan::data {
namespace {

// Fields of a Darts-clone unit (darts.h: has_leaf, value, label, offset).
bool unit_has_leaf(uint32_t unit) { return ((unit >> 8) & 1) != 0; }
uint32_t unit_value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t unit_label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t unit_offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, std::string source)
    : source_(std::move(source)), blob_(blob) {
  TITAN_CHECK(blob_.size() >= 4, "{}: precompiled_charsmap of {} bytes has no trie size", source_, blob_.size());
  uint32_t trie_bytes = 0;
  std::memcpy(&trie_bytes, blob_.data(), 4);  // little-endian, as x86 is
  TITAN_CHECK(trie_bytes % 4 == 0 && trie_bytes >= 4 && trie_bytes <= blob_.size() - 4,
              "{}: precompiled_charsmap's trie size {} does not fit its {} bytes", source_, trie_bytes, blob_.size());
  units_.resize(trie_bytes / 4);
  std::memcpy(units_.data(), blob_.data() + 4, trie_bytes);
  replacements_ = std::string_view(blob_).substr(4 + trie_bytes);
  TITAN_CHECK(valid_utf8_prefix(replacements_) == replacements_.size(),
              "{}: precompiled_charsmap's replacement strings are not valid UTF-8", source_);
  // Extended grapheme clusters: PCRE2's \X implements Unicode's segmentation rules.
  graphemes_ = std::make_unique<SplitPattern>(R"(\X)", source_);
}

PrecompiledCharsmap::~PrecompiledCharsmap() = default;
PrecompiledCharsmap::PrecompiledCharsmap(PrecompiledCharsmap&&) noexcept = default;
PrecompiledCharsmap& PrecompiledCharsmap::operator=(PrecompiledCharsmap&&) noexcept = default;

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  // Darts' commonPrefixSearch, stopping at the first hit. Every index is
  // checked: the units come from a file.
  auto unit_at = [&](size_t pos) {
    TITAN_CHECK(pos < units_.size(), "{}: precompiled_charsmap's trie is corrupt (unit {} of {})", source_, pos,
                units_.size());
    return units_[pos];
  };
  size_t pos = unit_offset(unit_at(0));
  for (const char c : chunk) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte == 0) break;  // keys are NUL-terminated
    pos ^= byte;
    const uint32_t unit = unit_at(pos);
    if (unit_label(unit) != byte) return std::nullopt;
    pos ^= unit_offset(unit);
    if (unit_has_leaf(unit)) {
      const size_t index = unit_value(unit_at(pos));
      TITAN_CHECK(index < replacements_.size(), "{}: precompiled_charsmap points at replacement {} of {} bytes",
                  source_, index, replacements_.size());
      const std::string_view rest = replacements_.substr(index);
      const std::string_view value = rest.substr(0, std::min(rest.find('\0'), rest.size()));
      // Hugging Face slices a Rust string here: an index inside a character is an error there too.
      TITAN_CHECK((static_cast<uint8_t>(rest[0]) & 0xC0) != 0x80,
                  "{}: precompiled_charsmap points inside a character (replacement offset {})", source_, index);
      return value;
    }
  }
  return std::nullopt;
}

void PrecompiledCharsmap::normalize(std::string_view text, std::string& out, SplitScratchCache& scratch) const {
  std::vector<size_t> ends;
  graphemes_->split(text, 0, text.size(), ends, scratch.of(*graphemes_));
  size_t start = 0;
  for (const size_t end : ends) {
    const std::string_view grapheme = text.substr(start, end - start);
    start = end;
    if (grapheme.size() < 6) {
      if (const auto replaced = transform(grapheme)) {
        out += *replaced;
        continue;
      }
    }
    for (size_t i = 0; i < grapheme.size();) {
      const auto lead = static_cast<uint8_t>(grapheme[i]);
      const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;  // the text is valid UTF-8
      const std::string_view character = grapheme.substr(i, length);
      if (const auto replaced = transform(character)) {
        out += *replaced;
      } else {
        out += character;
      }
      i += length;
    }
  }
}

}  // namespace titan::data
