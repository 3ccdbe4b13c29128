// The memory recorder: events match a scripted sequence of tensor allocations
// exactly, the peak and the blocks alive at it match a hand count, the ring
// keeps the newest events, op and module attribution follows the trace scopes,
// the JSON and HTML written for a snapshot are complete and self-contained,
// and a failed allocation leaves a snapshot naming the request.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "titan/core/error.h"
#include "titan/core/memory_recorder.h"
#include "titan/core/memory_snapshot_writer.h"
#include "titan/core/tensor.h"
#include "titan/core/trace_context.h"

namespace titan {
namespace memory_recorder_test {

namespace fs = std::filesystem;
using memory::Action;

uintptr_t address_of(const Tensor& tensor) { return reinterpret_cast<uintptr_t>(tensor.data_ptr()); }

int64_t cpu_live_bytes() { return memory_stats(DeviceType::cpu).live_bytes; }

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fresh folder under the system temp dir, removed at the end of the test.
class TempFolder {
 public:
  TempFolder() {
    path_ = fs::temp_directory_path() / fmt::format("titan_memory_test_{}_{}", getpid(),
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Expected {
  Action action;
  uintptr_t address;
  size_t bytes;
  int64_t live;
};

void expect_events(const memory::Snapshot& snapshot, const std::vector<Expected>& expected) {
  ASSERT_EQ(snapshot.events.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(fmt::format("event {}", i));
    const memory::Event& event = snapshot.events[i];
    EXPECT_EQ(event.action, expected[i].action);
    EXPECT_EQ(event.address, expected[i].address);
    EXPECT_EQ(event.bytes, expected[i].bytes);
    EXPECT_EQ(event.live_bytes, expected[i].live);
    EXPECT_EQ(event.device, Device::cpu());
    EXPECT_EQ(event.thread, snapshot.events[0].thread);
    if (i > 0) {
      EXPECT_GE(event.time_us, snapshot.events[i - 1].time_us);
    }
  }
}

TEST(MemoryRecorder, EventsMatchAScriptedSequence) {
  const int64_t base = cpu_live_bytes();
  memory::start(1000);
  EXPECT_TRUE(memory::recording());
  std::optional<Tensor> a = Tensor::empty({1000});             // 4000 bytes
  std::optional<Tensor> b = Tensor::empty({250}, DType::i64);  // 2000 bytes
  const uintptr_t address_a = address_of(*a), address_b = address_of(*b);
  a.reset();
  std::optional<Tensor> c = Tensor::empty({4000}, DType::bf16);  // 8000 bytes
  const uintptr_t address_c = address_of(*c);
  b.reset();
  Tensor d = Tensor::empty({0});  // no bytes: no event
  memory::Snapshot during = memory::take();
  c.reset();
  memory::stop();
  EXPECT_FALSE(memory::recording());
  Tensor after = Tensor::empty({16});  // not recorded
  const memory::Snapshot snapshot = memory::take();

  EXPECT_TRUE(during.recording);
  EXPECT_FALSE(snapshot.recording);
  EXPECT_EQ(snapshot.dropped_events, 0u);
  expect_events(snapshot, {{Action::alloc, address_a, 4000, base + 4000},
                           {Action::alloc, address_b, 2000, base + 6000},
                           {Action::free, address_a, 4000, base + 2000},
                           {Action::alloc, address_c, 8000, base + 10000},
                           {Action::free, address_b, 2000, base + 8000},
                           {Action::free, address_c, 8000, base}});
  ASSERT_EQ(during.live_blocks.size(), 1u);
  EXPECT_EQ(during.live_blocks[0].address, address_c);
  EXPECT_TRUE(snapshot.live_blocks.empty());

  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(snapshot.devices.size(), 1u);
  EXPECT_EQ(cpu->start_live_bytes, base);
  EXPECT_EQ(cpu->live_bytes, base);
  EXPECT_EQ(cpu->peak_bytes, base + 10000);
  EXPECT_EQ(cpu->peak_event, 3);
  EXPECT_EQ(cpu->peak_time_us, snapshot.events[3].time_us);
  EXPECT_EQ(cpu->peak_untracked_bytes, base);
  ASSERT_EQ(cpu->peak_blocks.size(), 2u);
  EXPECT_EQ(cpu->peak_blocks[0].address, address_c);  // largest first
  EXPECT_EQ(cpu->peak_blocks[0].bytes, 8000u);
  EXPECT_EQ(cpu->peak_blocks[1].address, address_b);
  EXPECT_EQ(cpu->peak_blocks[1].bytes, 2000u);
  EXPECT_EQ(cpu->peak_blocks[1].time_us, snapshot.events[1].time_us);
  EXPECT_LE(snapshot.start_time_us, snapshot.events.front().time_us);
  EXPECT_GE(snapshot.end_time_us, snapshot.events.back().time_us);
}

TEST(MemoryRecorder, PeakAndItsBlocksMatchAHandCount) {
  // A random script of allocations and frees (addresses get reused), replayed
  // by hand to find the first peak and what was alive then.
  std::mt19937 random(7);
  std::vector<Tensor> alive;
  std::map<uintptr_t, size_t> alive_now, alive_at_peak;
  const int64_t base = cpu_live_bytes();
  int64_t live = base, peak = base;
  int64_t peak_step = -1, step = 0;
  memory::RecordingScope scope(100000);
  for (int i = 0; i < 400; ++i, ++step) {
    if (alive.empty() || random() % 3 != 0) {
      const int64_t numel = 1 + static_cast<int64_t>(random() % 5000);
      alive.push_back(Tensor::empty({numel}));
      alive_now[address_of(alive.back())] = static_cast<size_t>(numel) * 4;
      live += numel * 4;
    } else {
      const size_t index = random() % alive.size();
      alive_now.erase(address_of(alive[index]));
      live -= alive[index].numel() * 4;
      alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(index));
    }
    if (live > peak) {
      peak = live;
      peak_step = step;
      alive_at_peak = alive_now;
    }
  }
  alive.clear();
  const memory::Snapshot snapshot = memory::take();
  ASSERT_EQ(snapshot.events.size(), 400u + alive_now.size());
  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->peak_bytes, peak);
  EXPECT_EQ(cpu->peak_event, peak_step);
  EXPECT_EQ(cpu->peak_untracked_bytes, base);
  std::map<uintptr_t, size_t> recorded;
  for (const memory::Block& block : cpu->peak_blocks) recorded[block.address] = block.bytes;
  EXPECT_EQ(recorded, alive_at_peak);
  for (size_t i = 1; i < cpu->peak_blocks.size(); ++i) {
    EXPECT_GE(cpu->peak_blocks[i - 1].bytes, cpu->peak_blocks[i].bytes);
  }
  EXPECT_EQ(cpu->live_bytes, base);
}

TEST(MemoryRecorder, TheRingKeepsTheNewestEventsAndCountsTheDropped) {
  const int64_t base = cpu_live_bytes();
  memory::RecordingScope scope(4);
  std::vector<Tensor> tensors;
  std::vector<uintptr_t> addresses;
  for (int i = 1; i <= 10; ++i) {
    tensors.push_back(Tensor::empty({i * 100}));
    addresses.push_back(address_of(tensors.back()));
  }
  tensors.erase(tensors.begin());  // frees the first (400 bytes)
  const memory::Snapshot snapshot = memory::take();
  EXPECT_EQ(snapshot.max_events, 4u);
  EXPECT_EQ(snapshot.dropped_events, 7u);
  // Sum of i * 400 for i = 1..10 is 22000; the oldest kept is the 8th alloc.
  expect_events(snapshot, {{Action::alloc, addresses[7], 3200, base + 14400},
                           {Action::alloc, addresses[8], 3600, base + 18000},
                           {Action::alloc, addresses[9], 4000, base + 22000},
                           {Action::free, addresses[0], 400, base + 21600}});
  // Blocks allocated in the dropped part are still known.
  EXPECT_EQ(snapshot.live_blocks.size(), 9u);
  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->start_live_bytes, base + 11200);
  EXPECT_EQ(cpu->peak_bytes, base + 22000);
  EXPECT_EQ(cpu->peak_event, 2);
  EXPECT_EQ(cpu->peak_blocks.size(), 10u);
  EXPECT_EQ(cpu->peak_untracked_bytes, base);
}

TEST(MemoryRecorder, AttributesEachAllocationToItsOpAndModule) {
  std::optional<Tensor> in_op, in_module, outside;
  memory::RecordingScope scope(100);
  {
    // The module's name dies before the snapshot is taken: it must be copied.
    auto fqn = std::make_unique<std::string>("layers.0.feed_forward.w1");
    trace::ModuleScope module(fqn.get());
    {
      trace::OpScope op("gemm");
      in_op = Tensor::empty({64});
    }
    in_module = Tensor::empty({32});
    fqn->assign("overwritten");
  }
  outside = Tensor::empty({16});
  in_module.reset();  // freed outside every scope
  const memory::Snapshot snapshot = memory::take();
  ASSERT_EQ(snapshot.events.size(), 4u);
  EXPECT_EQ(snapshot.events[0].op, "gemm");
  EXPECT_EQ(snapshot.events[0].module, "layers.0.feed_forward.w1");
  EXPECT_EQ(snapshot.events[1].op, "");
  EXPECT_EQ(snapshot.events[1].module, "layers.0.feed_forward.w1");
  EXPECT_EQ(snapshot.events[2].op, "");
  EXPECT_EQ(snapshot.events[2].module, "");
  EXPECT_EQ(snapshot.events[3].action, Action::free);
  EXPECT_EQ(snapshot.events[3].module, "");
  // The blocks keep where they were allocated, not where they were freed.
  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  ASSERT_EQ(cpu->peak_blocks.size(), 3u);
  EXPECT_EQ(cpu->peak_blocks[0].op, "gemm");
  EXPECT_EQ(cpu->peak_blocks[0].module, "layers.0.feed_forward.w1");
  EXPECT_EQ(cpu->peak_blocks[1].op, "");
  EXPECT_EQ(cpu->peak_blocks[1].module, "layers.0.feed_forward.w1");
  ASSERT_EQ(snapshot.live_blocks.size(), 2u);
  EXPECT_EQ(snapshot.live_blocks[0].op, "gemm");
}

TEST(MemoryRecorder, ThreadsRecordConcurrently) {
  const int64_t base = cpu_live_bytes();
  memory::RecordingScope scope(100000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) {
        Tensor a = Tensor::empty({128});
        Tensor b = Tensor::empty({64});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const memory::Snapshot snapshot = memory::take();
  ASSERT_EQ(snapshot.events.size(), 4u * 200 * 4);
  std::map<int, int> per_thread;
  int64_t live = base;
  for (const memory::Event& event : snapshot.events) {
    ++per_thread[event.thread];
    live += event.action == Action::alloc ? static_cast<int64_t>(event.bytes) : -static_cast<int64_t>(event.bytes);
    EXPECT_EQ(event.live_bytes, live);
  }
  EXPECT_EQ(per_thread.size(), 4u);
  for (const auto& [thread, count] : per_thread) EXPECT_EQ(count, 800);
  EXPECT_EQ(snapshot.timeline(DeviceType::cpu)->live_bytes, base);
  EXPECT_TRUE(snapshot.live_blocks.empty());
}

// A small step: parameters of two modules alive throughout, activations that
// come and go; the biggest activation is "layers.1.w2"'s.
memory::Snapshot record_a_small_step() {
  static const std::string w1 = "layers.0.w1", w2 = "layers.1.w2";
  memory::RecordingScope scope(1000);
  Tensor p1, p2;
  {
    trace::ModuleScope module(&w1);
    trace::OpScope op("empty");
    p1 = Tensor::empty({256, 64});
  }
  {
    trace::ModuleScope module(&w2);
    p2 = Tensor::empty({64, 256});
  }
  std::vector<Tensor> saved;
  for (const std::string* fqn : {&w1, &w2}) {
    trace::ModuleScope module(fqn);
    trace::OpScope op("gemm");
    saved.push_back(Tensor::empty({fqn == &w2 ? int64_t{4096} : int64_t{1024}, 16}));
    Tensor scratch = Tensor::empty({100});
  }
  saved.clear();
  return memory::take();
}

TEST(MemorySnapshotWriter, JsonRoundTripsAndSumsToThePeak) {
  TempFolder folder;
  const memory::Snapshot snapshot = record_a_small_step();
  memory::write_memory_snapshot(snapshot, (folder.path() / "sub").string(), "rank0");
  ASSERT_TRUE(fs::exists(folder.path() / "sub" / "rank0.html"));
  const nlohmann::json json = nlohmann::json::parse(read_text(folder.path() / "sub" / "rank0.json"));
  EXPECT_EQ(json["format"], "titan.memory_snapshot");
  EXPECT_EQ(json["version"], 1);
  EXPECT_EQ(json["dropped_events"], 0);
  ASSERT_EQ(json["events"].size(), snapshot.events.size());
  for (size_t i = 0; i < snapshot.events.size(); ++i) {
    EXPECT_EQ(json["events"][i]["bytes"], snapshot.events[i].bytes);
    EXPECT_EQ(json["events"][i]["live_bytes"], snapshot.events[i].live_bytes);
    EXPECT_EQ(json["events"][i]["action"], memory::action_name(snapshot.events[i].action));
    EXPECT_EQ(json["events"][i]["module"], snapshot.events[i].module);
    EXPECT_EQ(json["events"][i]["address"], fmt::format("{:#x}", snapshot.events[i].address));
  }
  ASSERT_EQ(json["devices"].size(), 1u);
  const nlohmann::json& cpu = json["devices"][0];
  EXPECT_EQ(cpu["device"], "cpu");
  const nlohmann::json& peak = cpu["peak"];
  int64_t block_sum = 0;
  for (const nlohmann::json& block : peak["blocks"]) block_sum += block["bytes"].get<int64_t>();
  EXPECT_EQ(block_sum + peak["untracked_bytes"].get<int64_t>(), peak["bytes"].get<int64_t>());
  // The peak is the event it points at.
  const int64_t peak_event = peak["event"];
  ASSERT_GE(peak_event, 0);
  EXPECT_EQ(json["events"][peak_event]["live_bytes"], peak["bytes"]);
  EXPECT_EQ(json["events"][peak_event]["time_us"], peak["time_us"]);
  // Blocks at the peak: both parameters and both saved activations plus the
  // w2 scratch (the peak is w2's scratch allocation).
  EXPECT_EQ(block_sum, (256 * 64 + 64 * 256 + 1024 * 16 + 4096 * 16 + 100) * 4);
  int64_t module_sum = 0;
  for (const nlohmann::json& total : peak["by_module"]) module_sum += total["bytes"].get<int64_t>();
  EXPECT_EQ(module_sum, block_sum);
  EXPECT_EQ(peak["by_module"][0]["module"], "layers.1.w2");
  EXPECT_EQ(peak["by_module"][0]["bytes"], (64 * 256 + 4096 * 16 + 100) * 4);
  EXPECT_EQ(peak["by_module"][0]["blocks"], 3);
  EXPECT_EQ(peak["by_op"][0]["op"], "gemm");
  EXPECT_TRUE(json["failure"].is_null());
  EXPECT_EQ(json["allocator_stats"][0]["device"], "cpu");
  EXPECT_EQ(json["live_blocks"].size(), 2u);
}

TEST(MemorySnapshotWriter, HtmlIsSelfContainedAndNamesTheLargestBlock) {
  const memory::Snapshot snapshot = record_a_small_step();
  const std::string html = memory::snapshot_html(snapshot);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url("), std::string::npos);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<path class=\"curve\" d=\"M"), std::string::npos);
  EXPECT_NE(html.find("circle class=\"peak\""), std::string::npos);
  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  ASSERT_NE(cpu, nullptr);
  ASSERT_FALSE(cpu->peak_blocks.empty());
  EXPECT_EQ(cpu->peak_blocks[0].module, "layers.1.w2");
  EXPECT_NE(html.find("<td>layers.1.w2</td>"), std::string::npos);
  EXPECT_NE(html.find(fmt::format("{}", cpu->peak_blocks[0].bytes)), std::string::npos);
}

TEST(MemorySnapshotWriter, EscapesNamesAndThinsLongRecordings) {
  static const std::string odd = "<script>&\"'";
  memory::RecordingScope scope(100000);
  {
    trace::ModuleScope module(&odd);
    for (int i = 0; i < 20000; ++i) Tensor t = Tensor::empty({1 + i % 7});
    Tensor kept = Tensor::empty({10});
    const std::string html = memory::snapshot_html(memory::take());
    EXPECT_EQ(html.find("<script>"), std::string::npos);
    EXPECT_NE(html.find("&lt;script&gt;&amp;&quot;&#39;"), std::string::npos);
    // 40000 events, but the curve has a bounded number of columns.
    EXPECT_LT(html.size(), size_t{200000});
  }
}

TEST(MemorySnapshotWriter, AFailedWriteNamesTheFile) {
  TempFolder folder;
  const fs::path blocker = folder.path() / "not_a_folder";
  std::ofstream(blocker) << "x";
  try {
    memory::write_memory_snapshot(memory::Snapshot{}, blocker.string(), "rank0");
    FAIL() << "expected titan::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(blocker.string()), std::string::npos) << e.what();
  }
}

TEST(MemoryRecorder, OutOfMemoryWritesASnapshotNamingTheRequest) {
  TempFolder folder;
  static const std::string fqn = "layers.3.attention";
  const size_t request = (size_t{1} << 50) * 4;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer ends the process on an impossible request instead of failing it.
  GTEST_SKIP() << "AddressSanitizer aborts on a huge allocation rather than failing it";
#endif
  memory::set_out_of_memory_dump(folder.path().string(), "rank1");
  Tensor kept;
  {
    memory::RecordingScope scope(100);
    kept = Tensor::empty({1000});
    trace::ModuleScope module(&fqn);
    trace::OpScope op("matmul");
    EXPECT_THROW(Tensor::empty({int64_t{1} << 50}), Error);
    const memory::Snapshot snapshot = memory::take();
    ASSERT_EQ(snapshot.events.size(), 2u);
    EXPECT_EQ(snapshot.events[1].action, Action::oom);
    EXPECT_EQ(snapshot.events[1].bytes, request);
    EXPECT_EQ(snapshot.events[1].live_bytes, snapshot.events[0].live_bytes);
  }
  const fs::path json_path = folder.path() / "rank1_oom.json";
  ASSERT_TRUE(fs::exists(json_path));
  ASSERT_TRUE(fs::exists(folder.path() / "rank1_oom.html"));
  const nlohmann::json json = nlohmann::json::parse(read_text(json_path));
  ASSERT_TRUE(json["failure"].is_object());
  EXPECT_EQ(json["failure"]["bytes"], request);
  EXPECT_EQ(json["failure"]["op"], "matmul");
  EXPECT_EQ(json["failure"]["module"], fqn);
  EXPECT_EQ(json["failure"]["device"], "cpu");
  EXPECT_NE(json["failure"]["error"].get<std::string>().find("out of host memory"), std::string::npos);
  ASSERT_EQ(json["events"].size(), 2u);
  EXPECT_EQ(json["events"][1]["action"], "oom");
  EXPECT_EQ(json["live_blocks"].size(), 1u);
  const std::string html = read_text(folder.path() / "rank1_oom.html");
  EXPECT_NE(html.find("Out of memory"), std::string::npos);
  EXPECT_NE(html.find(fqn), std::string::npos);

  // Without a recording the dump still names the request.
  fs::remove(json_path);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 50}), Error);
  ASSERT_TRUE(fs::exists(json_path));
  const nlohmann::json bare = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(bare["failure"]["bytes"], request);
  EXPECT_TRUE(bare["events"].empty());

  // A dump that cannot be written warns and lets the allocation error through.
  const fs::path blocker = folder.path() / "file";
  std::ofstream(blocker) << "x";
  memory::set_out_of_memory_dump(blocker.string(), "rank1");
  EXPECT_THROW(Tensor::empty({int64_t{1} << 50}), Error);
  memory::set_out_of_memory_dump("", "");
  fs::remove(json_path);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 50}), Error);
  EXPECT_FALSE(fs::exists(json_path));
}

TEST(MemoryRecorder, FreedAndReallocatedStorageIsRecorded) {
  Tensor t = Tensor::empty({256});
  const int64_t base = cpu_live_bytes();
  memory::RecordingScope scope(100);
  t.storage()->release_memory();  // allocated before recording: no known origin
  t.storage()->reallocate();
  const memory::Snapshot snapshot = memory::take();
  ASSERT_EQ(snapshot.events.size(), 2u);
  EXPECT_EQ(snapshot.events[0].action, Action::free);
  EXPECT_EQ(snapshot.events[0].live_bytes, base - 1024);
  EXPECT_EQ(snapshot.events[1].action, Action::alloc);
  EXPECT_EQ(snapshot.events[1].live_bytes, base);
  const memory::DeviceTimeline* cpu = snapshot.timeline(DeviceType::cpu);
  EXPECT_EQ(cpu->peak_event, -1);  // the start is as high as it gets
  EXPECT_EQ(cpu->peak_bytes, base);
  EXPECT_TRUE(cpu->peak_blocks.empty());
  EXPECT_EQ(cpu->peak_untracked_bytes, base);
}

}  // namespace memory_recorder_test
}  // namespace titan
