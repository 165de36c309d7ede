// Tests: ranks of one job as threads of the test process, wired over TCP as worker agents wire
// them (file rendezvous). Collectives are matched by order, so ranks that disagree on which
// collectives to issue fail the run (a mismatched message, or the 30 s collective timeout) rather
// than hang the test.
#ifndef MESANET_MODEL_TRAINER_RANK_THREADS_FOR_TEST_H_
#define MESANET_MODEL_TRAINER_RANK_THREADS_FOR_TEST_H_

#include <functional>
#include <string>

#include "model/trainer/trainer.h"

namespace mesa::model {

// Runs body(rank, options) on `world` threads at once, each with options for that rank: workdir,
// one compute thread, the communicator from the agent's environment with its rendezvous in
// `workdir`/rendezvous (emptied first) under key prefix `key`. Returns when every thread has.
void RunRankThreads(int world, const std::string& workdir, const std::string& key,
                    const std::function<void(int rank, TrainerOptions& options)>& body);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_RANK_THREADS_FOR_TEST_H_
