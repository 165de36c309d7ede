// mesactl's view of an array job's result (JobResult.array; docs/evaluation.md "Array jobs"): the
// table `mesactl get` prints under the job's details, and the CSV of `mesactl get --csv`.
#ifndef MESANET_CLI_ARRAY_FORMAT_H_
#define MESANET_CLI_ARRAY_FORMAT_H_

#include <string>

#include "mesa/v1/job.pb.h"

namespace mesa::cli {

// One line per row (checkpoint, CG setting, kind, name, metric, value ± stderr, n, mean CG steps),
// then the children's states and the cells without a result.
std::string FormatArrayTable(const mesa::v1::ArrayResult& array);

// RFC 4180 CSV with a header line: checkpoint, cg_setting, kind, name, metric, value, stderr,
// count, cg_steps_mean, job_ids (space-separated). Values at full precision.
std::string ArrayCsv(const mesa::v1::ArrayResult& array);

}  // namespace mesa::cli

#endif  // MESANET_CLI_ARRAY_FORMAT_H_
