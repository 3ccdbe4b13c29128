// Reading raw corpora: fortune files, separated text, JSONL (with line numbers
// in errors), folder walks, and the empty-corpus error.
#include <gtest/gtest.h>

#include "data/peer_support.h"
#include "titan/core/error.h"
#include "titan/data/corpus_reader.h"

namespace titan::data {
namespace corpus_reader_test {

TEST(CorpusReader, FortuneFormat) {
  testing::TempDir dir;
  testing::write_bytes(dir / "f", "First fortune.\n%\nSecond,\n  two lines.\n%\n%\n   \n%\nLast\n");
  const auto docs = read_corpus_file(dir / "f", {.format = "fortune"});
  EXPECT_EQ(docs, (std::vector<std::string>{"First fortune.\n", "Second,\n  two lines.\n", "Last\n"}));
}

TEST(CorpusReader, TextWithAndWithoutSeparator) {
  testing::TempDir dir;
  testing::write_bytes(dir / "t.txt", "one\n---\ntwo\r\n---\r\nthree");
  EXPECT_EQ(read_corpus_file(dir / "t.txt", {.format = "text"}).size(), 1u);
  EXPECT_EQ(read_corpus_file(dir / "t.txt", {.format = "text", .separator = "---"}),
            (std::vector<std::string>{"one\n", "two\r\n", "three"}));
}

TEST(CorpusReader, Jsonl) {
  testing::TempDir dir;
  testing::write_bytes(dir / "a.jsonl", "{\"text\": \"hello\", \"id\": 1}\n\n{\"text\": \"\\u00e9t\\u00e9 🙂\"}\n");
  EXPECT_EQ(read_corpus_file(dir / "a.jsonl", {}), (std::vector<std::string>{"hello", "été 🙂"}));
  auto expect_line_error = [&](const std::string& content, const std::string& fragment) {
    testing::write_bytes(dir / "b.jsonl", content);
    try {
      read_corpus_file(dir / "b.jsonl", {});
      ADD_FAILURE() << "expected an error for " << content;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_line_error("{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n", "b.jsonl:2: not valid JSON");
  expect_line_error("{\"text\": \"ok\"}\n\n{\"body\": \"x\"}\n", "b.jsonl:3: no \"text\" field");
  expect_line_error("{\"text\": 5}\n", "b.jsonl:1: \"text\" is a number");
  expect_line_error("[1]\n", "b.jsonl:1: expected a JSON object");
}

TEST(CorpusReader, FolderWalkSkipsIndexesAndLinks) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir / "corpus" / "sub");
  testing::write_bytes(dir / "corpus" / "b", "b");
  testing::write_bytes(dir / "corpus" / "a", "a");
  testing::write_bytes(dir / "corpus" / "a.dat", "index");
  testing::write_bytes(dir / "corpus" / ".hidden", "h");
  testing::write_bytes(dir / "corpus" / "sub" / "c", "c");
  std::filesystem::create_symlink("a", dir / "corpus" / "a.u8");
  const auto files = list_corpus_files({(dir / "corpus").string()});
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].filename(), "a");
  EXPECT_EQ(files[1].filename(), "b");
  EXPECT_EQ(files[2].filename(), "c");
  EXPECT_THROW(list_corpus_files({(dir / "nope").string()}), Error);
  EXPECT_THROW(parse_corpus_format("csv"), Error);
}

}  // namespace corpus_reader_test
}  // namespace titan::data
