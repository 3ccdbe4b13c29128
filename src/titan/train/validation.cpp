#include "titan/train/validation.h"

#include "titan/autograd/grad_mode.h"
#include "titan/core/profiler.h"

namespace titan::train {

using comm::MeshDim;

double validation_loss(const ValidationSection& section, data::DataLoader& loader, const StepInputsBuilder& inputs,
                       JobModel& job, const comm::DeviceMesh& mesh, Device device) {
  const profiler::Span span("phase", "validation");
  autograd::NoGradGuard no_grad;
  data::ValidationIterator batches = loader.validation();
  double weighted = 0.0;
  int64_t tokens = 0;
  data::Batch loaded;
  for (int64_t i = 0; i < section.steps && batches.next(loaded); ++i) {
    const data::Batch batch = inputs.local_batch(loaded);
    // Under pipeline parallelism the last stage's rank has the loss (and counts the tokens).
    const Tensor loss = job.pipeline ? job.pipeline->evaluate(inputs.model_inputs(batch), batch.labels.to(device))
                                     : job.model->loss(inputs.model_inputs(batch), batch.labels.to(device));
    if (!loss.defined()) continue;
    // The loss is a mean over this batch's counted labels: weight it by their number.
    weighted += loss.item() * static_cast<double>(batch.label_tokens);
    tokens += batch.label_tokens;
  }
  // Every rank's token-weighted sum and token count, summed over the data-, context-parallel (and pipeline) ranks.
  Tensor totals =
      Tensor::from_vector(std::vector<float>{static_cast<float>(weighted), static_cast<float>(tokens)}, {2});
  for (MeshDim dim : {MeshDim::pp, MeshDim::dp_cp}) {
    if (mesh.size(dim) > 1) mesh.group(dim)->all_reduce(totals, comm::ReduceOp::sum)->wait();
  }
  const std::vector<float> summed = totals.to_floats();
  TITAN_CHECK(summed[1] > 0, "validation: the held-out split is empty (raise validation.split?)");
  return summed[0] / summed[1];
}

}  // namespace titan::train
