// Reading raw training text: plain files (one document per file, or split at
// separator lines), fortune files (documents between "%" lines) and JSONL
// (one JSON object per line, the document in its "text" field).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

enum class CorpusFormat { text, fortune, jsonl };

// "text", "fortune", "jsonl"; "auto" picks jsonl for *.jsonl files, else text.
CorpusFormat parse_corpus_format(std::string_view name, const std::filesystem::path& file = {});
const char* corpus_format_name(CorpusFormat format);

struct CorpusOptions {
  std::string format = "auto";
  std::string separator = "";  // text format: a line equal to this splits documents (empty: one per file)
  std::string jsonl_field = "text";
};

// The files an input list names, in a fixed order: files as given, folders
// walked recursively in name order, skipping hidden files, fortune's *.dat
// indexes and links to files already listed. A missing input is an error.
std::vector<std::filesystem::path> list_corpus_files(const std::vector<std::string>& inputs);

// The non-empty documents of one file. Errors name the file (and line for JSONL).
std::vector<std::string> read_corpus_file(const std::filesystem::path& file, const CorpusOptions& options);

}  // namespace titan::data
