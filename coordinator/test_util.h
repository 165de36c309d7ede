// Helpers shared by the coordinator's tests.
#ifndef MESANET_COORDINATOR_TEST_UTIL_H_
#define MESANET_COORDINATOR_TEST_UTIL_H_

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "mesa/v1/job.pb.h"

namespace mesa::coordinator {

// A small valid training spec.
inline mesa::v1::JobSpec ValidTrainSpec(const std::string& name = "tiny", int gpus = 1) {
  mesa::v1::JobSpec s;
  s.set_name(name);
  s.set_type(mesa::v1::JOB_TYPE_TRAIN);
  s.mutable_resources()->set_gpus(gpus);
  auto* m = s.mutable_model();
  m->set_vocab_size(257);
  m->set_d_model(64);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_head_dim(32);
  s.mutable_data()->set_train_path("/data/train_*.bin");
  s.mutable_data()->set_seq_len(128);
  s.mutable_data()->set_batch_size(8);
  s.mutable_optimizer()->set_lr(1e-3f);
  s.mutable_training()->set_steps(100);
  return s;
}

// A fresh path under the test's temporary directory.
inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  return absl::StrCat(dir ? dir : "/tmp", "/", name, "-", ++counter, "-", ::getpid());
}

}  // namespace mesa::coordinator

#endif  // MESANET_COORDINATOR_TEST_UTIL_H_
