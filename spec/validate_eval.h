// The eval section of a job spec (spec/validate_job_spec.h): eval.cg_sweep, eval.datasets and
// their curves, eval.tasks and task_groups, eval.shard. Internal to //spec:validate_job_spec.
#ifndef MESANET_SPEC_VALIDATE_EVAL_H_
#define MESANET_SPEC_VALIDATE_EVAL_H_

#include "mesa/v1/job.pb.h"
#include "spec/spec_problems.h"

namespace mesa::spec {

// Adds the problems of spec.eval; `eval`: the spec is validated as an evaluation.
void CheckEvalSection(const mesa::v1::JobSpec& spec, bool eval, Problems& p);

}  // namespace mesa::spec

#endif  // MESANET_SPEC_VALIDATE_EVAL_H_
