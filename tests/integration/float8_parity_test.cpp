// Float8 training of the llama3 debug model through `titan train`
// (model.converters, [quantize.linear.*]): each recipe trains (the loss
// falls) and stays near the high-precision run, and FSDP 2 with the same
// recipe tracks one process taking the batch in two micro-batches: FSDP
// gathers whole weights before the Linears cast them, and each rank's
// activations are one micro-batch's, so every scale is the one-process one.
#include <gtest/gtest.h>

#include <cmath>

#include "parity_job.h"

namespace titan {
namespace float8_parity_test {

using testing::JobRun;

const testing::ParityJobs& jobs() {
  static const testing::ParityJobs instance("float8_parity");
  return instance;
}

std::string converter_flags(const std::string& recipe) {
  if (recipe == "mxfp8") return "--model.converters quantize.linear.mx --quantize.linear.mx.filter_fqns output ";
  return "--model.converters quantize.linear.float8 --quantize.linear.float8.recipe_name " + recipe +
         " --quantize.linear.float8.filter_fqns output ";
}

TEST(Float8Parity, RecipesTrainNearHighPrecisionAndFsdpMatchesOneProcess) {
  const JobRun high = jobs().single("high_precision");
  for (const std::string recipe : {"tensorwise", "rowwise", "mxfp8"}) {
    SCOPED_TRACE(recipe);
    // Each FSDP rank casts its own 2 sequences' activations with their own scales: the same casts as one process
    // taking the batch as 2 micro-batches of 2 (gradient accumulation).
    const JobRun single =
        jobs().single(recipe + "_accumulated",
                      converter_flags(recipe) + "--training.local_batch_size 2 --training.global_batch_size 4");
    ASSERT_EQ(single.losses.size(), high.losses.size());
    EXPECT_LT(single.losses.back(), single.losses.front());
    // Quantised, so not the high-precision losses, yet within 2% of them over six steps.
    double largest_gap = 0.0;
    for (size_t i = 0; i < high.losses.size(); ++i) {
      EXPECT_LT(std::fabs(single.losses[i] - high.losses[i]), 0.02 * high.losses[i]) << "step " << i + 1;
      largest_gap = std::max(largest_gap, std::fabs(single.losses[i] - high.losses[i]));
    }
    EXPECT_GT(largest_gap, 1e-6);
    const JobRun fsdp = jobs().distributed(recipe + "_fsdp2", 2, 2,
                                           converter_flags(recipe) + "--parallelism.data_parallel_shard_degree 2");
    // Losses within 1e-5 at every step; the final weights within 2e-4: the ranks' gradients are summed by the
    // reduce-scatter, the micro-batches' by accumulation, and an f32 rounding difference in a weight can move an
    // fp8 rounding by a whole step, which AdamW carries on (5e-5 measured).
    testing::expect_matches(single, fsdp, recipe + " FSDP 2", true, 2e-4);
  }
}

}  // namespace float8_parity_test
}  // namespace titan
