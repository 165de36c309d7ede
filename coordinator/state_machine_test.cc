#include "coordinator/state_machine.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace mesa::coordinator {
namespace {

using S = mesa::v1::JobState;

TEST(StateMachineTest, TransitionTableIsExactlyTheDesignedOne) {
  const std::set<std::pair<S, S>> allowed = {
      {S::JOB_STATE_UNSPECIFIED, S::JOB_STATE_QUEUED},
      {S::JOB_STATE_QUEUED, S::JOB_STATE_SCHEDULED},
      {S::JOB_STATE_QUEUED, S::JOB_STATE_CANCELLED},
      {S::JOB_STATE_QUEUED, S::JOB_STATE_FAILED},  // a dependency failed (depends_on)
      {S::JOB_STATE_SCHEDULED, S::JOB_STATE_RUNNING},
      {S::JOB_STATE_SCHEDULED, S::JOB_STATE_SUCCEEDED},
      {S::JOB_STATE_SCHEDULED, S::JOB_STATE_FAILED},
      {S::JOB_STATE_SCHEDULED, S::JOB_STATE_CANCELLED},
      {S::JOB_STATE_SCHEDULED, S::JOB_STATE_RETRYING},
      {S::JOB_STATE_RUNNING, S::JOB_STATE_SUCCEEDED},
      {S::JOB_STATE_RUNNING, S::JOB_STATE_FAILED},
      {S::JOB_STATE_RUNNING, S::JOB_STATE_CANCELLED},
      {S::JOB_STATE_RUNNING, S::JOB_STATE_RETRYING},
      {S::JOB_STATE_RETRYING, S::JOB_STATE_SCHEDULED},
      {S::JOB_STATE_RETRYING, S::JOB_STATE_CANCELLED},
      {S::JOB_STATE_RETRYING, S::JOB_STATE_FAILED},
  };
  for (int f = 0; f <= 7; ++f) {
    for (int t = 0; t <= 7; ++t) {
      S from = static_cast<S>(f), to = static_cast<S>(t);
      EXPECT_EQ(IsValidTransition(from, to), allowed.count({from, to}) == 1)
          << ShortStateName(from) << " -> " << ShortStateName(to);
    }
  }
}

TEST(StateMachineTest, TerminalStatesHaveNoExit) {
  for (S s : {S::JOB_STATE_SUCCEEDED, S::JOB_STATE_FAILED, S::JOB_STATE_CANCELLED}) {
    EXPECT_TRUE(IsTerminal(s));
    for (int t = 0; t <= 7; ++t) EXPECT_FALSE(IsValidTransition(s, static_cast<S>(t)));
  }
  EXPECT_FALSE(IsTerminal(S::JOB_STATE_RETRYING));
  EXPECT_TRUE(IsPending(S::JOB_STATE_RETRYING));
  EXPECT_TRUE(IsActive(S::JOB_STATE_RUNNING));
}

TEST(StateMachineTest, CheckTransitionNamesBothStates) {
  absl::Status s = CheckTransition(S::JOB_STATE_SUCCEEDED, S::JOB_STATE_RUNNING);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("SUCCEEDED"), std::string::npos);
  EXPECT_NE(s.message().find("RUNNING"), std::string::npos);
  EXPECT_TRUE(CheckTransition(S::JOB_STATE_QUEUED, S::JOB_STATE_SCHEDULED).ok());
}

}  // namespace
}  // namespace mesa::coordinator
