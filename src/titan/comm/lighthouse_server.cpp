#include "titan/comm/lighthouse_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "titan/comm/lighthouse_client.h"
#include "titan/core/error.h"

namespace titan::comm {

int64_t lighthouse_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

LighthouseServer::LighthouseServer(const Options& options) : options_(options), book_(options.quorum) {
  const auto [host, port] = split_host_port(options.bind, "lighthouse --bind");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int error = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  TITAN_CHECK(error == 0, "lighthouse --bind {}: {}", options.bind, gai_strerror(error));
  for (addrinfo* a = found; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) {
      listen_fd_ = fd;
    } else {
      close(fd);
    }
  }
  freeaddrinfo(found);
  TITAN_CHECK(listen_fd_ >= 0, "lighthouse --bind {}: cannot listen there ({})", options.bind, std::strerror(errno));
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

LighthouseServer::~LighthouseServer() {
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string LighthouseServer::handle(const std::string& line, int64_t now_ms) {
  std::istringstream in(line);
  std::string command;
  in >> command;
  if (command == "hb") {
    int64_t replica = 0;
    uint64_t incarnation = 0;
    in >> replica >> incarnation;
    if (in.fail()) return "error malformed heartbeat";
    book_.heartbeat(replica, incarnation, now_ms);
    return "ok";
  }
  if (command == "join") {
    JoinRequest request;
    int fresh = 0;
    in >> request.replica_id >> request.incarnation >> request.seq >> request.step >> request.min_replica_size >> fresh;
    if (in.fail()) return "error malformed join";
    request.fresh = fresh != 0;
    const std::optional<Quorum> quorum = book_.join(request, now_ms);
    if (!quorum) return "wait";
    if (quorum->id != last_quorum_id_) {
      last_quorum_id_ = quorum->id;
      std::printf("titan: lighthouse: quorum %lld of %zu replica group(s) at step %lld\n",
                  static_cast<long long>(quorum->id), quorum->members.size(),
                  static_cast<long long>(quorum->max_step()));
      std::fflush(stdout);
    }
    return quorum->encode();
  }
  if (command == "vote") {
    CommitVote vote;
    int ok = 0;
    in >> vote.quorum_id >> vote.step >> vote.replica_id >> vote.incarnation >> ok;
    if (in.fail()) return "error malformed vote";
    vote.ok = ok != 0;
    const CommitDecision decision = book_.vote(vote, now_ms);
    if (decision == CommitDecision::abort && last_abort_ != std::pair{vote.quorum_id, vote.step}) {
      last_abort_ = {vote.quorum_id, vote.step};
      std::printf(
          "titan: lighthouse: quorum %lld does not commit step %lld (a member failed or died before its "
          "report)\n",
          static_cast<long long>(vote.quorum_id), static_cast<long long>(vote.step));
      std::fflush(stdout);
    }
    return to_string(decision);
  }
  if (command == "set") {
    std::string key, value;
    in >> key >> value;
    if (key.empty()) return "error malformed set";
    store_[key] = value;
    return "ok";
  }
  if (command == "get") {
    std::string key;
    in >> key;
    const auto it = store_.find(key);
    return it == store_.end() ? "missing" : "value " + it->second;
  }
  return "error unknown request '" + command + "'";
}

void LighthouseServer::serve() {
  while (!stopping_) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    const int ready = poll(&waiting, 1, static_cast<int>(options_.quorum_tick_ms));
    book_.tick(lighthouse_now_ms());
    if (ready <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // One short line each way; a client that stalls is dropped rather than holding up every group.
    timeval limit{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
    std::string line;
    char buffer[4096];
    while (line.find('\n') == std::string::npos) {
      const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
      if (got <= 0) break;
      line.append(buffer, static_cast<size_t>(got));
    }
    if (const size_t end = line.find('\n'); end != std::string::npos) {
      const std::string reply = handle(line.substr(0, end), lighthouse_now_ms()) + "\n";
      size_t sent = 0;
      while (sent < reply.size()) {
        const ssize_t put = send(fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
        if (put <= 0) break;
        sent += static_cast<size_t>(put);
      }
    }
    close(fd);
  }
}

}  // namespace titan::comm
