#include "cli/array_format.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace mesa::cli {
namespace {

mesa::v1::ArrayResult Table() {
  mesa::v1::ArrayResult a;
  mesa::v1::ArrayRow& r = *a.add_rows();
  r.set_checkpoint("/ckpt/run, \"best\"/step_10");
  r.set_cg_setting("tolerance 0.0001 max 30");
  r.set_kind("task");
  r.set_name("hellaswag");
  r.set_metric("acc_tok");
  r.set_value(0.1);
  r.set_stderr(0.25);
  r.set_count(4);
  r.set_cg_steps_mean(8.5);
  r.set_cg_steps_mean_prefill(9.25);
  r.set_cg_steps_mean_decode(3.5);
  r.set_draw_std(0.125);
  r.add_job_ids("job-2");
  r.add_job_ids("job-3");
  mesa::v1::ArrayChild& c = *a.add_children();
  c.set_job_id("job-2");
  c.set_state(mesa::v1::JOB_STATE_SUCCEEDED);
  a.add_missing("checkpoint /x, CG fixed 8: job-4 FAILED (boom)");
  return a;
}

TEST(ArrayFormat, CsvQuotesFieldsAndKeepsFullPrecision) {
  EXPECT_EQ(ArrayCsv(Table()),
            "checkpoint,cg_setting,kind,name,metric,value,stderr,count,cg_steps_mean,"
            "cg_steps_mean_prefill,cg_steps_mean_decode,draw_std,job_ids\n"
            "\"/ckpt/run, \"\"best\"\"/step_10\",tolerance 0.0001 max 30,task,hellaswag,acc_tok,"
            "0.10000000000000001,0.25,4,8.5,9.25,3.5,0.125,job-2 job-3\n");
}

TEST(ArrayFormat, TableShowsRowsChildrenAndGaps) {
  const std::string text = FormatArrayTable(Table());
  EXPECT_TRUE(absl::StrContains(text, "0.1000 ± 0.2500 (sd 0.1250 over draws)")) << text;
  EXPECT_TRUE(absl::StrContains(text, "9.25 / 3.50")) << text;  // the task's prefill / decode
  EXPECT_TRUE(absl::StrContains(text, "Children: job-2 SUCCEEDED")) << text;
  EXPECT_TRUE(absl::StrContains(text, "Missing: checkpoint /x, CG fixed 8: job-4 FAILED (boom)"))
      << text;
}

}  // namespace
}  // namespace mesa::cli
