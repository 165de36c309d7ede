#include "spec/job_refs.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"

namespace mesa::spec {
namespace {

using ::mesa::v1::JobSpec;

JobSpec EvalAfter(const std::string& dep) {
  JobSpec s;
  s.set_type(mesa::v1::JOB_TYPE_EVAL);
  s.mutable_eval()->set_checkpoint("job:" + dep);
  s.add_depends_on()->set_job_id(dep);
  return s;
}

TEST(JobRefs, ReferencesAreFoundOnlyInTheCheckpointFields) {
  EXPECT_EQ(JobRefTarget("job:job-7"), "job-7");
  EXPECT_FALSE(JobRefTarget("/ckpt/job:7").has_value());
  EXPECT_FALSE(JobRefTarget("").has_value());
  JobSpec s = EvalAfter("job-7");
  s.mutable_checkpoint()->set_init_from("job:job-7");
  s.mutable_checkpoint()->set_dir("job:job-7");  // not a reference field: a (relative) path
  const std::vector<JobRef> refs = JobRefs(s);
  ASSERT_EQ(refs.size(), 2);
  EXPECT_EQ(refs[0].field, "checkpoint.init_from");
  EXPECT_EQ(refs[1].field, "eval.checkpoint");
  EXPECT_EQ(refs[1].job_id, "job-7");
}

TEST(JobRefs, DependenciesAndReferencesAreChecked) {
  EXPECT_TRUE(DependencyProblems(EvalAfter("job-1")).empty());
  JobSpec unnamed = EvalAfter("job-1");
  unnamed.mutable_eval()->set_checkpoint("job:job-2");
  EXPECT_EQ(absl::StrJoin(DependencyProblems(unnamed), "|"),
            "eval.checkpoint: job:job-2 names a job that depends_on does not list; add "
            "depends_on: [{job_id: job-2}]");
  JobSpec twice = EvalAfter("job-1");
  twice.add_depends_on()->set_job_id("job-1");
  twice.add_depends_on();
  EXPECT_EQ(absl::StrJoin(DependencyProblems(twice), "|"),
            "depends_on[1].job_id: job-1 is named twice|depends_on[2].job_id: required (the id "
            "mesactl submit printed)");
  JobSpec many;
  for (int i = 0; i <= kMaxDependencies; ++i)
    many.add_depends_on()->set_job_id(absl::StrCat("j", i));
  EXPECT_EQ(DependencyProblems(many).size(), 1);
  JobSpec array = EvalAfter("job-1");
  array.mutable_array()->add_checkpoints("/ckpt/a");
  EXPECT_EQ(DependencyProblems(array).size(), 1);
  JobSpec bad_condition = EvalAfter("job-1");
  bad_condition.mutable_depends_on(0)->set_after(static_cast<mesa::v1::DependencyCondition>(9));
  EXPECT_EQ(DependencyProblems(bad_condition).size(), 1);
  EXPECT_EQ(ConditionOf(bad_condition.depends_on(0)), 9);
  EXPECT_EQ(ConditionName(ConditionOf(mesa::v1::Dependency())), "success");
}

TEST(JobRefs, ResolvingReplacesEachReferenceOrNamesTheField) {
  JobSpec s = EvalAfter("job-3");
  absl::StatusOr<JobSpec> resolved =
      ResolveJobRefs(s, [](const std::string& id) -> absl::StatusOr<std::string> {
        return "/ckpt/" + id + "/step-20";
      });
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->eval().checkpoint(), "/ckpt/job-3/step-20");
  EXPECT_TRUE(JobRefs(*resolved).empty());
  absl::StatusOr<JobSpec> failed =
      ResolveJobRefs(s, [](const std::string& id) -> absl::StatusOr<std::string> {
        return absl::FailedPreconditionError(id + " recorded no checkpoint");
      });
  EXPECT_EQ(failed.status().message(), "eval.checkpoint: job-3 recorded no checkpoint");
}

}  // namespace
}  // namespace mesa::spec
