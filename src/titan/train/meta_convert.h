// `titan convert --from meta DIR`: Meta's original Llama checkpoints (what
// Meta's download gives and TorchTitan's conversion script reads):
// params.json and consolidated.NN.pth, one torch.save file per model-parallel
// rank. Each shard is read through the restricted unpickler; the ranks'
// pieces are joined along the dimension Meta split them (column-parallel
// weights and Llama 3's vocabulary-parallel embedding by rows, wo and w2 by
// columns, norms whole in every shard). Meta's tensor names and RoPE row
// order are titan's own, so no tensor is renamed or permuted.
#pragma once

#include <string>

#include "titan/train/hf_convert.h"

namespace titan::train {

// The Hugging Face config.json (LlamaForCausalLM) equal to Meta's params.json,
// with the shapes params.json leaves out taken from the weights: the FFN
// width (w1's rows), the vocabulary (the embedding's rows, when params.json
// says -1) and whether the output is tied (no output.weight). Errors name `source`.
struct MetaShapes {
  int64_t ffn_hidden = 0;
  int64_t vocab_size = 0;
  bool has_output = true;
  std::string dtype = "bfloat16";
};
std::string meta_params_to_hf_config(const std::string& params_json, const MetaShapes& shapes,
                                     const std::string& source);

void convert_meta_to_titan(const std::string& meta_folder, const std::string& output, const ConvertOptions& options);

}  // namespace titan::train
