// The agent supervises its trainers with base::Subprocess (base/subprocess.h); these names keep
// the worker's code (attempt.h/.cc, main.cc) spelling them as before.
#ifndef MESANET_WORKER_PROCESS_H_
#define MESANET_WORKER_PROCESS_H_

#include "base/subprocess.h"

namespace mesa::worker {

using base::FindProgram;
using base::LineCallback;
using base::SpawnOptions;
using base::Stream;
using base::StreamName;
using base::Subprocess;

}  // namespace mesa::worker

#endif  // MESANET_WORKER_PROCESS_H_
