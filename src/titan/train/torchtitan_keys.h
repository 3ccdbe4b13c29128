// TorchTitan's job-config keys that titan has no field of its own for, so
// that a TorchTitan TOML loads as it is. Every one of TorchTitan's keys (its
// last TOML release, v0.2.2) is either a titan key with the same meaning or
// listed here with what titan does with it:
//  - mapped: set onto titan's key of the same meaning (debug.seed ->
//    training.seed, selective_ac_option "2" -> selective_every 2, ...);
//  - no effect: accepted; set to anything but TorchTitan's default it adds a
//    one-line notice saying why it changes nothing here;
//  - refused: accepted at TorchTitan's default (asking for nothing), any
//    other value is an error naming the key and what would make it work;
//  - configures a converter: accepted whatever its value (quantize.*: read
//    only by a model.converters entry, which is refused).
// docs/torchtitan-keys.md lists them all; a test keeps it equal to this table.
#pragma once

#include <string>
#include <vector>

namespace titan::train {

struct JobConfig;

enum class TorchTitanKeyUse { mapped, no_effect, refused, converter_setting };

struct TorchTitanKey {
  std::string key;  // dotted, as TorchTitan spells it: "compile.enable"
  TorchTitanKeyUse use;
  std::string default_value;  // TorchTitan's default, in the canonical text apply_torchtitan_key takes
  std::string why;            // what titan does instead, or what would make it work
};

// The table, in TorchTitan's order.
const std::vector<TorchTitanKey>& torchtitan_keys();
// The entry for a dotted key, or nullptr.
const TorchTitanKey* find_torchtitan_key(const std::string& dotted);
// True when some entry's key starts with `prefix` + "." (a TorchTitan section or sub-table).
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
// (bfloat16, float32, float16) become titan's (bf16, f32, f16);
// selective_ac_option "op" with
// mode selective becomes mode none (with a notice); model.hf_assets_path's
// tokenizer.json becomes model.tokenizer_path unless that is set, and
// checkpoint.initial_load_in_hf with no initial_load_path loads
// model.hf_assets_path.
void resolve_torchtitan_keys(JobConfig& config);

}  // namespace titan::train
