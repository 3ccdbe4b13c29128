#include "titan/comm/quorum.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "titan/core/error.h"

namespace titan::comm {

int64_t Quorum::max_step() const {
  int64_t best = 0;
  for (const QuorumMember& member : members) best = std::max(best, member.step);
  return best;
}

int Quorum::index_of(int64_t replica_id) const {
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].replica_id == replica_id) return static_cast<int>(i);
  }
  return -1;
}

int Quorum::recovery_source() const {
  const int64_t best = max_step();
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].step == best) return static_cast<int>(i);
  }
  return -1;
}

std::string Quorum::encode() const {
  std::string text = fmt::format("quorum {} {}", id, members.size());
  for (const QuorumMember& m : members) text += fmt::format(" {}:{}:{}", m.replica_id, m.incarnation, m.step);
  return text;
}

Quorum Quorum::decode(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  size_t count = 0;
  Quorum quorum;
  in >> word >> quorum.id >> count;
  TITAN_CHECK(word == "quorum" && !in.fail(), "lighthouse: malformed quorum reply '{}'", text);
  for (size_t i = 0; i < count; ++i) {
    QuorumMember m;
    char colon1 = 0, colon2 = 0;
    in >> m.replica_id >> colon1 >> m.incarnation >> colon2 >> m.step;
    TITAN_CHECK(!in.fail() && colon1 == ':' && colon2 == ':', "lighthouse: malformed quorum reply '{}'", text);
    quorum.members.push_back(m);
  }
  return quorum;
}

void QuorumBook::heartbeat(int64_t replica_id, uint64_t incarnation, int64_t now_ms) {
  beats_[replica_id] = {incarnation, now_ms};
}

bool QuorumBook::healthy(int64_t replica_id, int64_t now_ms) const {
  const auto it = beats_.find(replica_id);
  return it != beats_.end() && now_ms - it->second.last_ms <= options_.heartbeat_timeout_ms;
}

std::optional<Quorum> QuorumBook::join(const JoinRequest& request, int64_t now_ms) {
  heartbeat(request.replica_id, request.incarnation, now_ms);
  const auto done = results_.find(request.replica_id);
  if (done != results_.end() && done->second.incarnation == request.incarnation && done->second.seq == request.seq) {
    return done->second.quorum;
  }
  const auto it = pending_.find(request.replica_id);
  if (it == pending_.end() || it->second.request.incarnation != request.incarnation ||
      it->second.request.seq != request.seq) {
    pending_[request.replica_id] = {request, now_ms};
  }
  tick(now_ms);
  const auto formed = results_.find(request.replica_id);
  if (formed != results_.end() && formed->second.incarnation == request.incarnation &&
      formed->second.seq == request.seq) {
    return formed->second.quorum;
  }
  return std::nullopt;
}

void QuorumBook::tick(int64_t now_ms) {
  settle_votes(now_ms);
  // A joiner that stopped heartbeating died while waiting: it must not be
  // counted in (its peers would wait on it in the first collective).
  std::erase_if(pending_, [&](const auto& entry) {
    const auto beat = beats_.find(entry.first);
    return beat == beats_.end() || beat->second.incarnation != entry.second.request.incarnation ||
           !healthy(entry.first, now_ms);
  });
  if (pending_.empty()) return;
  int64_t needed = options_.min_replicas;
  int64_t first_ms = now_ms;
  for (const auto& [replica, pending] : pending_) {
    needed = std::max(needed, pending.request.min_replica_size);
    first_ms = std::min(first_ms, pending.joined_ms);
  }
  if (static_cast<int64_t>(pending_.size()) < needed) return;
  bool all_healthy_joined = true;
  for (const auto& [replica, beat] : beats_) {
    if (healthy(replica, now_ms) && !pending_.contains(replica)) all_healthy_joined = false;
  }
  // A live member of the last quorum is always waited for: it is on its way
  // (a step behind a faster peer). The join timeout only stops the wait for
  // groups outside it (one still starting, or one gone quiet), else a group
  // that waited long for a newcomer would form a quorum without a peer joining
  // a moment later, and the groups would leapfrog each other.
  // A fresh join (a member lost a peer mid-collective) lifts that: a member
  // that hangs while still heartbeating is then left out after the timeout too.
  bool last_members_joined = true, fresh_join = false;
  for (const auto& [replica, incarnation] : last_members_) {
    if (healthy(replica, now_ms) && !pending_.contains(replica)) last_members_joined = false;
  }
  for (const auto& [replica, pending] : pending_) fresh_join = fresh_join || pending.request.fresh;
  const bool timed_out = now_ms - first_ms >= options_.join_timeout_ms;
  if (!all_healthy_joined && !(timed_out && (last_members_joined || fresh_join))) return;

  Quorum quorum;
  std::vector<std::pair<int64_t, uint64_t>> members;
  bool fresh = false;
  for (const auto& [replica, pending] : pending_) {  // std::map: by replica_id
    quorum.members.push_back({replica, pending.request.incarnation, pending.request.step});
    members.emplace_back(replica, pending.request.incarnation);
    fresh = fresh || pending.request.fresh;
  }
  if (members != last_members_ || fresh) ++quorum_id_;
  last_members_ = members;
  quorum_members_[quorum_id_] = members;
  // A member votes before it joins again, so a quorum this far back has no voter left.
  std::erase_if(quorum_members_, [&](const auto& entry) { return entry.first + 8 < quorum_id_; });
  std::erase_if(ballots_, [&](const auto& entry) { return !quorum_members_.contains(entry.first.first); });
  settle_votes(now_ms);
  quorum.id = quorum_id_;
  for (const auto& [replica, pending] : pending_) {
    results_[replica] = {pending.request.incarnation, pending.request.seq, quorum};
  }
  pending_.clear();
}

const char* to_string(CommitDecision decision) {
  switch (decision) {
    case CommitDecision::commit:
      return "commit";
    case CommitDecision::abort:
      return "abort";
    case CommitDecision::pending:
      break;
  }
  return "wait";
}

CommitDecision QuorumBook::vote(const CommitVote& vote, int64_t now_ms) {
  // No heartbeat here: whether a member lives is its heartbeat thread's say alone.
  const auto members = quorum_members_.find(vote.quorum_id);
  // A quorum this book never formed (the lighthouse restarted) or long gone: nothing to commit to.
  if (members == quorum_members_.end()) return CommitDecision::abort;
  const std::pair<int64_t, uint64_t> voter{vote.replica_id, vote.incarnation};
  if (std::find(members->second.begin(), members->second.end(), voter) == members->second.end()) {
    return CommitDecision::abort;
  }
  // A member votes on a step only after the last one's decision: older ballots of this quorum are done with.
  std::erase_if(ballots_, [&](const auto& entry) {
    return entry.first.first == vote.quorum_id && entry.first.second + 8 < vote.step;
  });
  Ballot& ballot = ballots_[{vote.quorum_id, vote.step}];
  if (ballot.decision != CommitDecision::pending) return ballot.decision;
  ballot.members = members->second;
  const auto previous = ballot.reports.find(vote.replica_id);
  ballot.reports[vote.replica_id] = vote.ok && (previous == ballot.reports.end() || previous->second);
  settle_votes(now_ms);
  return ballot.decision;
}

void QuorumBook::settle_votes(int64_t now_ms) {
  for (auto& [key, ballot] : ballots_) {
    if (ballot.decision != CommitDecision::pending) continue;
    bool failed = false, missing = false, lost = false;
    for (const auto& [replica, incarnation] : ballot.members) {
      const auto report = ballot.reports.find(replica);
      if (report != ballot.reports.end()) {
        failed = failed || !report->second;
        continue;
      }
      missing = true;
      // Dead before it reported: its own all-reduce may have failed, and it will never say.
      const auto beat = beats_.find(replica);
      lost = lost || beat == beats_.end() || beat->second.incarnation != incarnation || !healthy(replica, now_ms);
    }
    // A newer quorum formed while this vote was open: its missing voters rejoined without a decision.
    const bool superseded = key.first != quorum_id_;
    if (failed || (missing && (lost || superseded))) {
      ballot.decision = CommitDecision::abort;
    } else if (!missing) {
      ballot.decision = CommitDecision::commit;
    }
  }
}

}  // namespace titan::comm
