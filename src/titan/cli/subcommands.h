// The list of `titan` subcommands. Each file in cli/ defines one
// make_<name>_subcommand(); all_subcommands() collects them.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace titan::cli {

struct Subcommand {
  // Adds the subcommand and its options to the app; keeps a handle to it.
  std::function<CLI::App*(CLI::App&)> add;
  // Runs it after parsing; returns the process exit code.
  std::function<int()> run;
  CLI::App* app = nullptr;

  void attach(CLI::App& parent) { app = add(parent); }
};

Subcommand make_bench_subcommand();
Subcommand make_data_subcommand();
Subcommand make_tokenizer_subcommand();
Subcommand make_train_subcommand();
Subcommand make_estimate_memory_subcommand();
Subcommand make_generate_subcommand();
Subcommand make_convert_subcommand();
Subcommand make_pipeline_subcommand();
Subcommand make_debug_subcommand();
Subcommand make_plot_subcommand();
Subcommand make_compare_subcommand();
Subcommand make_config_subcommand();
Subcommand make_lighthouse_subcommand();
Subcommand make_plan_subcommand();

inline std::vector<Subcommand> all_subcommands() {
  return {make_train_subcommand(),
          make_bench_subcommand(),
          make_data_subcommand(),
          make_tokenizer_subcommand(),
          make_estimate_memory_subcommand(),
          make_generate_subcommand(),
          make_convert_subcommand(),
          make_pipeline_subcommand(),
          make_debug_subcommand(),
          make_plot_subcommand(),
          make_compare_subcommand(),
          make_config_subcommand(),
          make_lighthouse_subcommand(),
          make_plan_subcommand()};
}

}  // namespace titan::cli
