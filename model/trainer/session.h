// What a training or evaluation run is made of, built once for both (trainer.cc, training_run.cc):
// the communicator, the backend and the model, in the order that validates before allocating.
#ifndef MESANET_MODEL_TRAINER_SESSION_H_
#define MESANET_MODEL_TRAINER_SESSION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/backend/backend.h"
#include "model/comm/communicator.h"
#include "model/config/job_config.h"
#include "model/net/mesanet.h"
#include "model/trainer/evaluate.h"
#include "model/trainer/trainer.h"

namespace mesa::model {

struct Session {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<MesaNet> net;
  int micro_batch = 0;
  int threads = 0;
  // training.context_parallel: consecutive ranks share each sequence, this rank running `slice`
  // of it (the model is built for that slice's length); the data-parallel replicas are the
  // groups of them, this rank's group being data_rank of data_ranks.
  ContextSlice slice;
  int data_rank = 0, data_ranks = 1;
};

// The CUDA activation type of a precision: "auto" is bf16 on CUDA; fp32 keeps exact comparisons
// possible. (The CPU backend has fp32 activations only.)
ActivationType ActivationsFor(Precision precision);

// Picks the device (CUDA when asked or available), builds the communicator from the launcher's
// environment, the backend and the model for one micro-batch.
absl::StatusOr<Session> MakeSession(const JobConfig& config, const TrainerOptions& options);

// A model on the session's backend for its micro-batch and this rank's slice of sequences of
// `seq_len` tokens, joined to the session's context-parallel group (MakeSession's for
// data.seq_len; evaluation datasets of other lengths get their own).
absl::StatusOr<std::unique_ptr<MesaNet>> MakeNet(const JobConfig& config, const Session& s,
                                                 int seq_len);

// Peak FLOP/s of one process for MFU, unless the options say otherwise. CPU: cores x 2.5 GHz x
// 32 fp32 FLOP/cycle (AVX2, 2 FMA units). GPUs: the H100/H200 dense bf16 tensor-core peak, the
// figure MFU is quoted against.
double PeakFlops(const std::string& device, int threads, double configured);

// The job spec as JSON (recorded in checkpoints).
std::string SpecJson(const JobConfig& config);

// checkpoint.dir, else WORKDIR/checkpoints.
std::string CheckpointRoot(const JobConfig& config, const TrainerOptions& options);

}  // namespace mesa::model

#endif  // MESANET_MODEL_TRAINER_SESSION_H_
