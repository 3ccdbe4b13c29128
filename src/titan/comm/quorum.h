// The lighthouse's quorum book (`titan lighthouse`, TorchFT's name): which
// replica groups train the next step together. Pure bookkeeping over a clock
// the caller passes in, so the rules are tested without sockets or sleeps.
//
// Each replica group (its rank 0) heartbeats while it lives and joins once per
// step with the steps it has committed. A quorum forms when at least
// max(min_replicas, every joiner's min_replica_size) groups joined and either
// every healthy group (heartbeat within heartbeat_timeout_ms) joined, or every
// healthy member of the last quorum joined and the first join is
// join_timeout_ms old (so only groups outside the last quorum are given up
// on by the timeout). A group that stops heartbeating (killed)
// is left out; one that restarts is let in at the next quorum. The quorum id
// changes only when the membership (group and incarnation) changes, so
// members rebuild their cross-group process group only then.
//
// The commit vote (TorchFT's Manager.should_commit, taken across the groups):
// after a step's cross-group all-reduce each member reports whether it (all
// its ranks) succeeded. The step commits only when every member of that
// quorum reported success; one failure, or a member declared dead (heartbeat
// timeout, or a new incarnation) before it reported, aborts it. A peer lost
// in the all-reduce's last exchange can leave one survivor with the full
// average and another with an error: the vote makes both discard it and
// average again in the next quorum, so every survivor applies the same one.
// A decision never changes: a late report gets the recorded one.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace titan::comm {

struct QuorumMember {
  int64_t replica_id = 0;
  uint64_t incarnation = 0;  // a random id per process start: a restarted group is a new member
  int64_t step = 0;          // steps the group had committed when it joined
};

struct Quorum {
  int64_t id = 0;
  std::vector<QuorumMember> members;  // by replica_id

  int64_t max_step() const;
  // The member's index (its rank in the quorum's process groups), -1 if absent.
  int index_of(int64_t replica_id) const;
  // The first member holding max_step(): the source a group behind recovers from.
  int recovery_source() const;
  // "quorum <id> <n> <replica>:<incarnation>:<step> ..." and back (the lighthouse's wire format).
  std::string encode() const;
  static Quorum decode(const std::string& text);
};

struct JoinRequest {
  int64_t replica_id = 0;
  uint64_t incarnation = 0;
  int64_t seq = 0;  // the joiner's count of joins: a repeated poll of one join has the same seq
  int64_t step = 0;
  int64_t min_replica_size = 1;
  // The joiner lost a peer: the quorum gets a new id (its members rebuild
  // their process groups) even if the members look the same.
  bool fresh = false;
};

// One member's report on one step's all-reduce in one quorum.
struct CommitVote {
  int64_t quorum_id = 0;
  int64_t step = 0;
  int64_t replica_id = 0;
  uint64_t incarnation = 0;
  bool ok = false;
};

enum class CommitDecision { pending, commit, abort };
const char* to_string(CommitDecision decision);

class QuorumBook {
 public:
  struct Options {
    int64_t min_replicas = 1;
    int64_t join_timeout_ms = 60000;
    int64_t heartbeat_timeout_ms = 5000;
  };
  explicit QuorumBook(Options options) : options_(options) {}

  void heartbeat(int64_t replica_id, uint64_t incarnation, int64_t now_ms);
  // Records the join (a repeat of the same join is a poll) and returns the
  // quorum it is part of once one formed.
  std::optional<Quorum> join(const JoinRequest& request, int64_t now_ms);
  // Forms a quorum if the rules allow it now, and aborts votes a dead member never reported to.
  void tick(int64_t now_ms);
  // Records the report (a repeat is a poll; a failure may follow a success
  // while undecided: a member that gave up waiting) and returns the decision.
  CommitDecision vote(const CommitVote& vote, int64_t now_ms);

  int64_t quorum_id() const { return quorum_id_; }
  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    JoinRequest request;
    int64_t joined_ms = 0;
  };
  struct Result {
    uint64_t incarnation = 0;
    int64_t seq = 0;
    Quorum quorum;
  };
  struct Beat {
    uint64_t incarnation = 0;
    int64_t last_ms = 0;
  };
  struct Ballot {
    std::vector<std::pair<int64_t, uint64_t>> members;  // the quorum's
    std::map<int64_t, bool> reports;                    // replica_id -> ok
    CommitDecision decision = CommitDecision::pending;
  };
  bool healthy(int64_t replica_id, int64_t now_ms) const;
  void settle_votes(int64_t now_ms);

  Options options_;
  std::map<int64_t, Beat> beats_;
  std::map<int64_t, Pending> pending_;
  std::map<int64_t, Result> results_;
  std::vector<std::pair<int64_t, uint64_t>> last_members_;
  int64_t quorum_id_ = 0;
  // The members of the quorums votes may still name (the current one and a few before it).
  std::map<int64_t, std::vector<std::pair<int64_t, uint64_t>>> quorum_members_;
  std::map<std::pair<int64_t, int64_t>, Ballot> ballots_;  // (quorum id, step) -> ballot
};

}  // namespace titan::comm
