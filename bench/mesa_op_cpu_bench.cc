// CPU benchmark of the Mesa operator (chunked, float32): prints ms for forward and
// forward+backward.
//   bazel run -c opt //bench:mesa_op_cpu_bench -- [--threads N] [--repeats N]
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "base/cli_flags.h"
#include "bench/cpu_timing.h"
#include "kernels/mesa/mesa_op.h"
#include "kernels/mesa/mesa_test_util.h"

ABSL_FLAG(int32_t, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(int32_t, repeats, 5, "timed repetitions (median reported)");

namespace mesa::kernels {
namespace {

using ::mesa::bench::MedianWallMs;

void Bench(int64_t b, int64_t t, int64_t h, int64_t d, int steps) {
  testing::Problem p =
      testing::RandomProblem({.batch = b, .seq_len = t, .heads = h, .head_dim = d, .seed = 1});
  MesaOptions options{
      .impl = MesaImpl::kChunked, .cg = {steps, 0.f}, .num_threads = absl::GetFlag(FLAGS_threads)};
  const MesaInputs in = p.Inputs();
  MesaForwardResult fwd;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const double fwd_ms = MedianWallMs([&] { fwd = *MesaForwardAlloc(in, options); }, repeats);
  const double total_ms = MedianWallMs(
      [&] {
        MesaForwardResult f = *MesaForwardAlloc(in, options);
        MesaGradientsResult g = *MesaBackwardAlloc(in, f.q_star, p.d_o, options);
      },
      repeats);
  // Useful flops: per chunk-step 2*(C*D*D + 2*C*C*D) for the CG matvec (C = 64 here).
  const double tokens = double(b) * t * h;
  const double cg_gflop = 2.0 * tokens * steps * (double(d) * d + 2.0 * 64 * d) * 1e-9;
  std::printf(
      "B=%-3lld T=%-5lld H=%-2lld D=%-4lld steps=%-3d  fwd %8.1f ms   fwd+bwd %8.1f ms   "
      "(fwd CG ~%.2f GFLOP -> %.1f GFLOP/s)\n",
      (long long)b, (long long)t, (long long)h, (long long)d, steps, fwd_ms, total_ms, cg_gflop,
      cg_gflop / (fwd_ms * 1e-3));
}

}  // namespace
}  // namespace mesa::kernels

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "mesa_op_cpu_bench [--threads N] [--repeats N]\n"
                               "  CPU benchmark of the Mesa operator.");
  mesa::kernels::Bench(4, 256, 4, 64, 30);  // tiny-model training shape (n_e = 256)
  mesa::kernels::Bench(4, 256, 4, 64, 10);
  mesa::kernels::Bench(2, 512, 6, 128, 30);  // MesaNet "small" heads, short context
  mesa::kernels::Bench(1, 2048, 2, 128, 30);
  return 0;
}
