// `titan convert --from hf DIR --to titan OUT [--merge-lora ADAPTER]` (and back): moves model
// weights between titan's model export and Hugging Face folders (safetensors,
// or `pth`: pytorch_model*.bin torch.save files), and from Meta's original
// Llama checkpoints (`meta`: params.json + consolidated.NN.pth) to titan; and
// between titan and PyTorch Distributed Checkpoint folders (`dcp`, TorchTitan's
// step folders; dcp_convert.h). OUT is
// written under a temporary name and renamed into place, so a failed
// conversion leaves nothing behind and never touches an existing folder.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/core/path_overlap.h"
#include "titan/models/hf/hf_index.h"
#include "titan/train/dcp_convert.h"
#include "titan/train/hf_convert.h"
#include "titan/train/meta_convert.h"

namespace titan::cli {

namespace {

struct ConvertArguments {
  std::vector<std::string> from, to;
  std::string dtype = "auto";
  std::string max_shard_size = "5GB";
  bool force = false, allow_nonfinite = false;
  std::string merge_lora;  // a PEFT adapter folder to merge in
  std::string job_config;  // --from dcp: the TOML describing the model
};

// "5GB", "500MB", "64KiB" or plain bytes (decimal units as HF writes them, binary with "i").
uint64_t parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  TITAN_CHECK(digits > 0 && digits <= 15, "--max-shard-size '{}': expected a size such as 5GB, 500MB or 1000000", text);
  const uint64_t value = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::vector<std::pair<std::string, uint64_t>> units{{"", 1},
                                                            {"B", 1},
                                                            {"KB", 1000},
                                                            {"MB", 1000000},
                                                            {"GB", 1000000000},
                                                            {"KIB", 1 << 10},
                                                            {"MIB", 1 << 20},
                                                            {"GIB", uint64_t{1} << 30}};
  for (const auto& [name, scale] : units) {
    if (unit == name) {
      TITAN_CHECK(value > 0, "--max-shard-size must be positive");
      return value * scale;
    }
  }
  fail("--max-shard-size '{}': unknown unit '{}' (B, KB, MB, GB, KiB, MiB, GiB)", text, unit);
}

// The formats convert reads (--from) and writes (--to).
const std::vector<std::string> kSourceFormats{"hf", "pth", "meta", "dcp", "titan"};
const std::vector<std::string> kOutputFormats{"hf", "dcp", "titan"};

void check_format(const std::vector<std::string>& pair, const char* option, const std::vector<std::string>& formats) {
  TITAN_CHECK(pair.size() == 2 && std::find(formats.begin(), formats.end(), pair[0]) != formats.end(),
              "{} takes a format ({}) and a folder, e.g. {} hf path/to/model", option, fmt::join(formats, ", "),
              option);
}

}  // namespace

Subcommand make_convert_subcommand() {
  auto args = std::make_shared<ConvertArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand(
        "convert", "convert model weights between titan, Hugging Face, Meta and PyTorch DCP folders");
    app->add_option("--from", args->from,
                    "source: FORMAT DIR (hf: config.json + safetensors or pytorch_model*.bin; pth: such a folder of "
                    ".bin files; meta: Meta's params.json + consolidated.NN.pth; dcp: a PyTorch Distributed Checkpoint "
                    "folder, as TorchTitan saves; titan: a model export, or for --to dcp a training checkpoint's step "
                    "folder, whose whole training state goes)")
        ->expected(2)
        ->required();
    app->add_option("--to", args->to, "destination: FORMAT OUT (titan, or hf or dcp from titan)")
        ->expected(2)
        ->required();
    app->add_option("--dtype", args->dtype, "weights dtype: auto (as stored), f32, bf16 or f16")->capture_default_str();
    app->add_option("--max-shard-size", args->max_shard_size, "HF output: start a new shard past this size")
        ->capture_default_str();
    app->add_option("--merge-lora", args->merge_lora,
                    "a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) to merge into the "
                    "weights: W + (lora_alpha / r) B A");
    app->add_option("--job-config", args->job_config,
                    "--from dcp: the titan or TorchTitan TOML naming the model the checkpoint holds (default: the "
                    "folder's job.toml)");
    app->add_flag("--force", args->force, "replace OUT if it exists (only once the new one is complete)");
    app->add_flag("--allow-nonfinite", args->allow_nonfinite,
                  "convert weights holding NaN or Inf (named in a warning) instead of refusing them");
    return app;
  };
  subcommand.run = [args] {
    check_format(args->from, "--from", kSourceFormats);
    check_format(args->to, "--to", kOutputFormats);
    const std::string &source = args->from[1], &output = args->to[1];
    const bool to_titan = args->to[0] == "titan";
    TITAN_CHECK(
        args->from[0] != args->to[0],
        "--from and --to are both '{}': convert goes from hf, pth, meta or dcp to titan, or from titan to hf or "
        "dcp",
        args->from[0]);
    TITAN_CHECK(to_titan != (args->from[0] == "titan"),
                "--from {} --to {}: convert goes from hf, pth, meta or dcp to titan, or from titan to hf or dcp",
                args->from[0], args->to[0]);
    namespace fs = std::filesystem;
    TITAN_CHECK(fs::is_directory(source), "--from {}: '{}' is not a folder", args->from[0], source);
    // --force replaces OUT whole: OUT must be apart from everything convert reads.
    check_output_apart_from_input(output, "--to", source, "source folder (--from)");
    check_output_apart_from_input(output, "--to", args->merge_lora, "--merge-lora adapter");
    TITAN_CHECK(args->force || !fs::exists(output), "'{}' exists (pass --force to replace it)", output);
    train::ConvertOptions options;
    if (args->dtype != "auto") {
      const DType dtype = parse_dtype(args->dtype);
      TITAN_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
                  "--dtype {}: weights convert to f32, bf16 or f16", args->dtype);
      options.dtype = dtype;
    }
    options.max_shard_bytes = parse_size(args->max_shard_size);
    options.merge_lora = args->merge_lora;
    options.allow_nonfinite = args->allow_nonfinite;
    TITAN_CHECK(args->job_config.empty() || args->from[0] == "dcp", "--job-config applies to --from dcp only");
    if (args->from[0] == "dcp") {
      train::convert_dcp_to_titan(source, output, args->job_config, options);
    } else if (args->to[0] == "dcp") {
      train::convert_titan_to_dcp(source, output, options);
    } else if (args->from[0] == "meta") {
      train::convert_meta_to_titan(source, output, options);
    } else if (args->from[0] == "pth") {
      TITAN_CHECK(fs::exists(fs::path(source) / models::kHfTorchSingleFile) ||
                      fs::exists(fs::path(source) / models::kHfTorchIndexFile),
                  "--from pth: {} holds neither {} nor {}", source, models::kHfTorchSingleFile,
                  models::kHfTorchIndexFile);
      train::convert_hf_to_titan(source, output, options);
    } else if (to_titan) {
      train::convert_hf_to_titan(source, output, options);
    } else {
      train::convert_titan_to_hf(source, output, options);
    }
    std::printf("titan: converted %s folder %s to %s folder %s\n", args->from[0].c_str(), source.c_str(),
                args->to[0].c_str(), output.c_str());
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
