// Every numeric option of every subcommand, found from its --help (so a new
// option is covered without touching this test), given values no option
// takes: NaN, infinities, text, a negative number and a number past any
// integer. Each must be refused before anything runs, with a message that
// names the option and reads well: no 309-digit bound, no "internal error".
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_job.h"

namespace titan {
namespace cli_numbers_test {

namespace fs = std::filesystem;

const std::string kCli = TITAN_CLI_PATH;

fs::path log_file() { return fs::path(::testing::TempDir()) / "cli_numbers_test.log"; }

struct Subcommand {
  std::string words;     // "pipeline show"
  std::string required;  // what it needs to get as far as checking the option
};

const std::vector<Subcommand> kSubcommands{
    {"bench", "ops"},
    {"compare", "run_a run_b"},
    {"data prepare", ""},
    {"estimate-memory", ""},
    {"generate", "--checkpoint nowhere"},
    {"pipeline show", ""},
    {"plot", "run --output out.svg"},
    {"tokenizer encode", "--tokenizer cl100k_base"},
    {"tokenizer train", "--input a --output b"},
};

struct NumericOption {
  std::string name;
  bool integer;
};

// The options --help lists with a numeric type (INT, UINT, FLOAT, NUMBER).
std::vector<NumericOption> numeric_options(const std::string& words) {
  std::string help;
  testing::run_command(kCli + " " + words + " --help", log_file(), &help);
  std::vector<NumericOption> options;
  const std::regex option(R"(^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)\s+(INT|UINT|FLOAT|NUMBER)\b)");
  std::smatch match;
  size_t start = 0;
  while (start < help.size()) {
    const size_t end = help.find('\n', start);
    const std::string line = help.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (std::regex_search(line, match, option)) options.push_back({match[1], match[2] == "INT" || match[2] == "UINT"});
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return options;
}

struct Attempt {
  std::string trace;  // "bench --iters nan"
  std::string value;
  std::string option;
  std::string command;
  int status = 0;
  std::string output;
};

// Each attempt is a process of its own that stops at its option's check, so its
// start-up is most of its time: the attempts run on every core at once, each
// worker with its own log file.
void run_all(std::vector<Attempt>& attempts) {
  const unsigned workers = std::max(2u, std::thread::hardware_concurrency());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      const fs::path log = fs::path(::testing::TempDir()) / fmt::format("cli_numbers_test_{}.log", w);
      for (size_t i = next++; i < attempts.size(); i = next++) {
        attempts[i].status = testing::run_command(attempts[i].command, log, &attempts[i].output);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(CliNumbers, EveryNumericOptionRefusesWhatNoneTakesWithAReadableMessage) {
  std::vector<Attempt> attempts;
  for (const Subcommand& subcommand : kSubcommands) {
    const std::vector<NumericOption> options = numeric_options(subcommand.words);
    for (const NumericOption& option : options) {
      std::vector<std::string> values{"nan", "inf", "-inf", "abc", "-7", "1e400"};
      if (option.integer) values.insert(values.end(), {"123456789012345678901234567890", "2.5"});
      for (const std::string& value : values) {
        // A timeout, so that an option left unchecked shows as a failure, not a benchmark running for hours.
        Attempt& attempt = attempts.emplace_back();
        attempt.trace = subcommand.words + " " + option.name + " " + value;
        attempt.value = value;
        attempt.option = option.name;
        attempt.command =
            "timeout 60 " + kCli + " " + subcommand.words + " " + subcommand.required + " " + option.name + " " + value;
      }
    }
    EXPECT_FALSE(options.empty()) << subcommand.words << " lists no numeric option: is --help's format still parsed?";
  }
  run_all(attempts);
  for (const Attempt& attempt : attempts) {
    SCOPED_TRACE(attempt.trace);
    const std::string& output = attempt.output;
    EXPECT_TRUE(WIFEXITED(attempt.status) && WEXITSTATUS(attempt.status) != 0 && WEXITSTATUS(attempt.status) != 124)
        << output;
    EXPECT_NE(output.find(attempt.option), std::string::npos) << output;
    EXPECT_EQ(output.find("internal error"), std::string::npos) << output;
    // The value as typed may be long; a bound printed by a check may not.
    std::string rest = output;
    for (size_t at = rest.find(attempt.value); at != std::string::npos; at = rest.find(attempt.value)) {
      rest.erase(at, attempt.value.size());
    }
    EXPECT_FALSE(std::regex_search(rest, std::regex("[0-9]{20,}"))) << output;
  }
  EXPECT_GT(attempts.size(), 6u * 30u);
}

// The numbers a check refuses at its bound say the rule, not CLI11's range.
TEST(CliNumbers, BoundsAreSaidInWords) {
  std::string output;
  testing::run_command(kCli + " pipeline show --ranks 0", log_file(), &output);
  EXPECT_NE(output.find("--ranks: 0 is not a whole number >= 1"), std::string::npos) << output;
  testing::run_command(kCli + " generate --checkpoint nowhere --top-p 1.5", log_file(), &output);
  EXPECT_NE(output.find("--top-p: 1.5 is not a number in (0, 1]"), std::string::npos) << output;
  testing::run_command(kCli + " compare a b --rtol nan", log_file(), &output);
  EXPECT_NE(output.find("--rtol: 'nan' is not a finite number"), std::string::npos) << output;
  testing::run_command(kCli + " pipeline show --ranks 2.5", log_file(), &output);
  EXPECT_NE(output.find("--ranks: 2.5 is not a whole number >= 1"), std::string::npos) << output;
}

}  // namespace cli_numbers_test
}  // namespace titan
