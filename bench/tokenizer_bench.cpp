#include "bench/tokenizer_bench.h"

#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

#include "bench/json_report.h"
#include "bench/peer_process.h"
#include "bench/timing.h"
#include "titan/core/error.h"
#include "titan/data/bpe_trainer.h"
#include "titan/data/corpus_reader.h"
#include "titan/data/data_prepare.h"
#include "titan/data/file_io.h"
#include "titan/data/tokenizer_loader.h"

#ifndef TITAN_BENCH_DIR
#define TITAN_BENCH_DIR ""
#endif

namespace titan::bench {
namespace {

namespace fs = std::filesystem;

// English text of about `bytes`: the fortunes corpus (or --text) repeated,
// cut at a line end so it stays valid UTF-8.
std::string english_text(const std::string& path, size_t bytes) {
  std::string corpus;
  if (!path.empty()) {
    corpus = data::read_file(path, "benchmark text");
  } else {
    for (const auto& file : data::list_corpus_files({data::kDefaultCorpusDir})) {
      corpus += data::read_file(file, "corpus");
    }
  }
  TITAN_CHECK(!corpus.empty(), "benchmark text is empty");
  std::string text;
  while (text.size() < bytes) text += corpus;
  const size_t cut = text.rfind('\n', bytes);
  text.resize(cut == std::string::npos ? bytes : cut + 1);
  return text;
}

// 5 MB of distinct English for training: the GCIDE dictionary when the
// dict-gcide package is installed (through gzip: .dz is gzip), else fortunes
// repeated (fewer distinct words, so training is faster than on real text).
std::string training_text(size_t bytes, std::string& source) {
  const char* gcide = "/usr/share/dictd/gcide.dict.dz";
  if (fs::exists(gcide)) {
    std::string text;
    if (FILE* pipe = ::popen((std::string("gzip -dc ") + gcide + " 2>/dev/null").c_str(), "r")) {
      char buffer[1 << 16];
      size_t got;
      while (text.size() < bytes && (got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, got);
      ::pclose(pipe);
    }
    if (text.size() >= bytes) {
      text.resize(text.rfind('\n', bytes) + 1);
      source = "GCIDE dictionary (dict-gcide)";
      return text;
    }
  }
  source = "fortunes, repeated";
  return english_text("", bytes);
}

struct TokenizerPeerResult {
  double seconds = 0;
  uint64_t tokens = 0;
  bool ok = false;
  std::string error;
};

TokenizerPeerResult run_tokenizer_peer(const std::string& encoding, const fs::path& text_file, int repeats) {
  TokenizerPeerResult result;
  // The peer is npm's tiktoken, which scripts/setup.sh installs in the source
  // tree's tests/peers (a development tool, not part of an installed titan).
  const char* env = std::getenv("TITAN_TOKENIZER_PEERS");
  const fs::path peers =
      env != nullptr && *env != '\0' ? fs::path(env) : fs::path(TITAN_BENCH_DIR) / ".." / "tests" / "peers";
  std::error_code error;
  if (!fs::is_directory(peers / "node_modules" / "tiktoken", error)) {
    result.error =
        peers.string() + "/node_modules/tiktoken not found (run scripts/setup.sh, or set TITAN_TOKENIZER_PEERS)";
    return result;
  }
  const std::string script = shared_file("bench/tokenizer_peer.cjs");
  const std::string command = "TITAN_TOKENIZER_PEERS='" + peers.string() + "' node '" + script + "' " + encoding +
                              " '" + text_file.string() + "' " + std::to_string(repeats) + " 2>&1";
  std::string output;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, got);
    if (::pclose(pipe) != 0) {
      result.error = "node failed: " + output;
      return result;
    }
  }
  try {
    const auto json = nlohmann::json::parse(output.substr(output.rfind('{')));
    result.seconds = json.at("median_seconds").get<double>();
    result.tokens = json.at("tokens").get<uint64_t>();
    result.ok = true;
  } catch (const std::exception& e) {
    result.error = "cannot read the peer's output: " + output;
  }
  return result;
}

}  // namespace

int run_tokenizer_bench(const TokenizerBenchOptions& options) {
  const double megabytes = options.quick ? 1 : options.megabytes;
  const int repeats = options.quick ? 3 : options.repeats;
  const int all_threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  const std::string text = english_text(options.text_path, static_cast<size_t>(megabytes * 1e6));
  const double mb = static_cast<double>(text.size()) / 1e6;
  const auto tokenizer = data::load_tokenizer(options.encoding);
  std::printf("tokenizer bench: %s on %.2f MB of English (%s), median of %d\n", options.encoding.c_str(), mb,
              options.text_path.empty() ? "fortunes" : options.text_path.c_str(), repeats);

  std::vector<uint32_t> ids;
  const double one = median_seconds([&] { ids = tokenizer->encode(text); }, 1, repeats);
  const uint64_t tokens = ids.size();
  const double all = median_seconds([&] { ids = tokenizer->encode(text, {.threads = all_threads}); }, 1, repeats);
  TITAN_CHECK(ids.size() == tokens, "parallel encode gave {} tokens, one thread {}", ids.size(), tokens);

  const fs::path text_file =
      fs::temp_directory_path() / ("titan_tokenizer_bench_" + std::to_string(::getpid()) + ".txt");
  data::write_file_atomic(text_file, text);
  const TokenizerPeerResult peer = run_tokenizer_peer(options.encoding, text_file, repeats);
  fs::remove(text_file);

  std::printf("  %-34s %8.2f MB/s  (%llu tokens)\n", "titan, 1 thread", mb / one,
              static_cast<unsigned long long>(tokens));
  std::printf("  %-34s %8.2f MB/s  (%d threads)\n", "titan, all threads", mb / all, all_threads);
  nlohmann::json report = {{"encoding", options.encoding},
                           {"megabytes", mb},
                           {"tokens", tokens},
                           {"titan_1_thread_mb_s", mb / one},
                           {"titan_all_threads_mb_s", mb / all},
                           {"threads", all_threads}};
  if (peer.ok) {
    std::printf("  %-34s %8.2f MB/s  (%llu tokens%s)\n", "npm tiktoken (WASM), 1 thread", mb / peer.seconds,
                static_cast<unsigned long long>(peer.tokens),
                peer.tokens == tokens ? ", same count" : ", COUNT DIFFERS");
    std::printf("  speed-up over npm tiktoken: %.2fx one thread, %.2fx all threads\n", peer.seconds / one,
                peer.seconds / all);
    report["tiktoken_wasm_mb_s"] = mb / peer.seconds;
    report["speedup_1_thread"] = peer.seconds / one;
  } else {
    std::printf("  npm tiktoken: not measured: %s\n", peer.error.c_str());
  }

  if (options.train) {
    std::string source;
    const size_t train_bytes = options.quick ? 1000000 : 5000000;
    const uint32_t merges = options.quick ? 1024 : 8192;
    const std::string corpus = training_text(train_bytes, source);
    data::BpeTrainerOptions trainer;
    trainer.vocab_size = 256 + merges + static_cast<uint32_t>(trainer.special_tokens.size());
    data::BpeTrainingStats stats;
    const double seconds = median_seconds([&] { data::train_bpe({corpus}, trainer, &stats); }, 0, 1);
    std::printf("  BPE training: %u merges on %.2f MB of %s in %.2f s (pre-tokenize %.2f s, merges %.2f s)\n",
                stats.merges, static_cast<double>(corpus.size()) / 1e6, source.c_str(), seconds,
                stats.pretokenize_seconds, stats.merge_seconds);
    report["train_merges"] = stats.merges;
    report["train_megabytes"] = static_cast<double>(corpus.size()) / 1e6;
    report["train_seconds"] = seconds;
  }
  write_json_report(options.json_path, report);
  return 0;
}

}  // namespace titan::bench
