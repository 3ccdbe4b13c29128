// PyTorch's own file formats, written by the PyTorch on this machine
// (tests/reference/torch_files.py): plain pickles of every protocol read by
// titan's restricted unpickler; torch.save archives read tensor for tensor
// equal to a safetensors twin; hostile files (a __reduce__ calling
// os.system, an unknown class, truncated streams) refused naming the file,
// with nothing run; Hugging Face folders of pytorch_model*.bin and Meta's
// consolidated.NN.pth folders converted to the same weights (and greedy
// tokens) as the safetensors folder they were made from.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "data/peer_support.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/pickle_reader.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/checkpoint/torch_archive.h"
#include "titan/models/generate.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_index.h"
#include "titan/models/model_spec.h"
#include "titan/train/job_model_config.h"
#include "titan/train/meta_convert.h"
#include "titan/train/model_export.h"

namespace titan {
namespace torch_files_test {

namespace fs = std::filesystem;
using checkpoint::PickleKind;
using checkpoint::PickleValue;
using data::testing::read_bytes;
using data::testing::run_command;
using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;
using data::testing::write_bytes;

void run_reference(const std::string& arguments) {
  const auto run =
      run_command(fmt::format("{} {}/torch_files.py {}", TITAN_PYTHON, TITAN_REFERENCE_SCRIPTS_DIR, arguments));
  ASSERT_EQ(run.exit_code, 0) << run.output;
}

// The fixtures torch_files.py writes, made once for the suite.
const fs::path& fixtures() {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    run_reference("archives " + shell_quote(dir.path().string()));
    made = true;
  }
  return dir.path();
}

bool accept_nothing(const std::string&, const std::string&) { return false; }

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

template <typename F>
std::string error_of(F&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(Pickle, EveryProtocolReadsPythonsValues) {
  for (int protocol = 0; protocol <= 5; ++protocol) {
    SCOPED_TRACE(protocol);
    const fs::path path = fixtures() / fmt::format("values_p{}.pkl", protocol);
    const std::string bytes = read_bytes(path);
    const checkpoint::Pickle pickle = checkpoint::read_pickle(bytes, accept_nothing, path.string());
    const PickleValue& root = *pickle.root;
    ASSERT_EQ(root.kind, PickleKind::dict);
    EXPECT_EQ(root.find("int")->integer, 7);
    EXPECT_EQ(root.find("neg")->integer, -300);
    EXPECT_EQ(root.find("big")->integer, int64_t{1} << 40);
    EXPECT_EQ(root.find("float")->floating, 1.5);
    EXPECT_EQ(root.find("text")->text, "hello");
    EXPECT_EQ(root.find("none")->kind, PickleKind::none);
    EXPECT_TRUE(root.find("true")->boolean);
    EXPECT_EQ(root.find("false")->kind, PickleKind::boolean);
    EXPECT_FALSE(root.find("false")->boolean);
    const PickleValue* list = root.find("list");
    ASSERT_EQ(list->kind, PickleKind::list);
    ASSERT_EQ(list->items.size(), 3u);
    EXPECT_EQ(list->items[2]->items.at(0)->integer, 3);
    const PickleValue* tuple = root.find("tuple");
    ASSERT_EQ(tuple->kind, PickleKind::tuple);
    EXPECT_EQ(tuple->items.at(1)->text, "a");
    EXPECT_EQ(root.find("nested")->find("a")->items.at(0)->floating, 0.25);
    const PickleValue* shared = root.find("shared");
    ASSERT_EQ(shared->items.size(), 2u);
    EXPECT_EQ(shared->items[0], shared->items[1]);  // the memo: one value, twice
    if (protocol >= 3) {
      EXPECT_EQ(root.find("bytes")->kind, PickleKind::bytes);
      EXPECT_EQ(root.find("bytes")->text, std::string("\x00\x01\xff", 3));
      EXPECT_EQ(root.find("unicode")->text, "h\xc3\xa9llo \xe4\xb8\x96");
    }
  }
}

TEST(Pickle, EveryTruncationIsAnErrorNamingTheSource) {
  const std::string bytes = read_bytes(fixtures() / "values_p4.pkl");
  for (size_t length = 0; length < bytes.size(); ++length) {
    const std::string message =
        error_of([&] { checkpoint::read_pickle(bytes.substr(0, length), accept_nothing, "cut.pkl"); });
    EXPECT_NE(message.find("cut.pkl"), std::string::npos) << length << ": " << message;
  }
}

TEST(Pickle, AReduceCallingOsSystemIsRefusedBeforeAnythingRuns) {
  const fs::path path = fixtures() / "calls_system.pkl";
  const std::string message =
      error_of([&] { checkpoint::read_pickle(read_bytes(path), accept_nothing, path.string()); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("posix.system"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(fixtures() / "PWNED"));
}

TEST(TorchArchive, TensorsEqualTheSafetensorsTwin) {
  const checkpoint::TorchArchive archive((fixtures() / "state.bin").string());
  const checkpoint::SafetensorsReader twin((fixtures() / "state.safetensors").string());
  const auto tensors = archive.state_dict_tensors();
  ASSERT_EQ(tensors.size(), twin.header().entries.size());
  for (const auto& [name, record] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(bitwise_equal(archive.read_record(record), twin.read(name)));
  }
  // The views: a transpose is strided, the slice and the shared halves are byte ranges.
  const auto record = [&](const std::string& name) {
    for (const auto& [n, r] : tensors) {
      if (n == name) return r;
    }
    ADD_FAILURE() << name;
    return checkpoint::TorchTensorRecord{};
  };
  EXPECT_FALSE(record("transposed").contiguous());
  EXPECT_TRUE(record("slice").contiguous());
  EXPECT_EQ(record("slice").storage_offset, 16);
  EXPECT_EQ(record("shared_a").storage_key, record("shared_b").storage_key);
  EXPECT_EQ(record("bf16").dtype, DType::bf16);
  EXPECT_EQ(record("i64").dtype, DType::i64);
  // As a safetensors header, strided tensors are named and refused.
  const std::string message = error_of([&] { archive.as_safetensors_header(); });
  EXPECT_NE(message.find("'transposed'"), std::string::npos) << message;
}

TEST(TorchArchive, NestedStateDictsFlattenWithDots) {
  const checkpoint::TorchArchive archive((fixtures() / "nested.pt").string());
  std::vector<std::string> names;
  for (const auto& [name, record] : archive.state_dict_tensors()) names.push_back(name);
  EXPECT_NE(std::find(names.begin(), names.end(), "model.f32"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "optimizer.state.0.exp_avg"), names.end());
  EXPECT_EQ(names.size(), 12u);  // 11 model tensors and one optimizer state; "step" and "name" are not tensors
  EXPECT_EQ(archive.root().find("step")->integer, 12);
}

TEST(TorchArchive, HostileFilesAreRefusedNamingTheFile) {
  const struct {
    const char* file;
    const char* global;
  } cases[] = {{"calls_system.pt", "posix.system"}, {"unknown_class.pt", "argparse.Namespace"}};
  for (const auto& c : cases) {
    const fs::path path = fixtures() / c.file;
    const std::string message = error_of([&] { checkpoint::TorchArchive archive(path.string()); });
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(c.global), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(fixtures() / "PWNED"));
  // Truncated archives: the directory (at the end) is gone.
  TempDir dir;
  const std::string whole = read_bytes(fixtures() / "state.bin");
  for (const size_t length : {size_t{0}, size_t{10}, whole.size() / 2, whole.size() - 1}) {
    write_bytes(dir / "cut.bin", whole.substr(0, length));
    const std::string message = error_of([&] { checkpoint::TorchArchive archive((dir / "cut.bin").string()); });
    EXPECT_NE(message.find("cut.bin"), std::string::npos) << length << ": " << message;
  }
}

// A two-layer llama with grouped heads, random weights, as an HF safetensors folder.
struct LlamaFolders {
  TempDir dir;
  models::DecoderConfig config;
  LlamaFolders() {
    config = models::model_config("llama3", "debugmodel", 256);
    config.layers.resize(2);
    config.edit_layers([](nn::TransformerBlockConfig& layer) { layer.attention.n_kv_heads = 4; });
    config.max_seq_len = 64;
    auto model = config.build();
    Generator generator(5);
    model->init_weights(generator);
    write_bytes(dir / "config.json",
                models::hf_config_json(models::hf_config_from_decoder("llama3", config, DType::f32)));
    train::JobConfig job;
    job.model.hf_config = (dir / "config.json").string();
    job.model.vocab_size = config.vocab_size;
    train::resolve_model_config(job, job.model.vocab_size);
    train::export_model(*model, job, (dir / "export").string(), DType::f32);
    convert("--from titan " + q("export") + " --to hf " + q("hf"));
    convert("--from hf " + q("hf") + " --to titan " + q("from_safetensors"));
  }
  std::string q(const char* name) const { return shell_quote((dir / name).string()); }
  void convert(const std::string& arguments) const {
    const auto run = run_titan("convert " + arguments);
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  // The converted export's tensors equal those from the safetensors folder, and so do greedy tokens.
  void expect_same_model(const char* export_name) const {
    const checkpoint::SafetensorsReader expected((dir / "from_safetensors" / "model.safetensors").string());
    const checkpoint::SafetensorsReader actual((dir / export_name / "model.safetensors").string());
    ASSERT_EQ(actual.header().entries.size(), expected.header().entries.size());
    for (const auto& entry : expected.header().entries) {
      EXPECT_TRUE(bitwise_equal(actual.read(entry.name), expected.read(entry.name))) << entry.name;
    }
    autograd::NoGradGuard no_grad;
    const train::ExportedModel a = train::load_exported_model((dir / "from_safetensors").string());
    const train::ExportedModel b = train::load_exported_model((dir / export_name).string());
    models::SamplingOptions greedy;
    greedy.max_new_tokens = 12;
    const std::vector<int64_t> prompt{3, 14, 15, 92, 65};
    EXPECT_EQ(models::generate(*b.model, prompt, greedy), models::generate(*a.model, prompt, greedy));
  }
};

TEST(TorchFolders, PytorchModelBinFoldersConvertToTheSameModel) {
  LlamaFolders folders;
  run_reference("bin " + folders.q("hf") + " " + folders.q("bin1") + " 1");
  run_reference("bin " + folders.q("hf") + " " + folders.q("bin3") + " 3");
  EXPECT_TRUE(fs::exists(folders.dir / "bin3" / models::kHfTorchIndexFile));
  folders.convert("--from pth " + folders.q("bin1") + " --to titan " + folders.q("from_bin1"));
  folders.convert("--from hf " + folders.q("bin3") + " --to titan " + folders.q("from_bin3"));
  folders.expect_same_model("from_bin1");
  folders.expect_same_model("from_bin3");
  // --from pth insists on .bin files.
  const auto wrong = run_titan("convert --from pth " + folders.q("hf") + " --to titan " + folders.q("x"));
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.output.find("pytorch_model.bin"), std::string::npos) << wrong.output;
}

TEST(TorchFolders, MetaConsolidatedShardsConvertToTheSameModel) {
  LlamaFolders folders;
  run_reference("meta " + folders.q("hf") + " " + folders.q("meta1") + " 1");
  run_reference("meta " + folders.q("hf") + " " + folders.q("meta2") + " 2");
  folders.convert("--from meta " + folders.q("meta1") + " --to titan " + folders.q("from_meta1"));
  folders.convert("--from meta " + folders.q("meta2") + " --to titan " + folders.q("from_meta2"));
  folders.expect_same_model("from_meta1");
  folders.expect_same_model("from_meta2");
  // A missing shard is named.
  fs::remove(folders.dir / "meta2" / "consolidated.00.pth");
  const auto missing = run_titan("convert --from meta " + folders.q("meta2") + " --to titan " + folders.q("x"));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("consolidated"), std::string::npos) << missing.output;
  EXPECT_FALSE(fs::exists(folders.dir / "x"));
}

TEST(MetaParams, ScaledRopeAndTiedOutputMapToHfKeys) {
  train::MetaShapes shapes;
  shapes.ffn_hidden = 512;
  shapes.vocab_size = 1000;
  shapes.has_output = false;
  const std::string json = train::meta_params_to_hf_config(
      R"({"dim": 128, "n_layers": 2, "n_heads": 8, "n_kv_heads": 2, "vocab_size": -1, "norm_eps": 1e-06,
          "rope_theta": 500000.0, "use_scaled_rope": true})",
      shapes, "params.json");
  EXPECT_NE(json.find("\"tie_word_embeddings\": true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"vocab_size\": 1000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rope_type\": \"llama3\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_key_value_heads\": 2"), std::string::npos) << json;
  const std::string message = error_of([&] { train::meta_params_to_hf_config(R"({"dim": 128})", shapes, "p.json"); });
  EXPECT_NE(message.find("p.json"), std::string::npos) << message;
  EXPECT_NE(message.find("n_heads"), std::string::npos) << message;
}

}  // namespace torch_files_test
}  // namespace titan
