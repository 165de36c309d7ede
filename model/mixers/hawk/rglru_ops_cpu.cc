// The RG-LRU on the CPU backend: the chunked float32 scan (or the float64 reference when the
// backend runs reference operators), on the backend's float32 activations.
#include <cstddef>
#include <memory>
#include <vector>

#include "kernels/rglru/rglru_op.h"
#include "model/mixers/hawk/rglru_ops_cpu.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace rg = ::mesa::kernels::rglru;

float* F(Act act) { return CpuBackend::AsFloats(act); }

class CpuRgLruOps final : public RgLruOps {
 public:
  explicit CpuRgLruOps(const CpuBackendOptions& backend) {
    options_.impl = backend.mesa_impl == kernels::MesaImpl::kReference ? rg::RgLruImpl::kReference
                                                                       : rg::RgLruImpl::kChunked;
    options_.num_threads = backend.num_threads;
  }

  absl::Status Forward(const RgLruActs& a, Act h) override {
    std::vector<float> h_final;
    rg::RgLruForwardOutputs out{.h = {F(h), Tokens(a)}};
    if (a.h_final != nullptr) {
      h_final.resize(States(a));  // h_final may alias h0, which the scan still reads
      out.h_final = h_final;
    }
    if (absl::Status s = rg::RgLruForward(Inputs(a), options_, &out); !s.ok()) return s;
    if (a.h_final != nullptr) std::copy(h_final.begin(), h_final.end(), a.h_final);
    if (a.started_out != nullptr) std::fill(a.started_out, a.started_out + a.batch, 1.0f);
    return absl::OkStatus();
  }

  absl::Status Backward(const RgLruActs& a, Act dh, const RgLruActGrads& grads) override {
    std::vector<float> dp(a.width);
    rg::RgLruGradients out{.du = {F(grads.du), Tokens(a)},
                           .drho = {F(grads.drho), Tokens(a)},
                           .diota = {F(grads.diota), Tokens(a)},
                           .dp = dp};
    if (grads.dh0 != nullptr) out.dh0 = {grads.dh0, States(a)};
    rg::RgLruBackwardInputs bwd{.dh = {F(dh), Tokens(a)}};
    if (a.dh_final != nullptr) bwd.dh_final = {a.dh_final, States(a)};
    if (absl::Status s = rg::RgLruBackward(Inputs(a), options_, bwd, &out); !s.ok()) return s;
    for (int64_t d = 0; d < a.width; ++d) grads.dp[d] += dp[d];
    return absl::OkStatus();
  }

 private:
  static size_t Tokens(const RgLruActs& a) {
    return static_cast<size_t>(a.batch * a.seq_len * a.width);
  }
  static size_t States(const RgLruActs& a) { return static_cast<size_t>(a.batch * a.width); }

  // The operator's span view; the restart masks converted from the model's conventions.
  rg::RgLruInputs Inputs(const RgLruActs& a) {
    rg::RgLruInputs in{.dims = {a.batch, a.seq_len, a.width},
                       .u = {F(a.u), Tokens(a)},
                       .rho = {F(a.rho), Tokens(a)},
                       .iota = {F(a.iota), Tokens(a)},
                       .p = {a.p, static_cast<size_t>(a.width)}};
    if (a.h0 != nullptr) in.h0 = {a.h0, States(a)};
    started_.clear();
    if (a.started != nullptr) {
      for (int64_t b = 0; b < a.batch; ++b) started_.push_back(a.started[b] != 0.0f);
      in.started = started_;
    }
    reset_.clear();
    if (a.doc_start != nullptr) {
      for (int64_t r = 0; r < a.batch * a.seq_len; ++r) {
        reset_.push_back(a.doc_start[r] == r % a.seq_len);
      }
      in.reset = reset_;
    }
    return in;
  }

  rg::RgLruOptions options_;
  std::vector<uint8_t> started_, reset_;
};

const bool kRegistered = RegisterOps<RgLruOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuRgLruOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<RgLruOps> MakeCpuRgLruOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuRgLruOps>(options);
}

}  // namespace mesa::model
