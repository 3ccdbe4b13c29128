// `titan lighthouse`: the small TCP service replica groups of a fault-tolerant
// job (fault_tolerance.enable) meet at. It keeps the quorum book
// (comm/quorum.h) and a key-value store the groups' Gloo process groups
// rendezvous through (comm/gloo_store.h), so a job needs no shared folder.
// One request per connection, one line each way (lighthouse_client.h has the
// format); served by one thread, so the book needs no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "titan/comm/quorum.h"

namespace titan::comm {

class LighthouseServer {
 public:
  struct Options {
    std::string bind = "0.0.0.0:29510";  // host:port; port 0 picks a free one (port() tells which)
    QuorumBook::Options quorum;
    int64_t quorum_tick_ms = 100;
  };
  explicit LighthouseServer(const Options& options);
  ~LighthouseServer();
  LighthouseServer(const LighthouseServer&) = delete;
  LighthouseServer& operator=(const LighthouseServer&) = delete;

  int port() const { return port_; }
  // Serves until stop() (from another thread or a signal handler's flag).
  void serve();
  void stop() { stopping_ = true; }
  // The reply to one request line (public for tests).
  std::string handle(const std::string& line, int64_t now_ms);

 private:
  Options options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  QuorumBook book_;
  std::map<std::string, std::string> store_;  // key -> hex value
  int64_t last_quorum_id_ = 0;
  std::pair<int64_t, int64_t> last_abort_{0, 0};  // (quorum id, step): printed once
};

// Milliseconds on a monotonic clock (the lighthouse's and the tests' "now").
int64_t lighthouse_now_ms();

}  // namespace titan::comm
