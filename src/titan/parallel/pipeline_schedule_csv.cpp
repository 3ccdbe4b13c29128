// Reading and writing pipeline schedules as CSV (see the header for the format).
#include "titan/parallel/pipeline_schedule_csv.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "titan/core/error.h"

namespace titan::parallel::pipeline {

namespace {

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") + 1 - begin);
}

struct Cell {
  Action action;
  int line = 0;    // 1-based
  int column = 0;  // 1-based
};

// PyTorch's FSDP actions in a schedule ("1UNSHARD", "1RESHARD",
// "1REDUCE_GRAD", or "1R"; a micro-batch index optional): titan's FSDP
// gathers, frees and reduces on its own (prefetching the next block, as
// fsdp_reshard_after_forward says), so these are read and skipped.
bool is_fsdp_action(const std::string& text) {
  const auto digits = [&](size_t at) {
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    return at;
  };
  const size_t head = digits(0);
  if (head == 0) return false;
  for (const std::string_view type : {"UNSHARD", "RESHARD", "REDUCE_GRAD", "R"}) {
    if (text.compare(head, type.size(), type) == 0 && digits(head + type.size()) == text.size()) return true;
  }
  return false;
}

bool is_communication(ActionType type) { return !is_compute(type); }

}  // namespace

Schedule read_schedule_csv(const std::string& path, int stages, int microbatches) {
  std::ifstream file(path);
  TITAN_CHECK(file.good(), "cannot open pipeline schedule '{}'", path);
  std::stringstream text;
  text << file.rdbuf();
  return parse_schedule_csv(text.str(), path, stages, microbatches);
}

Schedule parse_schedule_csv(const std::string& text, const std::string& path, int stages, int microbatches) {
  std::vector<std::vector<Cell>> rows;
  std::istringstream file(text);
  std::string line;
  while (std::getline(file, line)) {
    const int line_number = static_cast<int>(rows.size()) + 1;
    std::vector<Cell>& row = rows.emplace_back();
    std::stringstream cells(line);
    std::string cell;
    for (int column = 1; std::getline(cells, cell, ','); ++column) {
      const std::string action = trimmed(cell);
      if (action.empty() || is_fsdp_action(action)) continue;
      try {
        row.push_back({parse_action(action), line_number, column});
      } catch (const Error& error) {
        fail("{} line {}, cell {}: {}", path, line_number, column, error.what());
      }
    }
  }
  // Blank lines at the end are not ranks.
  while (!rows.empty() && rows.back().empty()) rows.pop_back();
  TITAN_CHECK(!rows.empty(), "pipeline schedule '{}' is empty: expected one line of actions per rank", path);

  int largest_stage = -1, largest_microbatch = -1;
  for (const auto& row : rows) {
    for (const Cell& c : row) {
      largest_stage = std::max(largest_stage, c.action.stage);
      largest_microbatch = std::max(largest_microbatch, c.action.microbatch);
    }
  }
  // In 64 bits: an index may be INT_MAX.
  const int64_t stage_count = stages > 0 ? stages : int64_t{largest_stage} + 1;
  const int64_t microbatch_count = microbatches > 0 ? microbatches : int64_t{largest_microbatch} + 1;
  check_schedule_size(stage_count, microbatch_count, path);
  stages = static_cast<int>(stage_count);
  microbatches = static_cast<int>(microbatch_count);
  for (const auto& row : rows) {
    for (const Cell& c : row) {
      TITAN_CHECK(c.action.stage < stages, "{} line {}, cell {}: '{}' names stage {}, but the pipeline has {} stages",
                  path, c.line, c.column, action_string(c.action), c.action.stage, stages);
      TITAN_CHECK(c.action.microbatch < microbatches,
                  "{} line {}, cell {}: '{}' names micro-batch {}, but a step has {} micro-batches", path, c.line,
                  c.column, action_string(c.action), c.action.microbatch, microbatches);
    }
  }

  Schedule schedule;
  schedule.name = path;
  schedule.ranks = static_cast<int>(rows.size());
  schedule.stages = stages;
  schedule.microbatches = microbatches;
  schedule.actions.resize(rows.size());
  // Placement by majority of forwards; a stage with none goes by its other compute.
  std::vector<std::vector<int>> forwards(stages, std::vector<int>(rows.size(), 0));
  std::vector<std::vector<int>> computes(stages, std::vector<int>(rows.size(), 0));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (const Cell& c : rows[r]) {
      schedule.actions[r].push_back(c.action);
      if (c.action.type == ActionType::forward) ++forwards[c.action.stage][r];
      if (is_compute(c.action.type)) ++computes[c.action.stage][r];
    }
  }
  schedule.stage_rank.resize(stages);
  for (int s = 0; s < stages; ++s) {
    const bool has_forward = std::any_of(forwards[s].begin(), forwards[s].end(), [](int n) { return n > 0; });
    const std::vector<int>& votes = has_forward ? forwards[s] : computes[s];
    const auto top = std::max_element(votes.begin(), votes.end());
    TITAN_CHECK(*top > 0, "pipeline schedule '{}': no rank runs stage {} (no '{}F0' or other compute of it)", path, s,
                s);
    schedule.stage_rank[s] = static_cast<int>(top - votes.begin());
  }
  // Compute actions only (TorchTitan's custom schedules): add the sends and
  // receives as PyTorch's lowering does.
  const bool compute_only = std::none_of(schedule.actions.begin(), schedule.actions.end(), [](const auto& row) {
    return std::any_of(row.begin(), row.end(), [](const Action& a) { return is_communication(a.type); });
  });
  if (compute_only) {
    return with_communication(path, schedule.ranks, schedule.microbatches, schedule.stage_rank, schedule.actions);
  }
  return schedule;
}

std::string schedule_csv(const Schedule& schedule) {
  std::string out;
  for (const std::vector<Action>& row : schedule.actions) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      out += action_string(row[i]);
    }
    out += '\n';
  }
  return out;
}

}  // namespace titan::parallel::pipeline
