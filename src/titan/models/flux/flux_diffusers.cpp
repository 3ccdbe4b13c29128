#include "titan/models/flux/flux_diffusers.h"

#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"

namespace titan::models::flux {

namespace {

// One titan tensor and where its rows go in Diffusers' layout: whole under
// one name, split along dim 0 into named pieces, or its two halves swapped.
struct Piece {
  std::string name;
  int64_t rows = -1;  // -1: all of them
};
struct Rule {
  std::string titan;
  std::vector<Piece> pieces;
  bool swap_halves = false;
};

class DiffusersLayout {
 public:
  explicit DiffusersLayout(const FluxConfig& config) {
    const int64_t hidden = config.hidden_size, mlp = config.mlp_hidden_dim();
    linear("img_in", "x_embedder");
    linear("txt_in", "context_embedder");
    embedder("time_in", "timestep_embedder");
    embedder("vector_in", "text_embedder");
    if (config.guidance_embed) embedder("guidance_in", "guidance_embedder");
    for (int64_t i = 0; i < config.depth; ++i) {
      const std::string s = "double_blocks." + std::to_string(i), d = "transformer_blocks." + std::to_string(i);
      linear(s + ".img_mod.lin", d + ".norm1.linear");
      linear(s + ".txt_mod.lin", d + ".norm1_context.linear");
      split(s + ".img_attn.qkv", {{d + ".attn.to_q", hidden}, {d + ".attn.to_k", hidden}, {d + ".attn.to_v", hidden}},
            config.qkv_bias);
      split(s + ".txt_attn.qkv",
            {{d + ".attn.add_q_proj", hidden}, {d + ".attn.add_k_proj", hidden}, {d + ".attn.add_v_proj", hidden}},
            config.qkv_bias);
      tensor(s + ".img_attn.norm.query_norm.weight", d + ".attn.norm_q.weight");
      tensor(s + ".img_attn.norm.key_norm.weight", d + ".attn.norm_k.weight");
      tensor(s + ".txt_attn.norm.query_norm.weight", d + ".attn.norm_added_q.weight");
      tensor(s + ".txt_attn.norm.key_norm.weight", d + ".attn.norm_added_k.weight");
      linear(s + ".img_attn.proj", d + ".attn.to_out.0");
      linear(s + ".txt_attn.proj", d + ".attn.to_add_out");
      linear(s + ".img_mlp.0", d + ".ff.net.0.proj");
      linear(s + ".img_mlp.2", d + ".ff.net.2");
      linear(s + ".txt_mlp.0", d + ".ff_context.net.0.proj");
      linear(s + ".txt_mlp.2", d + ".ff_context.net.2");
    }
    for (int64_t i = 0; i < config.depth_single_blocks; ++i) {
      const std::string s = "single_blocks." + std::to_string(i), d = "single_transformer_blocks." + std::to_string(i);
      split(
          s + ".linear1",
          {{d + ".attn.to_q", hidden}, {d + ".attn.to_k", hidden}, {d + ".attn.to_v", hidden}, {d + ".proj_mlp", mlp}},
          true);
      linear(s + ".linear2", d + ".proj_out");
      linear(s + ".modulation.lin", d + ".norm.linear");
      tensor(s + ".norm.query_norm.weight", d + ".attn.norm_q.weight");
      tensor(s + ".norm.key_norm.weight", d + ".attn.norm_k.weight");
    }
    linear("final_layer.linear", "proj_out");
    // Diffusers' AdaLayerNormContinuous reads (scale, shift); FLUX's final layer (shift, scale).
    for (const char* kind : {".weight", ".bias"}) {
      rules_.push_back(
          {std::string("final_layer.adaLN_modulation.1") + kind, {{std::string("norm_out.linear") + kind}}, true});
    }
  }

  const std::vector<Rule>& rules() const { return rules_; }

 private:
  void tensor(const std::string& titan, const std::string& diffusers) { rules_.push_back({titan, {{diffusers}}}); }
  void linear(const std::string& titan, const std::string& diffusers) {
    tensor(titan + ".weight", diffusers + ".weight");
    tensor(titan + ".bias", diffusers + ".bias");
  }
  void embedder(const std::string& titan, const std::string& diffusers) {
    linear(titan + ".in_layer", "time_text_embed." + diffusers + ".linear_1");
    linear(titan + ".out_layer", "time_text_embed." + diffusers + ".linear_2");
  }
  void split(const std::string& titan, const std::vector<Piece>& pieces, bool bias) {
    for (const char* kind : {".weight", ".bias"}) {
      if (std::string(kind) == ".bias" && !bias) continue;
      Rule rule{titan + kind, {}};
      for (const Piece& piece : pieces) rule.pieces.push_back({piece.name + kind, piece.rows});
      rules_.push_back(std::move(rule));
    }
  }
  std::vector<Rule> rules_;
};

const Tensor& find(const StateDict& state, const std::string& name, const char* layout) {
  const auto found = state.find(name);
  TITAN_CHECK(found != state.end(), "flux: the {} weights have no '{}'", layout, name);
  return found->second;
}

// Every name of `state` was used by a rule.
void check_all_used(const StateDict& state, const std::set<std::string>& used, const char* layout) {
  for (const auto& [name, tensor] : state) {
    TITAN_CHECK(used.count(name) == 1, "flux: '{}' is not a tensor of this model's {} layout", name, layout);
  }
}

Tensor swapped_halves(const Tensor& t) {
  TITAN_CHECK(t.size(0) % 2 == 0, "flux: the final modulation's {} rows do not halve", t.size(0));
  const int64_t half = t.size(0) / 2;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  titan::copy_(out.narrow(0, 0, half), t.narrow(0, half, half));
  titan::copy_(out.narrow(0, half, half), t.narrow(0, 0, half));
  return out;
}

}  // namespace

StateDict flux_to_diffusers(const StateDict& state, const FluxConfig& config) {
  StateDict out;
  std::set<std::string> used;
  const DiffusersLayout layout(config);
  for (const Rule& rule : layout.rules()) {
    const Tensor& t = find(state, rule.titan, "titan");
    used.insert(rule.titan);
    if (rule.swap_halves) {
      out[rule.pieces.front().name] = swapped_halves(t);
      continue;
    }
    int64_t row = 0;
    for (const Piece& piece : rule.pieces) {
      const int64_t rows = piece.rows < 0 ? t.size(0) : piece.rows;
      TITAN_CHECK(row + rows <= t.size(0), "flux: '{}' has {} rows, too few for its Diffusers pieces", rule.titan,
                  t.size(0));
      out[piece.name] = t.narrow(0, row, rows).contiguous();
      row += rows;
    }
    TITAN_CHECK(row == t.size(0), "flux: '{}' has {} rows, not the {} of its Diffusers pieces", rule.titan, t.size(0),
                row);
  }
  check_all_used(state, used, "titan");
  return out;
}

StateDict flux_from_diffusers(const StateDict& diffusers, const FluxConfig& config) {
  StateDict out;
  std::set<std::string> used;
  const DiffusersLayout layout(config);
  for (const Rule& rule : layout.rules()) {
    std::vector<Tensor> pieces;
    int64_t rows = 0;
    for (const Piece& piece : rule.pieces) {
      pieces.push_back(find(diffusers, piece.name, "Diffusers"));
      used.insert(piece.name);
      TITAN_CHECK(piece.rows < 0 || pieces.back().size(0) == piece.rows, "flux: '{}' has {} rows where {} belong",
                  piece.name, pieces.back().size(0), piece.rows);
      rows += pieces.back().size(0);
    }
    if (rule.swap_halves) {
      out[rule.titan] = swapped_halves(pieces.front());
      continue;
    }
    Shape shape = pieces.front().shape();
    shape[0] = rows;
    Tensor whole = Tensor::empty(shape, pieces.front().dtype(), pieces.front().device());
    int64_t row = 0;
    for (const Tensor& piece : pieces) {
      TITAN_CHECK(piece.dim() == whole.dim(), "flux: the pieces of '{}' differ in rank", rule.titan);
      titan::copy_(whole.narrow(0, row, piece.size(0)), piece);
      row += piece.size(0);
    }
    out[rule.titan] = whole;
  }
  check_all_used(diffusers, used, "Diffusers");
  return out;
}

namespace {

std::string diffusers_file(const std::string& folder) {
  return (std::filesystem::path(folder) / "diffusion_pytorch_model.safetensors").string();
}

}  // namespace

void save_diffusers_transformer(FluxModel& model, const std::string& folder) {
  StateDict state;
  for (auto& [name, tensor] : model.named_state()) state[name] = tensor;
  const StateDict diffusers = flux_to_diffusers(state, model.config);
  std::filesystem::create_directories(folder);
  checkpoint::write_safetensors(diffusers_file(folder), checkpoint::NamedTensors(diffusers.begin(), diffusers.end()));
}

void load_diffusers_transformer(FluxModel& model, const std::string& folder) {
  const checkpoint::SafetensorsReader reader(diffusers_file(folder));
  StateDict diffusers;
  for (const checkpoint::SafetensorsEntry& entry : reader.header().entries)
    diffusers[entry.name] = reader.read(entry.name);
  model.load_state_dict(flux_from_diffusers(diffusers, model.config));
}

}  // namespace titan::models::flux
