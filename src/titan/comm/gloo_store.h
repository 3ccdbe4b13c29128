// Gloo's rendezvous store over `titan lighthouse` (comm/lighthouse_server.h):
// the members of a quorum publish their addresses there under a prefix naming
// the quorum, so no shared folder is needed between replica groups.
#pragma once

#include <gloo/rendezvous/store.h>

#include <string>
#include <vector>

namespace titan::comm {

class LighthouseStore : public gloo::rendezvous::Store {
 public:
  LighthouseStore(std::string address, std::string prefix, int64_t timeout_ms);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::string address_, prefix_;
  int64_t timeout_ms_;
};

}  // namespace titan::comm
