// The `titan tokenizer` and `titan data` commands end to end: encode/decode
// round trips, training, preparing shards the loader reads (including the
// embedded fortunes default), and bad input giving a clear error naming the
// file or token with a non-zero exit.
#include <gtest/gtest.h>

#include "data/peer_support.h"
#include "data/test_text.h"
#include "titan/data/data_loader.h"
#include "titan/data/data_prepare.h"
#include "titan/data/token_corpus.h"

namespace titan::data {
namespace cli_test {

using testing::run_titan;
using testing::shell_quote;

void expect_failure(const testing::CommandResult& result, std::initializer_list<std::string> fragments) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  for (const auto& fragment : fragments) {
    EXPECT_NE(result.output.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << result.output;
  }
}

TEST(Cli, EncodeDecodeRoundTrip) {
  testing::TempDir dir;
  const std::string text = testing::make_test_text({.min_bytes = 20000, .seed = 61}) + "\xFF\xFE invalid bytes";
  testing::write_bytes(dir / "in.txt", text);
  for (const char* tokenizer : {"cl100k_base", "llama3"}) {
    const auto encoded =
        run_titan(std::string("tokenizer encode --tokenizer ") + tokenizer + " --input " +
                  shell_quote((dir / "in.txt").string()) + " > " + shell_quote((dir / "ids").string()));
    ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
    const auto decoded = run_titan(std::string("tokenizer decode --tokenizer ") + tokenizer + " < " +
                                   shell_quote((dir / "ids").string()) + " > " + shell_quote((dir / "out").string()));
    ASSERT_EQ(decoded.exit_code, 0) << decoded.output;
    EXPECT_EQ(testing::read_bytes(dir / "out"), text) << tokenizer;
  }
  const auto hello = testing::run_command("printf 'Hello world\\n' | " + shell_quote(TITAN_CLI_PATH) +
                                          " tokenizer encode --tokenizer cl100k_base --eos");
  EXPECT_EQ(hello.output, "9906 1917 198 100257\n");
}

TEST(Cli, TrainPrepareAndLoad) {
  testing::TempDir dir;
  std::string fortunes;
  for (int i = 0; i < 300; ++i) {
    fortunes += testing::make_test_text({.min_bytes = 200, .seed = static_cast<uint64_t>(100 + i)}) + "\n%\n";
  }
  testing::write_bytes(dir / "fortunes", fortunes);
  const auto trained =
      run_titan("tokenizer train --input " + shell_quote((dir / "fortunes").string()) +
                " --format fortune --vocab-size 600 --output " + shell_quote((dir / "tok.json").string()));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  // 600 ids: 256 bytes, 5 default special tokens, the rest merges.
  EXPECT_NE(trained.output.find("339 merges"), std::string::npos) << trained.output;

  const auto prepared = run_titan("data prepare --input " + shell_quote((dir / "fortunes").string()) +
                                  " --format fortune --tokenizer " + shell_quote((dir / "tok.json").string()) +
                                  " --shard-tokens 5000 --output " + shell_quote((dir / "set").string()));
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const ShardManifest manifest = read_shard_manifest(dir / "set" / "manifest.json");
  EXPECT_EQ(manifest.documents, 300u);
  EXPECT_GT(manifest.shards.size(), 2u);
  EXPECT_EQ(manifest.vocab_size, 600u);
  EXPECT_EQ(manifest.bos, 595u);  // the first special token, after the merges
  EXPECT_TRUE(std::filesystem::exists(dir / "set" / "tok.json"));

  DataLoaderConfig config;
  config.paths = {(dir / "set").string()};
  config.seq_len = 64;
  config.local_batch = 2;
  DataLoader loader(config);
  const auto ids = loader.next_batch().input_ids.to_ints();
  for (int64_t id : ids) EXPECT_LT(id, 600);
}

// The embedded default: the fortunes corpus from Debian's package, a tokenizer
// trained on it and shards, without network access.
TEST(Cli, DefaultCorpusPreparesOffline) {
  testing::TempDir dir;
  PrepareOptions options;
  options.train_vocab_size = 1024;
  options.output = (dir / "fortunes").string();
  const PrepareResult result = prepare_dataset(options);
  EXPECT_GT(result.manifest.documents, 10000u);
  EXPECT_EQ(result.manifest.vocab_size, 1024u);
  EXPECT_TRUE(std::filesystem::exists(dir / "fortunes" / "tokenizer.json"));
  const TokenCorpus corpus({(dir / "fortunes").string()}, {});
  EXPECT_EQ(corpus.num_documents(), result.manifest.documents);
}

TEST(Cli, BadInputIsAClearError) {
  testing::TempDir dir;
  expect_failure(
      run_titan("tokenizer encode --tokenizer cl100k_base --input " + shell_quote((dir / "nope.txt").string())),
      {"titan: error:", "nope.txt", "no such file"});
  testing::write_bytes(dir / "broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [");
  expect_failure(
      run_titan("tokenizer encode --tokenizer " + shell_quote((dir / "broken.json").string()) + " < /dev/null"),
      {"broken.json", "not valid JSON"});
  expect_failure(run_titan("tokenizer info --tokenizer no_such_encoding"), {"no_such_encoding", "built-in"});
  testing::write_bytes(dir / "corpus.txt", "some text for the corpus\n");
  expect_failure(run_titan("data prepare --input " + shell_quote((dir / "corpus.txt").string()) +
                           " --tokenizer llama3 --eos-token '<|nope|>' --output " + shell_quote((dir / "o").string())),
                 {"unknown special token '<|nope|>'", "llama3"});
  testing::write_bytes(dir / "empty.txt", "  \n\n");
  expect_failure(run_titan("tokenizer train --input " + shell_quote((dir / "empty.txt").string()) +
                           " --vocab-size 300 --output " + shell_quote((dir / "t.json").string())),
                 {"empty.txt", "no documents"});
  expect_failure(run_titan("data prepare --input " + shell_quote((dir / "empty.txt").string()) +
                           " --train-tokenizer 300 --output " + shell_quote((dir / "o2").string())),
                 {"empty.txt", "no documents"});
  testing::write_bytes(dir / "bad.jsonl", "{\"text\": \"a\"}\nnot json\n");
  expect_failure(run_titan("data prepare --input " + shell_quote((dir / "bad.jsonl").string()) +
                           " --tokenizer cl100k_base --output " + shell_quote((dir / "o3").string())),
                 {"bad.jsonl:2", "not valid JSON"});
  testing::write_bytes(dir / "ids.txt", "1 2 banana 3");
  expect_failure(
      run_titan("tokenizer decode --tokenizer cl100k_base --input " + shell_quote((dir / "ids.txt").string())),
      {"ids.txt", "'banana'"});
  testing::write_bytes(dir / "ids.txt", "1 200000");
  expect_failure(
      run_titan("tokenizer decode --tokenizer cl100k_base --input " + shell_quote((dir / "ids.txt").string())),
      {"ids.txt", "'200000'"});
}

}  // namespace cli_test
}  // namespace titan::data
