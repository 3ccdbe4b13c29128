// TorchTitan's job-config keys, so that a TorchTitan config loads as it is:
// every key of its last TOML release (v0.2.2) and of its current config
// dataclasses (the dotted names its command line takes: --section.key, a
// nested field's sections joined by dots, top-level fields bare) has an entry
// saying what titan does with it:
//  - titan_key: titan has the key, with TorchTitan's meaning unless the note
//    says otherwise (titan's own parser reads it; find_torchtitan_key skips it);
//  - mapped: set onto titan's key of the same meaning (debug.seed ->
//    training.seed, selective_ac_option "2" -> selective_every 2, ...);
//  - no effect: accepted; set to anything but TorchTitan's default it adds a
//    one-line notice saying why it changes nothing here;
//  - refused: accepted at TorchTitan's default (asking for nothing), any
//    other value is an error naming the key and what would make it work;
//  - converter_setting ("inert" in the docs): accepted whatever its value,
//    read only by a feature that is refused when asked for
//    (tokenizer.*'s multimodal tokens; fault_tolerance.*:
//    fault_tolerance.enable).
// docs/torchtitan-keys.md lists them all; a test keeps it equal to this table.
#pragma once

#include <string>
#include <vector>

namespace titan::train {

struct JobConfig;

enum class TorchTitanKeyUse { titan_key, mapped, no_effect, refused, converter_setting };

// Which of TorchTitan's configs defines the key: its last TOML release
// (v0.2.2, torchtitan/config/job_config.py), its current config dataclasses
// (Trainer.Config and the component configs in it), or both.
enum class TorchTitanRelease { v0_2_2, current, both };

struct TorchTitanKey {
  std::string key;  // dotted, as TorchTitan spells it: "compile.enable"
  TorchTitanKeyUse use;
  std::string default_value;  // TorchTitan's default, in the canonical text apply_torchtitan_key takes
  std::string why;            // what titan does instead, or what would make it work
  TorchTitanRelease release;
};

// The table, every key of both releases, in TorchTitan's order (v0.2.2's,
// with the current keys beside their nearest v0.2.2 key).
const std::vector<TorchTitanKey>& torchtitan_keys();
// The entry for a dotted key titan has no key of its own for (use is not
// titan_key), or nullptr.
const TorchTitanKey* find_torchtitan_key(const std::string& dotted);
// True when some such entry's key starts with `prefix` + "." (a TorchTitan section or sub-table).
bool is_torchtitan_section(const std::string& prefix);

// Applies TorchTitan key `entry` set to `value` (canonical text: true/false,
// decimal numbers, strings as they are, list items joined by ","), found at
// `where` (a file:line or a --flag): sets the mapped titan key, appends a
// notice to config.notices, or fails naming `where` and the key.
void apply_torchtitan_key(JobConfig& config, const TorchTitanKey& entry, const std::string& value,
                          const std::string& where);

// titan's family for a model as TorchTitan names it: TorchTitan's qwen3
// holds the MoE flavors (debugmodel_moe, 30B-A3B, 235B-A22B) that titan
// keeps as qwen3_moe. Any other name is its own family.
std::string titan_family(const std::string& name, const std::string& flavor);

// Once the command line's overrides are in: TorchTitan's dtype spellings
// (bfloat16, float32, float16) become titan's (bf16, f32, f16), and
// checkpoint.async_mode "async_with_pinned_mem" becomes "async" (with a
// notice); TorchTitan's token budgets (training.num_tokens_per_*,
// parallelism.num_pp_microbatches) become titan's batch sizes in sequences of
// training.seq_len, refusing a budget that is not a whole number of them;
// compile.enable and training.disable_cuda_graphs = false set
// training.graph_capture where a whole step can be recorded (else a notice);
// model.hf_assets_path's tokenizer.json becomes model.tokenizer_path unless
// that is set, and checkpoint.initial_load_in_hf with no initial_load_path
// loads model.hf_assets_path.
void resolve_torchtitan_keys(JobConfig& config);

}  // namespace titan::train
