// TensorBoard event files, written without TensorFlow or a protobuf library:
// each event is a tensorflow.Event protocol buffer encoded by hand, framed as
// a TFRecord (length, masked CRC-32C of the length, data, masked CRC-32C of
// the data). TensorBoard picks up every `events.out.tfevents.*` file in the
// folder, so each writer starts a new file and never touches older ones.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace titan::train {

class TensorBoardWriter {
 public:
  // Creates `folder` if needed and a new event file in it, whose first event
  // names the format version.
  explicit TensorBoardWriter(const std::string& folder);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event at `step` holding a scalar per number of `record` (a
  // metrics.jsonl record): tag = the key, or key/<i> for the elements of an
  // array of numbers. "step" itself, booleans, strings and objects are left
  // out. The event reaches the file before this returns.
  void add_scalars(int64_t step, const nlohmann::json& record);
  // One event at `step` holding an image (TensorBoard's Images tab): `png`,
  // the encoded file, of `height` x `width` RGB pixels, under `tag`.
  void add_image(int64_t step, const std::string& tag, int64_t height, int64_t width, std::string_view png);

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  int fd_ = -1;
};

}  // namespace titan::train
