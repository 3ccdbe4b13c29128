// The memory recorder over a real forward and backward: allocations are
// attributed to the module whose forward (or backward node) made them, by its
// fully-qualified name.
#include <gtest/gtest.h>

#include <set>

#include "titan/autograd/engine.h"
#include "titan/core/memory_recorder.h"
#include "titan/core/memory_snapshot_writer.h"
#include "titan/nn/feed_forward.h"
#include "titan/nn/functional.h"
#include "titan/nn/initialize.h"

namespace titan {
namespace memory_attribution_test {

TEST(MemoryAttribution, ForwardAndBackwardOfAFeedForwardNameTheirModules) {
  auto block = nn::FeedForwardConfig{.dim = 32, .hidden_dim = 96}.build();
  block->name_modules("layers.0.feed_forward");
  Generator generator(1);
  block->set_init(0.02);
  nn::initialize(*block, generator.seed());
  Tensor x = Tensor::zeros({8, 32});
  x.set_requires_grad(true);

  memory::Snapshot snapshot;
  {
    memory::RecordingScope scope(100000);
    const Tensor loss = F::sum(block->forward(x));
    autograd::backward({loss});
    snapshot = memory::take();
  }
  std::set<std::string> modules, ops;
  for (const memory::Event& event : snapshot.events) {
    if (event.action != memory::Action::alloc) continue;
    modules.insert(event.module);
    ops.insert(event.op);
  }
  std::string seen;
  for (const std::string& module : modules) seen += fmt::format(" '{}'", module);
  for (const std::string& op : ops) seen += fmt::format(" op '{}'", op);
  SCOPED_TRACE("recorded:" + seen);
  // w1's output (8 x 96 floats) is allocated inside w1's forward.
  bool w1_output = false;
  for (const memory::Event& event : snapshot.events) {
    w1_output |= event.action == memory::Action::alloc && event.module == "layers.0.feed_forward.w1" &&
                 event.bytes == 8 * 96 * 4;
  }
  EXPECT_TRUE(w1_output);
  EXPECT_TRUE(modules.count("layers.0.feed_forward.w2"));
  EXPECT_TRUE(modules.count("layers.0.feed_forward"));  // swiglu, in the block's own forward
  // Gradients of w1's weight (96 x 32) come from w1's backward node.
  bool w1_weight_grad = false;
  for (const memory::Event& event : snapshot.events) {
    w1_weight_grad |= event.action == memory::Action::alloc && event.module == "layers.0.feed_forward.w1" &&
                      event.bytes == 96 * 32 * 4 && event.time_us > snapshot.events.front().time_us;
  }
  EXPECT_TRUE(w1_weight_grad);
  // No op name is asserted: ops::Op names only the kernel call, and these ops
  // allocate their outputs before it (op attribution: core memory_recorder_test).

  // The page names the modules alive at the peak.
  const std::string html = memory::snapshot_html(snapshot);
  EXPECT_NE(html.find("layers.0.feed_forward.w"), std::string::npos);
}

}  // namespace memory_attribution_test
}  // namespace titan
