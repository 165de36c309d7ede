// CPU benchmark of the attention operator (float32, impl cpu): prints ms for forward and
// forward+backward (the backward reusing the forward's o and lse), global and sliding-window.
//   bazel run -c opt //bench:attention_cpu_bench -- [--threads N] [--repeats N]
#include <cstdio>

#include "absl/flags/flag.h"
#include "base/cli_flags.h"
#include "bench/cpu_timing.h"
#include "kernels/attention/attention_op.h"
#include "kernels/attention/test_util.h"

ABSL_FLAG(int32_t, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(int32_t, repeats, 5, "timed repetitions (median reported)");

namespace mesa::kernels::attention {
namespace {

using ::mesa::bench::MedianWallMs;

void Bench(int64_t b, int64_t t, int64_t h, int64_t d, int64_t window) {
  const testing::Problem p =
      testing::RandomProblem({.batch = b, .seq_len = t, .heads = h, .head_dim = d});
  const AttnOptions options{.window = window, .num_threads = absl::GetFlag(FLAGS_threads)};
  const AttnInputs in = p.Inputs();
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const double fwd_ms = MedianWallMs([&] { (void)*AttentionForwardAlloc(in, options); }, repeats);
  const double total_ms = MedianWallMs(
      [&] {
        AttnForwardResult f = *AttentionForwardAlloc(in, options);
        (void)*AttentionBackwardAlloc(in, p.d_o, options, f.o, f.lse);
      },
      repeats);
  const AttnDims dims{b, t, h, d};
  const double gflop = (ForwardFlops(dims, window) + BackwardFlops(dims, window)) * 1e-9;
  std::printf(
      "B=%-3lld T=%-5lld H=%-2lld D=%-4lld window=%-5lld  fwd %8.1f ms   fwd+bwd %8.1f ms   "
      "(%.1f GFLOP/s fwd+bwd)\n",
      (long long)b, (long long)t, (long long)h, (long long)d, (long long)window, fwd_ms, total_ms,
      gflop / (total_ms * 1e-3));
}

}  // namespace
}  // namespace mesa::kernels::attention

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "attention_cpu_bench [--threads N] [--repeats N]\n"
                               "  CPU benchmark of the attention operator.");
  namespace at = ::mesa::kernels::attention;
  at::Bench(4, 256, 4, 64, 0);  // tiny-model training shape
  at::Bench(4, 256, 4, 64, 64);
  at::Bench(2, 512, 6, 128, 0);  // MesaNet-small heads, short context
  at::Bench(1, 2048, 2, 128, 0);
  at::Bench(1, 2048, 2, 128, 256);
  return 0;
}
