#include "model/trainer/rank_threads_for_test.h"

#include <filesystem>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace mesa::model {

void RunRankThreads(int world, const std::string& workdir, const std::string& key,
                    const std::function<void(int rank, TrainerOptions& options)>& body) {
  std::filesystem::remove_all(workdir + "/rendezvous");
  std::filesystem::create_directories(workdir + "/rendezvous");
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      TrainerOptions options;
      options.workdir = workdir;
      options.num_threads = 1;
      options.rank = r;
      options.world_size = world;
      options.comm_from_env = true;
      options.comm_env.launcher = Launcher::kAgent;
      options.comm_env.rank = r;
      options.comm_env.world_size = world;
      options.comm_env.local_rank = r;
      options.comm_env.rendezvous = "file:" + workdir + "/rendezvous";
      options.comm_env.key_prefix = key;
      options.comm_env.advertise_host = "127.0.0.1";
      options.comm_env.timeout = absl::Seconds(30);
      body(r, options);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace mesa::model
