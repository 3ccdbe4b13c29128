// The lighthouse's quorum rules (comm/quorum.h) on a hand-driven clock, and
// its request lines (LighthouseServer::handle) without sockets.
#include <gtest/gtest.h>

#include "titan/comm/lighthouse_client.h"
#include "titan/comm/lighthouse_server.h"
#include "titan/comm/quorum.h"
#include "titan/core/error.h"

namespace titan::comm {
namespace quorum_test {

JoinRequest joiner(int64_t replica, uint64_t incarnation, int64_t seq, int64_t step, int64_t min_size = 1) {
  return {replica, incarnation, seq, step, min_size, false};
}

TEST(Quorum, WaitsForEveryHealthyGroupThenFormsWithAll) {
  QuorumBook book({.min_replicas = 1, .join_timeout_ms = 1000, .heartbeat_timeout_ms = 500});
  for (int64_t r = 0; r < 3; ++r) book.heartbeat(r, 10 + r, 0);
  EXPECT_FALSE(book.join(joiner(0, 10, 1, 0), 10));
  EXPECT_FALSE(book.join(joiner(1, 11, 1, 0), 20));
  const auto q = book.join(joiner(2, 12, 1, 0), 30);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->members.size(), 3u);
  EXPECT_EQ(q->id, 1);
  // The earlier joiners' polls get the same quorum.
  const auto again = book.join(joiner(0, 10, 1, 0), 31);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->encode(), q->encode());
}

TEST(Quorum, ADeadGroupIsLeftOutAndTheIdChanges) {
  QuorumBook book({.min_replicas = 1, .join_timeout_ms = 10000, .heartbeat_timeout_ms = 500});
  for (int64_t r = 0; r < 3; ++r) book.heartbeat(r, 10 + r, 0);
  for (int64_t r = 0; r < 3; ++r) book.join(joiner(r, 10 + r, 1, 4), 1);
  EXPECT_EQ(book.quorum_id(), 1);
  // Group 2 stops heartbeating; the others join again: they wait while it still counts as alive.
  EXPECT_FALSE(book.join(joiner(0, 10, 2, 5), 100));
  EXPECT_FALSE(book.join(joiner(1, 11, 2, 5), 110));
  book.heartbeat(0, 10, 400);
  book.heartbeat(1, 11, 400);
  book.tick(450);
  EXPECT_EQ(book.pending(), 2u);
  book.tick(700);  // group 2's last heartbeat is 699 ms old: dead
  const auto q = book.join(joiner(0, 10, 2, 5), 701);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->id, 2);
  ASSERT_EQ(q->members.size(), 2u);
  EXPECT_EQ(q->members[0].replica_id, 0);
  EXPECT_EQ(q->members[1].replica_id, 1);
  // Same members next step: the same id (the process groups are kept).
  book.join(joiner(0, 10, 3, 6), 710);
  const auto next = book.join(joiner(1, 11, 3, 6), 711);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->id, 2);
}

TEST(Quorum, ARestartedGroupJoinsBehindAndRecoversFromTheFirstCurrentMember) {
  QuorumBook book({.min_replicas = 2, .join_timeout_ms = 10000, .heartbeat_timeout_ms = 500});
  book.heartbeat(0, 10, 0);
  book.heartbeat(1, 11, 0);
  book.join(joiner(0, 10, 1, 7), 1);
  ASSERT_TRUE(book.join(joiner(1, 11, 1, 7), 2));
  // Group 2's new incarnation at step 3 (its last checkpoint).
  book.heartbeat(2, 99, 5);
  book.join(joiner(0, 10, 2, 8), 6);
  book.join(joiner(2, 99, 1, 3), 7);
  const auto q = book.join(joiner(1, 11, 2, 8), 8);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->members.size(), 3u);
  EXPECT_EQ(q->max_step(), 8);
  EXPECT_EQ(q->recovery_source(), 0);
  EXPECT_EQ(q->index_of(2), 2);
  EXPECT_EQ(Quorum::decode(q->encode()).encode(), q->encode());
}

TEST(Quorum, MinReplicasAndJoinTimeout) {
  QuorumBook book({.min_replicas = 2, .join_timeout_ms = 300, .heartbeat_timeout_ms = 10000});
  for (int64_t r = 0; r < 3; ++r) book.heartbeat(r, r + 1, 0);
  EXPECT_FALSE(book.join(joiner(0, 1, 1, 0), 0));
  book.tick(1000);  // past the join timeout, but one group is fewer than min_replicas
  EXPECT_FALSE(book.join(joiner(0, 1, 1, 0), 1001));
  // A second group makes enough, and the first join is older than the join timeout: no wait for group 2.
  const auto q = book.join(joiner(1, 2, 1, 0), 1002);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->members.size(), 2u);
  // Next step both join at once: group 2 is alive but absent, so they wait the join timeout for it.
  EXPECT_FALSE(book.join(joiner(0, 1, 2, 1), 2000));
  EXPECT_FALSE(book.join(joiner(1, 2, 2, 1), 2000));
  book.tick(2299);
  EXPECT_EQ(book.pending(), 2u);
  book.tick(2300);
  EXPECT_EQ(book.pending(), 0u);
  // A joiner's own min_replica_size raises the floor.
  QuorumBook strict({.min_replicas = 1, .join_timeout_ms = 0, .heartbeat_timeout_ms = 10000});
  strict.heartbeat(0, 1, 0);
  EXPECT_FALSE(strict.join(joiner(0, 1, 1, 0, 2), 5));
}

// A group waiting long (a newcomer, joined while the others trained a step)
// must not make the quorum form the moment one of the last quorum's members
// joins: the other member is on its way.
TEST(Quorum, TheJoinTimeoutNeverLeavesOutALiveMemberOfTheLastQuorum) {
  QuorumBook book({.min_replicas = 2, .join_timeout_ms = 100, .heartbeat_timeout_ms = 10000});
  book.heartbeat(0, 1, 0);
  book.heartbeat(1, 2, 0);
  book.join(joiner(0, 1, 1, 0), 0);
  ASSERT_TRUE(book.join(joiner(1, 2, 1, 0), 1));
  book.heartbeat(2, 3, 2);
  EXPECT_FALSE(book.join(joiner(2, 3, 1, 0), 2));
  EXPECT_FALSE(book.join(joiner(0, 1, 2, 1), 5000));  // group 2 waited 5 s, but group 1 is alive and due
  book.tick(6000);
  EXPECT_EQ(book.pending(), 2u);
  const auto q = book.join(joiner(1, 2, 2, 1), 6001);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->members.size(), 3u);
}

// A member that hangs (its heartbeat thread still runs) makes its peers'
// collective time out; their fresh joins leave it out after the join timeout.
TEST(Quorum, AfterALostPeerAHungMemberIsLeftOutAfterTheJoinTimeout) {
  QuorumBook book({.min_replicas = 1, .join_timeout_ms = 100, .heartbeat_timeout_ms = 10000});
  for (int64_t r = 0; r < 3; ++r) book.heartbeat(r, r + 1, 0);
  for (int64_t r = 0; r < 3; ++r) book.join(joiner(r, r + 1, 1, 0), 1);
  ASSERT_EQ(book.quorum_id(), 1);
  JoinRequest first = joiner(0, 1, 2, 0), second = joiner(1, 2, 2, 0);
  first.fresh = second.fresh = true;
  book.heartbeat(2, 3, 500);  // alive, but never joins
  EXPECT_FALSE(book.join(first, 500));
  EXPECT_FALSE(book.join(second, 550));
  const auto q = book.join(first, 600);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->members.size(), 2u);
  EXPECT_EQ(q->id, 2);
}

TEST(Quorum, AFreshJoinRenumbersTheSameMembers) {
  QuorumBook book({.min_replicas = 1, .join_timeout_ms = 10000, .heartbeat_timeout_ms = 10000});
  book.heartbeat(0, 1, 0);
  ASSERT_EQ(book.join(joiner(0, 1, 1, 0), 1)->id, 1);
  ASSERT_EQ(book.join(joiner(0, 1, 2, 1), 2)->id, 1);
  JoinRequest fresh = joiner(0, 1, 3, 1);
  fresh.fresh = true;
  EXPECT_EQ(book.join(fresh, 3)->id, 2);
}

// A quorum of three groups (replica r, incarnation 10 + r) at step 4, formed at t = 1.
QuorumBook three_groups(int64_t heartbeat_timeout_ms = 500) {
  QuorumBook book({.min_replicas = 1, .join_timeout_ms = 10000, .heartbeat_timeout_ms = heartbeat_timeout_ms});
  for (int64_t r = 0; r < 3; ++r) book.heartbeat(r, 10 + r, 0);
  for (int64_t r = 0; r < 3; ++r) book.join(joiner(r, 10 + r, 1, 4), 1);
  return book;
}

CommitVote ballot(int64_t quorum_id, int64_t replica, bool ok, int64_t step = 5) {
  return {quorum_id, step, replica, static_cast<uint64_t>(10 + replica), ok};
}

TEST(QuorumVote, EveryMemberReportsSuccessThenItCommits) {
  QuorumBook book = three_groups();
  ASSERT_EQ(book.quorum_id(), 1);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 1, true), 11), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 12), CommitDecision::pending);  // a poll
  EXPECT_EQ(book.vote(ballot(1, 2, true), 13), CommitDecision::commit);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 14), CommitDecision::commit);
  // A member that gave up waiting reports a failure: the decision stands.
  EXPECT_EQ(book.vote(ballot(1, 1, false), 15), CommitDecision::commit);
  // The next step in the same quorum is a new vote.
  EXPECT_EQ(book.vote(ballot(1, 0, true, 6), 20), CommitDecision::pending);
}

TEST(QuorumVote, OneFailureAbortsForEveryMemberEvenLateOnes) {
  QuorumBook book = three_groups();
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 1, false), 11), CommitDecision::abort);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 12), CommitDecision::abort);
  // A report after the decision (its all-reduce had succeeded) gets the same answer.
  EXPECT_EQ(book.vote(ballot(1, 2, true), 13), CommitDecision::abort);
}

TEST(QuorumVote, AMemberDeadBeforeItsReportAborts) {
  QuorumBook book = three_groups();
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 1, true), 10), CommitDecision::pending);
  book.heartbeat(0, 10, 400);
  book.heartbeat(1, 11, 400);
  book.tick(450);  // group 2 is quiet but not yet dead: the vote waits
  EXPECT_EQ(book.vote(ballot(1, 0, true), 450), CommitDecision::pending);
  book.tick(600);  // 600 ms since its last heartbeat: dead
  EXPECT_EQ(book.vote(ballot(1, 0, true), 601), CommitDecision::abort);
  EXPECT_EQ(book.vote(ballot(1, 1, true), 602), CommitDecision::abort);
  // A member restarted (a new incarnation) before reporting counts as dead too.
  QuorumBook restarted = three_groups();
  EXPECT_EQ(restarted.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  restarted.heartbeat(2, 99, 11);
  EXPECT_EQ(restarted.vote(ballot(1, 1, true), 12), CommitDecision::abort);
}

TEST(QuorumVote, AMemberDeadAfterItsReportDoesNotBlockTheCommit) {
  QuorumBook book = three_groups();
  EXPECT_EQ(book.vote(ballot(1, 2, true), 10), CommitDecision::pending);
  book.heartbeat(0, 10, 1990);
  book.heartbeat(1, 11, 1990);
  book.tick(2000);  // group 2 died after its report
  EXPECT_EQ(book.vote(ballot(1, 0, true), 2000), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 1, true), 2001), CommitDecision::commit);
}

TEST(QuorumVote, AfterAnAbortTheSurvivorsVoteInTheNewQuorum) {
  QuorumBook book = three_groups();
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(1, 1, false), 10), CommitDecision::abort);
  // Group 2 dies; the survivors join a fresh quorum with the steps before this one.
  JoinRequest first = joiner(0, 10, 2, 4), second = joiner(1, 11, 2, 4);
  first.fresh = second.fresh = true;
  book.heartbeat(0, 10, 700);
  book.heartbeat(1, 11, 700);
  EXPECT_FALSE(book.join(first, 700));
  const auto q = book.join(second, 701);
  ASSERT_TRUE(q);
  ASSERT_EQ(q->id, 2);
  EXPECT_EQ(q->members.size(), 2u);
  EXPECT_EQ(book.vote(ballot(2, 0, true), 710), CommitDecision::pending);
  EXPECT_EQ(book.vote(ballot(2, 1, true), 711), CommitDecision::commit);
  // The old quorum's decision stands; a group outside a quorum, or an unknown quorum, cannot commit.
  EXPECT_EQ(book.vote(ballot(1, 2, true), 712), CommitDecision::abort);
  EXPECT_EQ(book.vote(ballot(2, 2, true), 713), CommitDecision::abort);
  EXPECT_EQ(book.vote(ballot(7, 0, true), 714), CommitDecision::abort);
}

TEST(QuorumVote, AnOpenVoteOfASupersededQuorumAborts) {
  QuorumBook book = three_groups(/*heartbeat_timeout_ms=*/100000);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10), CommitDecision::pending);
  // Groups 1 and 2 lost a peer and re-formed without waiting for the vote (they never reported).
  JoinRequest first = joiner(1, 11, 2, 4), second = joiner(2, 12, 2, 4);
  first.fresh = second.fresh = true;
  book.join(first, 20);
  book.join(second, 20);
  book.tick(10100);  // past the join timeout: group 0 (alive, voting) is left out
  ASSERT_EQ(book.quorum_id(), 2);
  EXPECT_EQ(book.vote(ballot(1, 0, true), 10101), CommitDecision::abort);
}

TEST(Lighthouse, RequestLines) {
  LighthouseServer server({.bind = "127.0.0.1:0", .quorum = {.min_replicas = 1}, .quorum_tick_ms = 10});
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.handle("get q1/key", 0), "missing");
  EXPECT_EQ(server.handle("set q1/key x00ff", 0), "ok");
  EXPECT_EQ(server.handle("get q1/key", 0), "value x00ff");
  EXPECT_EQ(server.handle("hb 0 5", 0), "ok");
  EXPECT_EQ(server.handle("join 0 5 1 3 1 0", 1), "quorum 1 1 0:5:3");
  EXPECT_EQ(server.handle("vote 1 4 0 5 1", 2), "commit");
  EXPECT_EQ(server.handle("vote 1 5 0 5 0", 2), "abort");
  EXPECT_EQ(server.handle("vote 1", 2).rfind("error", 0), 0u);
  EXPECT_EQ(server.handle("bogus", 1).rfind("error", 0), 0u);
  EXPECT_EQ(server.handle("join 0", 1).rfind("error", 0), 0u);
}

TEST(Lighthouse, Addresses) {
  EXPECT_EQ(split_host_port("localhost:29510", "x"), (std::pair<std::string, int>{"localhost", 29510}));
  EXPECT_EQ(split_host_port("http://10.0.0.1:80/", "x"), (std::pair<std::string, int>{"10.0.0.1", 80}));
  EXPECT_EQ(split_host_port("[::1]:5", "x"), (std::pair<std::string, int>{"::1", 5}));
  EXPECT_THROW(split_host_port("nohost", "x"), Error);
  EXPECT_THROW(split_host_port("h:99999", "x"), Error);
}

}  // namespace quorum_test
}  // namespace titan::comm
