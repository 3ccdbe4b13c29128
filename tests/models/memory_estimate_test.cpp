// The memory estimate's activation terms, checked against the block count
// each activation-checkpointing mode keeps (the formula's own inputs).
#include "titan/models/memory_estimate.h"

#include <gtest/gtest.h>

#include "titan/models/model_spec.h"

namespace titan::models {
namespace {

TEST(MemoryEstimate, ActivationModesKeepTheirNumberOfBlocks) {
  const DecoderConfig config = model_config("llama3", "1B");
  MemoryEstimateOptions o;
  o.batch = 2;
  o.seq_len = 4096;
  auto activations = [&](const std::string& mode) {
    o.activation_checkpoint = mode;
    return estimate_memory(config, o).activation_bytes;
  };
  const double none = activations("none"), full = activations("full"), offload = activations("offload");
  const double block = none / static_cast<double>(config.n_layers());
  // Offload keeps three blocks on the device: the last, one copying out, one coming back.
  EXPECT_DOUBLE_EQ(offload, 3.0 * block);
  // Full checkpointing keeps every block's input plus one recomputed block.
  EXPECT_LT(full, offload);
  EXPECT_GT(full, block);
  // Nothing else in the estimate depends on the mode.
  o.activation_checkpoint = "none";
  const MemoryEstimate a = estimate_memory(config, o);
  o.activation_checkpoint = "offload";
  const MemoryEstimate b = estimate_memory(config, o);
  EXPECT_EQ(a.parameter_bytes, b.parameter_bytes);
  EXPECT_EQ(a.loss_bytes, b.loss_bytes);
}

}  // namespace
}  // namespace titan::models
