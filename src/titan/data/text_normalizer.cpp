#include "titan/data/text_normalizer.h"

#include <unicode/ucasemap.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "titan/core/error.h"

namespace titan::data {
namespace {

std::u16string to_utf16(std::string_view text) {
  std::u16string out(text.size() + 1, u'\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8(out.data(), static_cast<int32_t>(out.size()), &length, text.data(), static_cast<int32_t>(text.size()),
                &status);
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU cannot read the text as UTF-8: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::string to_utf8(const std::u16string& text) {
  std::string out(text.size() * 3 + 1, '\0');
  int32_t length = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &length, text.data(), static_cast<int32_t>(text.size()),
              &status);
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU cannot write UTF-8: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

std::string unicode_form(std::string_view text, NormalizerStep::Kind kind) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* form = kind == NormalizerStep::kNfc    ? unorm2_getNFCInstance(&status)
                             : kind == NormalizerStep::kNfd  ? unorm2_getNFDInstance(&status)
                             : kind == NormalizerStep::kNfkc ? unorm2_getNFKCInstance(&status)
                                                             : unorm2_getNFKDInstance(&status);
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU has no normalization data: {}", u_errorName(status));
  const std::u16string source = to_utf16(text);
  std::u16string out(source.size() * 4 + 16, u'\0');  // NFKD may expand a character up to 18 times
  int32_t length = unorm2_normalize(form, source.data(), static_cast<int32_t>(source.size()), out.data(),
                                    static_cast<int32_t>(out.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    out.assign(static_cast<size_t>(length), u'\0');
    length = unorm2_normalize(form, source.data(), static_cast<int32_t>(source.size()), out.data(),
                              static_cast<int32_t>(out.size()), &status);
  }
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU normalization failed: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return to_utf8(out);
}

// Full Unicode lowercasing, character by character as Hugging Face does it
// (Rust's char::to_lowercase: İ becomes "i̇", and Σ always σ). ICU's root
// locale applies one context rule, final sigma, which is taken out of its
// hands by lowercasing Σ first.
std::string lowercase(std::string_view input) {
  std::string text;
  text.reserve(input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    if (input.compare(i, 2, "\u03A3") == 0) {
      text += "\u03C3";
      ++i;
    } else {
      text += input[i];
    }
  }
  UErrorCode status = U_ZERO_ERROR;
  UCaseMap* map = ucasemap_open("", 0, &status);
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU case map: {}", u_errorName(status));
  std::string out(text.size() * 3 + 4, '\0');
  int32_t length = ucasemap_utf8ToLower(map, out.data(), static_cast<int32_t>(out.size()), text.data(),
                                        static_cast<int32_t>(text.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    out.assign(static_cast<size_t>(length), '\0');
    length = ucasemap_utf8ToLower(map, out.data(), static_cast<int32_t>(out.size()), text.data(),
                                  static_cast<int32_t>(text.size()), &status);
  }
  ucasemap_close(map);
  TITAN_CHECK(U_SUCCESS(status), "normalizer: ICU lowercasing failed: {}", u_errorName(status));
  out.resize(static_cast<size_t>(length));
  return out;
}

// Rust's char::is_whitespace (Unicode White_Space), for Strip.
bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t decode_at(std::string_view text, size_t i, size_t& length) {
  const auto b = static_cast<uint8_t>(text[i]);
  length = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  uint32_t cp = length == 1 ? b : b & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
  return cp;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    size_t length = 0;
    while (begin < end && is_white_space(decode_at(text, begin, length))) begin += length;
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
      size_t length = 0;
      if (!is_white_space(decode_at(text, start, length))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string replace_all(std::string_view text, const SplitPattern& pattern, const std::string& content,
                        SplitScratchCache& scratch) {
  std::vector<std::pair<size_t, size_t>> matches;
  pattern.find_matches(text, matches, scratch.of(pattern));
  std::string out;
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text, done, begin - done);
    out += content;
    done = end;
  }
  out.append(text, done, text.size() - done);
  return out;
}

}  // namespace

std::string TextNormalizer::normalize(std::string_view text, SplitScratchCache& scratch) const {
  std::string current(text);
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::kPrecompiled: {
        std::string out;
        out.reserve(current.size());
        step.charsmap->normalize(current, out, scratch);
        current = std::move(out);
        break;
      }
      case NormalizerStep::kReplace:
        current = replace_all(current, *step.pattern, step.content, scratch);
        break;
      case NormalizerStep::kStrip:
        current = strip(current, step.strip_left, step.strip_right);
        break;
      case NormalizerStep::kLowercase:
        current = lowercase(current);
        break;
      case NormalizerStep::kNfc:
      case NormalizerStep::kNfd:
      case NormalizerStep::kNfkc:
      case NormalizerStep::kNfkd:
        current = unicode_form(current, step.kind);
        break;
      case NormalizerStep::kPrepend:
        if (!current.empty()) current = step.content + current;  // Hugging Face prepends to non-empty text only
        break;
    }
  }
  return current;
}

}  // namespace titan::data
