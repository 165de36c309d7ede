// training.profile: the trace file's structure, from the class alone and from a real training run
// on the CPU (steps and phases as Chrome/Perfetto trace events, phases inside their steps).
#include "model/trainer/step_trace.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/backend/cpu_backend.h"
#include "model/config/job_config.h"
#include "model/data/token_shard.h"
#include "model/trainer/trainer.h"
#include "nlohmann/json.hpp"
#include "spec/testing.h"

namespace mesa::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Tmp(const std::string& name) { return std::string(getenv("TEST_TMPDIR")) + "/" + name; }

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// Steps ("cat": "step") by number, and each step's phases (name -> count), checking that every
// phase lies inside its step.
struct Parsed {
  std::map<int64_t, json> steps;
  std::map<int64_t, std::map<std::string, int>> phases;
};
Parsed Parse(const json& trace, int rank) {
  Parsed out;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M") continue;
    EXPECT_EQ(e["ph"], "X") << e;
    EXPECT_EQ(e["pid"], rank) << e;
    if (e["cat"] == "step") out.steps[e["args"]["step"].get<int64_t>()] = e;
  }
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "phase") continue;
    const int64_t step = e["args"]["step"];
    EXPECT_TRUE(out.steps.contains(step)) << e;
    if (!out.steps.contains(step)) continue;
    const json& s = out.steps[step];
    EXPECT_GE(e["ts"].get<double>(), s["ts"].get<double>()) << e;
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(),
              s["ts"].get<double>() + s["dur"].get<double>() + 1e-3)
        << e;
    EXPECT_GE(e["dur"].get<double>(), 0) << e;
    ++out.phases[step][e["name"]];
  }
  return out;
}

TEST(StepTraceTest, TracesOnlyTheWindowAndWritesAfterItsLastStep) {
  CpuBackend backend;
  const std::string path = Tmp("unit/profile/trace.json");
  StepTrace trace(3, 2, 5, path, &backend);
  for (int64_t step = 1; step <= 6; ++step) {
    trace.BeginStep(step);
    EXPECT_EQ(trace.tracing(), step == 3 || step == 4);
    { auto phase = trace.Scope("forward"); }
    { auto phase = trace.Scope("optimizer"); }
    ASSERT_TRUE(trace.EndStep().ok());
    EXPECT_EQ(fs::exists(path), step >= 4) << step;  // written once the window is over
  }
  const json written = ReadJson(path);
  ASSERT_FALSE(written.is_discarded());
  EXPECT_EQ(written["otherData"]["start_step"], 3);
  EXPECT_EQ(written["otherData"]["rank"], 5);
  const Parsed p = Parse(written, 5);
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_TRUE(p.steps.contains(3) && p.steps.contains(4));
  EXPECT_EQ(p.phases.at(3).at("forward"), 1);
  EXPECT_EQ(p.phases.at(4).at("optimizer"), 1);
}

TEST(StepTraceTest, ATrainingRunTracesItsStepsPhases) {
  std::vector<uint32_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i % 97 == 0 ? 256 : 'a' + (i * 7) % 13;
  ASSERT_TRUE(WriteTokenShard(Tmp("train_000.bin"), tokens).ok());
  mesa::v1::JobSpec spec = spec::ValidTrainSpec("profiled", /*gpus=*/0);
  auto* m = spec.mutable_model();
  m->set_d_model(32);
  m->set_head_dim(16);
  m->set_mixer("gla");
  auto* d = spec.mutable_data();
  d->set_train_path(Tmp("train_000.bin"));
  d->set_seq_len(32);
  d->set_batch_size(4);
  d->set_grad_accum_steps(2);
  spec.mutable_training()->set_steps(5);
  spec.mutable_training()->mutable_profile()->set_start_step(2);
  spec.mutable_training()->mutable_profile()->set_steps(2);
  const std::string root = Tmp("run/checkpoints");
  spec.mutable_checkpoint()->set_dir(root);
  auto config = ResolveJobConfig(spec, {});
  ASSERT_TRUE(config.ok()) << config.status();
  TrainerOptions options;
  options.workdir = Tmp("run");
  options.num_threads = 2;
  EventSink sink;
  sink.set_quiet(true);
  auto result = RunTraining(*config, options, sink);
  ASSERT_TRUE(result.ok()) << result.status();
  const json written = ReadJson(root + "/profile/trace-step2-rank0.json");
  ASSERT_FALSE(written.is_discarded());
  const Parsed p = Parse(written, 0);
  ASSERT_EQ(p.steps.size(), 2u);
  for (int64_t step : {2, 3}) {
    ASSERT_TRUE(p.phases.contains(step)) << step;
    const std::map<std::string, int>& phases = p.phases.at(step);
    EXPECT_EQ(phases.at("read batches"), 1);
    EXPECT_EQ(phases.at("forward"), 2);  // two micro-batches
    EXPECT_EQ(phases.at("backward"), 2);
    EXPECT_EQ(phases.at("reduce gradients"), 1);
    EXPECT_EQ(phases.at("optimizer"), 1);
    EXPECT_EQ(phases.at("evaluate"), 1);
  }
}

}  // namespace
}  // namespace mesa::model
