// Every metric a dashboard panel or a Prometheus rule reads must be one the coordinator, the
// worker or mesa-serve exports; a renamed metric would otherwise leave an empty panel or an alert
// that never fires.
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "coordinator/metrics.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "serve/serve_metrics.h"
#include "worker/metrics.h"
#include "yaml-cpp/yaml.h"

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Metric families as exposed, with one series in each labelled family (a family with no series
// yet is not exposed) and a job's series (they exist only while a job runs).
std::string ExportedMetrics() {
  mesa::v1::Progress progress;
  progress.set_step(3);
  progress.set_loss(2.5f);
  mesa::coordinator::Metrics coordinator;
  coordinator.CountSubmission("OK");
  coordinator.CountRpc("SubmitJob", "OK");
  coordinator.SetWorker("w1", {.gpus = 8, .gpus_allocated = 2, .live = true});
  mesa::worker::WorkerMetrics worker;
  worker.SetJobProgress("job-1", progress);
  worker.AddJobGpu("job-1", 0);
  mesa::serve::ServeMetrics serve;
  serve.Finished("stop").Increment();
  serve.Responses(200).Increment();
  prometheus::TextSerializer serializer;
  return coordinator.Serialize() + serializer.Serialize(worker.registry().Collect()) + serve.Text();
}

// Metric names in a PromQL expression, with histogram suffixes folded into their family.
std::set<std::string> MetricNames(const std::string& expr) {
  static const std::regex kName("\\bmesa_[a-z_]+");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), kName);
       it != std::sregex_iterator(); ++it) {
    std::string name = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        name.resize(name.size() - s.size());
      }
    }
    names.insert(name);
  }
  return names;
}

void ExpectExported(const std::string& exported, const std::string& expr,
                    const std::string& where) {
  for (const std::string& name : MetricNames(expr)) {
    EXPECT_NE(exported.find("# TYPE " + name + " "), std::string::npos)
        << where << " reads " << name << ", which no binary exports: " << expr;
  }
  // Prometheus sets `job` itself; our per-job series are labelled job_id.
  EXPECT_EQ(expr.find("mesa_job_loss{job="), std::string::npos) << where;
}

TEST(DashboardsTest, PanelsReadExportedMetrics) {
  const std::string exported = ExportedMetrics();
  for (const char* file :
       {"dashboards/grafana/coordinator.json", "dashboards/grafana/training.json"}) {
    nlohmann::json dashboard = nlohmann::json::parse(ReadFile(file));
    ASSERT_TRUE(dashboard.contains("uid")) << file;
    ASSERT_FALSE(dashboard["panels"].empty()) << file;
    std::set<int> ids;
    for (const auto& panel : dashboard["panels"]) {
      EXPECT_TRUE(ids.insert(panel["id"].get<int>()).second) << file << ": duplicate panel id";
      ASSERT_FALSE(panel["targets"].empty()) << file << ": " << panel["title"];
      for (const auto& target : panel["targets"]) {
        const std::string expr = target["expr"].get<std::string>();
        EXPECT_FALSE(MetricNames(expr).empty()) << file << ": " << expr;
        ExpectExported(exported, expr,
                       std::string(file) + " panel " + panel["title"].get<std::string>());
      }
    }
  }
}

TEST(DashboardsTest, RulesReadExportedMetrics) {
  const std::string exported = ExportedMetrics();
  YAML::Node rules = YAML::LoadFile("dashboards/prometheus/rules.yaml");
  int count = 0;
  for (const auto& group : rules["groups"]) {
    for (const auto& rule : group["rules"]) {
      ASSERT_TRUE(rule["alert"] || rule["record"]) << "rule without alert or record";
      const std::string expr = rule["expr"].as<std::string>();
      ExpectExported(exported, expr, "rule");
      ++count;
    }
  }
  EXPECT_GE(count, 5);
}

// The scrape config names its jobs after the pods' app.kubernetes.io/name label, the `job` the
// alerts select on (MesaCoordinatorDown would never fire under a generic job name).
TEST(DashboardsTest, ScrapeConfigNamesTheJobsTheAlertsSelect) {
  YAML::Node config = YAML::LoadFile("dashboards/prometheus/prometheus.yml");
  ASSERT_EQ(config["rule_files"][0].as<std::string>(), "rules.yaml");
  bool job_from_app_label = false, keeps_ours = false;
  for (const auto& relabel : config["scrape_configs"][0]["relabel_configs"]) {
    const std::string source = relabel["source_labels"][0].as<std::string>();
    if (source != "__meta_kubernetes_pod_label_app_kubernetes_io_name") continue;
    if (relabel["target_label"] && relabel["target_label"].as<std::string>() == "job") {
      job_from_app_label = true;
    }
    if (relabel["action"] && relabel["action"].as<std::string>() == "keep") {
      keeps_ours = relabel["regex"].as<std::string>() == "mesa-coordinator|mesa-worker|mesa-serve";
    }
  }
  EXPECT_TRUE(job_from_app_label);
  EXPECT_TRUE(keeps_ours);
  const std::string rules = ReadFile("dashboards/prometheus/rules.yaml");
  EXPECT_NE(rules.find("absent(up{job=\"mesa-coordinator\"})"), std::string::npos);
}

TEST(DashboardsTest, ProvisioningFilesParse) {
  for (const char* file : {"dashboards/grafana/provisioning/dashboards.yaml",
                           "dashboards/grafana/provisioning/datasources.yaml"}) {
    YAML::Node node = YAML::LoadFile(file);
    EXPECT_EQ(node["apiVersion"].as<int>(), 1) << file;
  }
}

}  // namespace
