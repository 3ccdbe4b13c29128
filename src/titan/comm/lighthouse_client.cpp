#include "titan/comm/lighthouse_client.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>

#include "titan/comm/lighthouse_server.h"
#include "titan/core/error.h"

namespace titan::comm {

std::pair<std::string, int> split_host_port(const std::string& address, const char* what) {
  std::string text = address;
  if (const size_t scheme = text.find("://"); scheme != std::string::npos) text = text.substr(scheme + 3);
  while (!text.empty() && text.back() == '/') text.pop_back();
  const size_t colon = text.rfind(':');
  TITAN_CHECK(colon != std::string::npos && colon + 1 < text.size(), "{} '{}': expected host:port", what, address);
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    size_t used = 0;
    port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  TITAN_CHECK(port >= 0 && port <= 65535, "{} '{}': the port is not a number in 0..65535", what, address);
  return {host, port};
}

namespace {

// One exchange; an empty reply means the connection failed (worth retrying).
std::string lighthouse_exchange(const std::string& host, int port, const std::string& line) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? "localhost" : host.c_str(), service.c_str(), &hints, &found) != 0) return "";
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return "";
  timeval limit{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  const std::string request = line + "\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t put = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (put <= 0) break;
    sent += static_cast<size_t>(put);
  }
  std::string reply;
  char buffer[4096];
  while (sent == request.size() && reply.find('\n') == std::string::npos) {
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) break;
    reply.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  const size_t end = reply.find('\n');
  return end == std::string::npos ? "" : reply.substr(0, end);
}

}  // namespace

std::string lighthouse_request(const std::string& address, const std::string& line, int64_t timeout_ms) {
  const auto [host, port] = split_host_port(address, "the lighthouse address (TORCHFT_LIGHTHOUSE)");
  const int64_t deadline = lighthouse_now_ms() + timeout_ms;
  while (true) {
    std::string reply = lighthouse_exchange(host, port, line);
    if (!reply.empty()) {
      TITAN_CHECK(reply.rfind("error", 0) != 0, "lighthouse {}: {}", address, reply);
      return reply;
    }
    TITAN_CHECK(lighthouse_now_ms() < deadline,
                "no answer from the lighthouse at {} within {} ms (is `titan lighthouse` running there? "
                "TORCHFT_LIGHTHOUSE names it)",
                address, timeout_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

LighthouseClient::LighthouseClient(std::string address, int64_t replica_id, int64_t timeout_ms, int64_t heartbeat_ms)
    : address_(std::move(address)), replica_id_(replica_id), timeout_ms_(timeout_ms) {
  std::random_device device;
  incarnation_ = (static_cast<uint64_t>(device()) << 32 | device()) & 0x7fffffffffffffffULL;
  // The first heartbeat before the constructor returns: from now on quorums wait for this group.
  lighthouse_request(address_, fmt::format("hb {} {}", replica_id_, incarnation_), timeout_ms_);
  heartbeat_ = std::thread([this, heartbeat_ms] {
    while (!stopping_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(heartbeat_ms));
      try {
        lighthouse_request(address_, fmt::format("hb {} {}", replica_id_, incarnation_), heartbeat_ms * 10);
      } catch (const std::exception&) {
        // A lighthouse that went away shows up as a failed quorum request, with its message.
      }
    }
  });
}

LighthouseClient::~LighthouseClient() {
  stopping_ = true;
  if (heartbeat_.joinable()) heartbeat_.join();
}

Quorum LighthouseClient::quorum(int64_t step, int64_t min_replica_size, bool fresh) {
  ++seq_;
  const std::string line =
      fmt::format("join {} {} {} {} {} {}", replica_id_, incarnation_, seq_, step, min_replica_size, fresh ? 1 : 0);
  const int64_t deadline = lighthouse_now_ms() + timeout_ms_;
  int64_t pause_ms = 1;
  while (true) {
    const std::string reply = lighthouse_request(address_, line, timeout_ms_);
    if (reply != "wait") return Quorum::decode(reply);
    TITAN_CHECK(lighthouse_now_ms() < deadline,
                "replica group {}: no quorum from the lighthouse at {} within {} ms (fewer live groups than "
                "fault_tolerance.min_replica_size = {}?)",
                replica_id_, address_, timeout_ms_, min_replica_size);
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    pause_ms = std::min<int64_t>(pause_ms * 2, 20);
  }
}

bool LighthouseClient::should_commit(int64_t quorum_id, int64_t step, bool ok, int64_t wait_ms) {
  const int64_t deadline = lighthouse_now_ms() + wait_ms;
  int64_t pause_ms = 1;
  while (true) {
    const bool give_up = lighthouse_now_ms() >= deadline;
    const std::string reply = lighthouse_request(
        address_,
        fmt::format("vote {} {} {} {} {}", quorum_id, step, replica_id_, incarnation_, ok && !give_up ? 1 : 0),
        timeout_ms_);
    if (reply == "commit") return true;
    if (reply == "abort") return false;
    TITAN_CHECK(reply == "wait" && !give_up, "lighthouse {}: unexpected answer '{}' to a commit vote", address_, reply);
    // Short pauses: the members' all-reduces end together, so the last report is a few ms away.
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    pause_ms = std::min<int64_t>(pause_ms * 2, 4);
  }
}

}  // namespace titan::comm
