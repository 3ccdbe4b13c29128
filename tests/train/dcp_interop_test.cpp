// PyTorch Distributed Checkpoint (DCP) interop. The PyTorch side is
// tests/reference/dcp_reference.py: stand-ins for DCP's pickled classes under
// their real module paths (this machine's PyTorch 1.13 predates
// torch.distributed.checkpoint) and the real torch.save / torch.load for the
// tensor items. Checks: tensors titan writes load in PyTorch bit for bit;
// folders PyTorch writes (two ranks' shards, TorchTitan's non-tensor items)
// read in titan whole and by box; torch.save files titan writes load in
// torch.load; hostile .metadata files are refused naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "data/peer_support.h"
#include "support/expect_error.h"
#include "titan/checkpoint/dcp_folder.h"
#include "titan/checkpoint/pickle_writer.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/torch_archive.h"
#include "titan/checkpoint/torch_archive_writer.h"
#include "titan/models/model_spec.h"
#include "titan/ops/random.h"
#include "titan/train/dcp_convert.h"
#include "titan/train/job_model_config.h"
#include "titan/train/model_export.h"

namespace titan {
namespace dcp_interop_test {

namespace fs = std::filesystem;
using data::testing::run_command;
using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;

std::string reference(const std::string& arguments) {
  return std::string(TITAN_PYTHON) + " " + shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/dcp_reference.py") +
         " " + arguments;
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(shape_numel(shape)));
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(state >> 40) % 2000 - 1000) / 257.0f;
  }
  return Tensor::from_floats(values, shape, dtype);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

checkpoint::NamedTensors sample_tensors() {
  return {{"tok_embeddings.weight", random_tensor({7, 4}, DType::f32, 1)},
          {"layers.0.attention.wq.weight", random_tensor({4, 4}, DType::bf16, 2)},
          {"layers.0.attention_norm.weight", random_tensor({4}, DType::f16, 3)},
          {"optimizer.state.tok_embeddings.weight.step", random_tensor({}, DType::f32, 4)},
          {"empty", random_tensor({0, 3}, DType::f32, 5)}};
}

TEST(DcpInterop, PickleWriterIntegersRoundTripThroughPython) {
  checkpoint::PickleWriter pickle;
  pickle.mark();
  for (int64_t v : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{65535}, int64_t{65536}, int64_t{-1},
                    int64_t{2147483647}, int64_t{2147483648}, int64_t{-2147483649}, INT64_MAX, INT64_MIN})
    pickle.integer(v);
  pickle.floating(-1.5).text("héllo").bytes(std::string_view("\x00\x01", 2)).boolean(true).none().tuple();
  TempDir dir;
  const std::string bytes = pickle.finish();
  std::ofstream(dir / "p.pkl", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const auto run = run_command(std::string(TITAN_PYTHON) + " -c " +
                               shell_quote("import pickle,sys; print(repr(pickle.load(open(sys.argv[1],'rb'))))") +
                               " " + shell_quote((dir / "p.pkl").string()));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("(0, 255, 256, 65535, 65536, -1, 2147483647, 2147483648, -2147483649, "
                            "9223372036854775807, -9223372036854775808, -1.5, 'héllo', b'\\x00\\x01', True, None)"),
            std::string::npos)
      << run.output;
}

TEST(DcpInterop, TorchSaveFileLoadsInTorchLoad) {
  TempDir dir;
  const checkpoint::NamedTensors tensors = sample_tensors();
  checkpoint::write_torch_state_dict((dir / "state.pt").string(), tensors);
  // torch.load (weights_only: the restricted loader) and back through safetensors for the comparison.
  const auto run = run_command(
      std::string(TITAN_PYTHON) + " -c " +
      shell_quote("import sys, torch; sys.path.insert(0, sys.argv[3]); import safetensors_io; "
                  "sd = torch.load(sys.argv[1], weights_only=True); assert type(sd).__name__ == 'OrderedDict'; "
                  "safetensors_io.save(sys.argv[2], dict(sd))") +
      " " + shell_quote((dir / "state.pt").string()) + " " + shell_quote((dir / "back.safetensors").string()) + " " +
      shell_quote(TITAN_REFERENCE_SCRIPTS_DIR));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const checkpoint::SafetensorsReader back((dir / "back.safetensors").string());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(bitwise_equal(back.read(name), tensor)) << name;
  // And titan's own reader of torch.save files agrees.
  const checkpoint::TorchArchive archive((dir / "state.pt").string());
  const auto records = archive.state_dict_tensors();
  ASSERT_EQ(records.size(), tensors.size());
}

TEST(DcpInterop, FolderTitanWritesLoadsInPyTorch) {
  TempDir dir;
  const checkpoint::NamedTensors tensors = sample_tensors();
  checkpoint::write_dcp_folder((dir / "step-10").string(), checkpoint::sources_of(tensors));
  const auto run = run_command(reference("read " + shell_quote((dir / "step-10").string()) + " " +
                                         shell_quote((dir / "out.safetensors").string())));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("version 1.0.0"), std::string::npos) << run.output;
  const checkpoint::SafetensorsReader back((dir / "out.safetensors").string());
  ASSERT_EQ(back.header().entries.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(bitwise_equal(back.read(name), tensor)) << name;
  // titan reads its own folder too.
  const checkpoint::DcpFolderReader reader((dir / "step-10").string());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(bitwise_equal(reader.read(name), tensor)) << name;
}

TEST(DcpInterop, FolderPyTorchWritesReadsInTitan) {
  TempDir dir;
  checkpoint::NamedTensors tensors = sample_tensors();
  tensors.pop_back();  // FSDP never shards an empty tensor's rows over ranks differently; keep the fixture plain
  checkpoint::write_safetensors((dir / "in.safetensors").string(), tensors);
  const auto run = run_command(reference("write " + shell_quote((dir / "dcp").string()) + " " +
                                         shell_quote((dir / "in.safetensors").string()) + " 3 --torchtitan"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const checkpoint::DcpFolderReader reader((dir / "dcp").string());
  EXPECT_EQ(reader.metadata().version, "1.0.0");
  // Three ranks' shards of the embedding (rows 0-2, 3-5, 6).
  EXPECT_EQ(reader.tensor("tok_embeddings.weight").chunks.size(), 3u);
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(bitwise_equal(reader.read(name), tensor)) << name;
  // A box across two ranks' chunks: rows 2-4, columns 1-2.
  const Tensor box = reader.read_box("tok_embeddings.weight", {2, 1}, {3, 2});
  EXPECT_TRUE(bitwise_equal(box, tensors[0].second.slice(0, 2, 5).slice(1, 1, 3).contiguous()));
  // TorchTitan's non-tensor items are listed as objects.
  for (const char* key : {"train_state.step", "lr_scheduler.last_epoch", "dataloader.dp_rank_0"})
    EXPECT_EQ(reader.metadata().objects.count(key), 1u) << key;
}

TEST(DcpInterop, HostileMetadataIsRefusedNamingTheFile) {
  for (const std::string kind : {"os_system", "unknown_global", "truncated", "traversal"}) {
    TempDir dir;
    const auto run = run_command(reference("hostile " + shell_quote((dir / "dcp").string()) + " " + shell_quote(kind)));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const std::string metadata = (dir / "dcp" / ".metadata").string();
    std::vector<std::string> fragments{metadata};
    if (kind == "os_system") fragments.push_back("system");
    if (kind == "unknown_global") fragments.push_back("Gadget");
    if (kind == "traversal") fragments.push_back("../outside.distcp");
    testing::expect_error([&] { checkpoint::DcpFolderReader reader((dir / "dcp").string()); }, fragments);
    EXPECT_FALSE(fs::exists(dir / "dcp" / "hacked")) << kind;
  }
}

TEST(DcpInterop, StorageRangesAndChunksAreChecked) {
  TempDir dir;
  const checkpoint::NamedTensors tensors{{"w", random_tensor({2, 3}, DType::f32, 9)}};
  checkpoint::write_dcp_folder((dir / "dcp").string(), checkpoint::sources_of(tensors));
  // The data file cut short: the tensor's range now runs past its end.
  fs::resize_file(dir / "dcp" / "__0_0.distcp", 100);
  testing::expect_error([&] { checkpoint::DcpFolderReader reader((dir / "dcp").string()); },
                        {".metadata", "'w'", "__0_0.distcp", "100 bytes"});
  fs::remove(dir / "dcp" / "__0_0.distcp");
  testing::expect_error([&] { checkpoint::DcpFolderReader reader((dir / "dcp").string()); },
                        {".metadata", "'w'", "missing"});
}

// `titan convert` both ways on a debug Llama 3, and checkpoint.initial_load_path's
// loader: titan -> DCP loads in PyTorch equal; a PyTorch-written (two-rank,
// TorchTitan-keyed) DCP folder converts and loads equal to the weights it came from.
TEST(DcpInterop, ConvertAndInitialLoad) {
  TempDir dir;
  train::JobConfig job;
  job.model.name = "llama3";
  job.model.flavor = "debugmodel";
  job.model.vocab_size = 256;
  job.training.seq_len = 32;
  const models::DecoderConfig config = train::resolve_model_config(job, job.model.vocab_size);
  auto model = config.build();
  Generator generator(21);
  model->init_weights(generator);
  train::export_model(*model, job, (dir / "export").string(), DType::f32);
  const checkpoint::SafetensorsReader original((dir / "export" / "model.safetensors").string());
  auto expect_same = [&](const checkpoint::SafetensorsReader& other) {
    ASSERT_EQ(other.header().entries.size(), original.header().entries.size());
    for (const auto& entry : original.header().entries)
      EXPECT_TRUE(bitwise_equal(other.read(entry.name), original.read(entry.name))) << entry.name;
  };
  const auto q = [&](const char* name) { return shell_quote((dir / name).string()); };

  auto to_dcp = run_titan("convert --from titan " + q("export") + " --to dcp " + q("dcp"));
  ASSERT_EQ(to_dcp.exit_code, 0) << to_dcp.output;
  auto read = run_command(reference("read " + q("dcp") + " " + q("torch.safetensors")));
  ASSERT_EQ(read.exit_code, 0) << read.output;
  expect_same(checkpoint::SafetensorsReader((dir / "torch.safetensors").string()));
  // Back, the model named by the job.toml titan keeps beside the DCP files.
  auto back = run_titan("convert --from dcp " + q("dcp") + " --to titan " + q("back"));
  ASSERT_EQ(back.exit_code, 0) << back.output;
  expect_same(checkpoint::SafetensorsReader((dir / "back" / "model.safetensors").string()));

  // A folder PyTorch wrote over two ranks with TorchTitan's other items; the model from --job-config.
  auto fixture =
      run_command(reference("write " + q("torchtitan") + " " +
                            shell_quote((dir / "export" / "model.safetensors").string()) + " 2 --torchtitan"));
  ASSERT_EQ(fixture.exit_code, 0) << fixture.output;
  auto from_torch = run_titan("convert --from dcp " + q("torchtitan") + " --to titan " + q("from_torch") +
                              " --job-config " + shell_quote((dir / "export" / "job.toml").string()));
  ASSERT_EQ(from_torch.exit_code, 0) << from_torch.output;
  expect_same(checkpoint::SafetensorsReader((dir / "from_torch" / "model.safetensors").string()));
  // Without a model description the error says what to pass.
  auto no_config = run_titan("convert --from dcp " + q("torchtitan") + " --to titan " + q("nothing"));
  EXPECT_NE(no_config.exit_code, 0);
  EXPECT_NE(no_config.output.find("--job-config"), std::string::npos) << no_config.output;
  EXPECT_FALSE(fs::exists(dir / "nothing"));

  // checkpoint.initial_load_path's loader into a fresh model.
  auto fresh = config.build();
  train::load_dcp_weights_into(*fresh, (dir / "torchtitan").string());
  for (auto& [name, parameter] : fresh->named_parameters())
    EXPECT_TRUE(bitwise_equal(parameter->data, original.read(name))) << name;
  // A model of another size is refused, naming the file and tensor.
  train::JobConfig wider = job;
  wider.model.vocab_size = 512;
  auto other = train::resolve_model_config(wider, 512).build(Device::meta());
  other->materialize(Device::cpu());
  testing::expect_error([&] { train::load_dcp_weights_into(*other, (dir / "torchtitan").string()); },
                        {".metadata", "has shape", "this job's model expects"});
}

}  // namespace dcp_interop_test
}  // namespace titan
