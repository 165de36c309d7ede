#include "worker/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "gtest/gtest.h"

namespace mesa::worker {
namespace {

// A plain HTTP GET over a real socket: what Prometheus does.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

TEST(MetricsTest, ServesWorkerAndJobSeriesAndRemovesJobs) {
  WorkerMetrics metrics;
  auto address = metrics.Serve("127.0.0.1:0");
  ASSERT_TRUE(address.ok()) << address.status();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address->substr(address->rfind(':') + 1), &port));
  ASSERT_GT(port, 0);

  metrics.SetGpusTotal(2);
  metrics.AddGpusAllocated(1);
  metrics.AddTrainerProcesses(1);
  metrics.CountRestart();
  metrics.CountExit("infra");
  mesa::v1::Progress progress;
  progress.set_loss(3.5f);
  progress.set_tokens_per_second(1234);
  progress.set_cg_steps_mean(7);
  metrics.SetJobProgress("job-1", progress);

  std::string text = Scrape(port);
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_gpus_allocated 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_trainer_processes 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_trainer_restarts_total 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_trainer_exits_total{kind=\"infra\"} 1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_loss{job_id=\"job-1\"} 3.5")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_tokens_per_second{job_id=\"job-1\"} 1234")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_cg_steps_mean{job_id=\"job-1\"} 7")) << text;
  // Tokens as a counter of what was trained here: from the first count this worker saw (a
  // resumed run's earlier tokens are not this worker's), up with every step, never down.
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_tokens_total{job_id=\"job-1\"} 0")) << text;
  for (const int64_t tokens : {int64_t{5000}, int64_t{7048}, int64_t{9096}, int64_t{7048}}) {
    progress.set_tokens(tokens);
    metrics.SetJobProgress("job-1", progress);
  }
  progress.set_tokens(8072);  // after a restart from an older checkpoint: counts on from 7048
  metrics.SetJobProgress("job-1", progress);
  text = Scrape(port);
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_tokens_total{job_id=\"job-1\"} 5120")) << text;

  // The GPUs of the job, by CUDA index and UUID, for joins with DCGM-exporter's series.
  metrics.SetGpuUuids({{0, "GPU-8a1b2c3d-0000-1111-2222-333344445555"}});
  metrics.AddJobGpu("job-1", 0);
  metrics.AddJobGpu("job-1", 1);  // no UUID known: the label is empty
  text = Scrape(port);
  EXPECT_TRUE(absl::StrContains(text,
                                "mesa_job_gpu_info{UUID=\"GPU-8a1b2c3d-0000-1111-2222-"
                                "333344445555\",gpu=\"0\",job_id=\"job-1\"} 1"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_job_gpu_info{UUID=\"\",gpu=\"1\",job_id=\"job-1\"} 1"))
      << text;

  metrics.RemoveJob("job-1");
  text = Scrape(port);
  EXPECT_FALSE(absl::StrContains(text, "job-1")) << text;
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_gpus 2")) << text;
}

TEST(MetricsTest, SeriesCarryTheWorkerIdAndBuildInfo) {
  WorkerMetrics metrics("gpu-node-7");
  metrics.SetGpusTotal(4);
  mesa::v1::Progress progress;
  progress.set_step(12);
  metrics.SetJobProgress("job-2", progress);
  auto address = metrics.Serve("127.0.0.1:0");
  ASSERT_TRUE(address.ok()) << address.status();
  const int port = std::stoi(address->substr(address->rfind(':') + 1));
  const std::string text = Scrape(port);
  EXPECT_TRUE(absl::StrContains(text, "mesa_worker_gpus{worker_id=\"gpu-node-7\"} 4")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "mesa_job_step{worker_id=\"gpu-node-7\",job_id=\"job-2\"} 12"))
      << text;
  EXPECT_TRUE(absl::StrContains(
      text, "mesa_build_info{worker_id=\"gpu-node-7\",component=\"worker\",version=\"0.16.0\"} 1"))
      << text;
}

TEST(MetricsTest, ServeFailsOnABadAddress) {
  WorkerMetrics metrics;
  EXPECT_FALSE(metrics.Serve("256.1.1.1:99999").ok());
}

}  // namespace
}  // namespace mesa::worker
