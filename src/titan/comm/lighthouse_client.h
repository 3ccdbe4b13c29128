// A replica group's side of `titan lighthouse` (comm/lighthouse_server.h).
// Requests are one line each way over a fresh TCP connection:
//   hb <replica> <incarnation>                          -> ok
//   join <replica> <incarnation> <seq> <step> <min_size> <fresh> -> wait | quorum ... (comm/quorum.h)
//   vote <quorum_id> <step> <replica> <incarnation> <ok> -> wait | commit | abort (QuorumBook::vote)
//   set <key> <hex>                                     -> ok
//   get <key>                                           -> value <hex> | missing
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include "titan/comm/quorum.h"

namespace titan::comm {

// "host:port", "[v6]:port" or TorchFT's "http://host:port" (TORCHFT_LIGHTHOUSE).
std::pair<std::string, int> split_host_port(const std::string& address, const char* what);

// One request; retries a refused or broken connection until `timeout_ms`
// (the lighthouse may start after the groups, or be restarting), then throws.
std::string lighthouse_request(const std::string& address, const std::string& line, int64_t timeout_ms);

class LighthouseClient {
 public:
  // Heartbeats for `replica_id` every `heartbeat_ms` from a thread until destroyed.
  LighthouseClient(std::string address, int64_t replica_id, int64_t timeout_ms, int64_t heartbeat_ms = 100);
  ~LighthouseClient();
  LighthouseClient(const LighthouseClient&) = delete;
  LighthouseClient& operator=(const LighthouseClient&) = delete;

  // Joins the next quorum having committed `step` steps; waits for it (at most
  // timeout_ms). `fresh`: a peer was lost (JoinRequest::fresh).
  Quorum quorum(int64_t step, int64_t min_replica_size, bool fresh);
  // The commit vote on `step` in `quorum_id` (QuorumBook::vote): reports
  // whether this group's all-reduce succeeded and waits for the lighthouse's
  // decision. After `wait_ms` it reports a failure instead, which aborts the
  // step unless every member had already reported success; either way the
  // answer is the lighthouse's one decision, the same for every member.
  bool should_commit(int64_t quorum_id, int64_t step, bool ok, int64_t wait_ms);
  uint64_t incarnation() const { return incarnation_; }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  int64_t replica_id_;
  int64_t timeout_ms_;
  uint64_t incarnation_;
  int64_t seq_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread heartbeat_;
};

}  // namespace titan::comm
