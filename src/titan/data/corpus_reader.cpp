#include "titan/data/corpus_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "titan/core/error.h"
#include "titan/data/file_io.h"
#include "titan/data/jsonl_lines.h"
#include "titan/data/token_corpus.h"
#include "titan/data/token_shard.h"

namespace titan::data {
namespace {

bool blank(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// Documents separated by lines equal to `separator` (the line's "\n" and a
// trailing "\r" are not part of either document).
std::vector<std::string> split_at_lines(std::string_view content, std::string_view separator) {
  std::vector<std::string> documents;
  std::string current;
  size_t pos = 0;
  while (pos < content.size()) {
    const size_t newline = content.find('\n', pos);
    const size_t end = newline == std::string_view::npos ? content.size() : newline;
    std::string_view line = content.substr(pos, end - pos);
    std::string_view bare = line;
    if (!bare.empty() && bare.back() == '\r') bare.remove_suffix(1);
    if (bare == separator) {
      if (!blank(current)) documents.push_back(std::move(current));
      current.clear();
    } else {
      current.append(line);
      if (newline != std::string_view::npos) current += '\n';
    }
    pos = end + 1;
  }
  if (!blank(current)) documents.push_back(std::move(current));
  return documents;
}

// Token shards and prepared folders are titan's own output: read as text they
// would become a "dataset" of their bytes (and, written over themselves, destroy it).
bool starts_like_token_shard(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char head[sizeof(ShardHeader::kMagic)] = {};
  return in.read(head, sizeof(head)) && std::memcmp(head, ShardHeader::kMagic, sizeof(head)) == 0;
}

void refuse_prepared_input(const std::filesystem::path& path, const std::string& input) {
  std::error_code error;
  TITAN_CHECK(!std::filesystem::exists(path / ShardManifest::kFileName, error),
              "corpus input {}: {} is a prepared dataset (token shards and {} from `titan data prepare`), not text; "
              "train on it directly (training.dataset_path) or give the raw text it was made from",
              input, path.string(), ShardManifest::kFileName);
}

}  // namespace

CorpusFormat parse_corpus_format(std::string_view name, const std::filesystem::path& file) {
  if (name == "text") return CorpusFormat::text;
  if (name == "fortune") return CorpusFormat::fortune;
  if (name == "jsonl") return CorpusFormat::jsonl;
  if (name == "auto" || name.empty()) return file.extension() == ".jsonl" ? CorpusFormat::jsonl : CorpusFormat::text;
  fail("unknown corpus format '{}' (text, fortune, jsonl or auto)", name);
}

const char* corpus_format_name(CorpusFormat format) {
  switch (format) {
    case CorpusFormat::text:
      return "text";
    case CorpusFormat::fortune:
      return "fortune";
    case CorpusFormat::jsonl:
      return "jsonl";
  }
  return "?";
}

std::vector<std::filesystem::path> list_corpus_files(const std::vector<std::string>& inputs) {
  namespace fs = std::filesystem;
  TITAN_CHECK(!inputs.empty(), "no input files given");
  std::vector<fs::path> files;
  std::set<fs::path> seen;  // canonical paths: a link to a listed file adds nothing
  auto add = [&](const fs::path& file) {
    std::error_code error;
    const fs::path canonical = fs::canonical(file, error);
    if (seen.insert(error ? file : canonical).second) files.push_back(file);
  };
  for (const std::string& input : inputs) {
    std::error_code error;
    const auto status = fs::status(input, error);
    TITAN_CHECK(fs::exists(status), "corpus input {}: no such file or folder", input);
    if (!fs::is_directory(status)) {
      add(input);
      continue;
    }
    refuse_prepared_input(input, input);
    std::vector<fs::path> found;
    for (const auto& entry : fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory()) refuse_prepared_input(entry.path(), input);
      if (name.empty() || name[0] == '.' || !entry.is_regular_file()) continue;
      if (entry.path().extension() == ".dat") continue;  // strfile's binary index next to each fortune file
      found.push_back(entry.path());
    }
    // Real files before links, so a link never displaces the file it points to.
    std::sort(found.begin(), found.end(), [](const fs::path& a, const fs::path& b) {
      return fs::is_symlink(a) != fs::is_symlink(b) ? !fs::is_symlink(a) : a < b;
    });
    for (const auto& file : found) add(file);
  }
  for (const fs::path& file : files) {
    TITAN_CHECK(!starts_like_token_shard(file),
                "corpus input {} is a token shard (`titan data prepare` output), not text: train on its prepared "
                "folder directly (training.dataset_path) or give the raw text it was made from",
                file.string());
  }
  return files;
}

std::vector<std::string> read_corpus_file(const std::filesystem::path& file, const CorpusOptions& options) {
  const std::string content = read_file(file, "corpus");
  const CorpusFormat format = parse_corpus_format(options.format, file);
  // Text has no NUL bytes; a file with one is binary (a model, an archive, an index) read by mistake.
  const size_t nul = content.find('\0');
  TITAN_CHECK(nul == std::string::npos,
              "corpus file {}: byte {} is NUL: this is a binary file, not {} text (compressed or binary inputs are "
              "not read as text)",
              file.string(), nul, corpus_format_name(format));
  if (format == CorpusFormat::fortune) return split_at_lines(content, "%");
  if (format == CorpusFormat::text) {
    if (!options.separator.empty()) return split_at_lines(content, options.separator);
    if (blank(content)) return {};
    return {content};
  }
  // JSONL: one object per line; blank lines are skipped.
  std::vector<std::string> documents;
  for_each_jsonl_line(content, [&](std::string_view text, size_t line) {
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: not valid JSON: {}", file.string(), line, e.what());
    }
    TITAN_CHECK(record.is_object(), "{}:{}: expected a JSON object, found {}", file.string(), line, record.type_name());
    const auto field = record.find(options.jsonl_field);
    TITAN_CHECK(field != record.end(), "{}:{}: no \"{}\" field", file.string(), line, options.jsonl_field);
    TITAN_CHECK(field->is_string(), "{}:{}: \"{}\" is a {}, expected a string", file.string(), line,
                options.jsonl_field, field->type_name());
    std::string document = field->get<std::string>();
    if (!document.empty()) documents.push_back(std::move(document));
  });
  return documents;
}

}  // namespace titan::data
