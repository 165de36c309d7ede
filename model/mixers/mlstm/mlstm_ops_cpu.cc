// The mLSTM on the CPU backend: kernels/mlstm's float32 recurrence (or the float64 oracle when the
// backend runs reference operators) on the backend's float32 activations.
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/mlstm/mlstm_op.h"
#include "model/backend/cpu_backend.h"
#include "model/mixers/mixer_ops.h"
#include "model/mixers/mlstm/mlstm_ops.h"
#include "model/mixers/mlstm/mlstm_ops_cpu.h"

namespace mesa::model {
namespace {

namespace ml = ::mesa::kernels::mlstm;

float* F(Act act) { return CpuBackend::AsFloats(act); }

class CpuMlstmOps final : public MlstmOps {
 public:
  explicit CpuMlstmOps(const CpuBackendOptions& backend) {
    options_.impl = backend.mesa_impl == kernels::MesaImpl::kReference ? ml::MlstmImpl::kReference
                                                                       : ml::MlstmImpl::kRecurrent;
    options_.num_threads = backend.num_threads;
  }

  absl::Status Forward(const MlstmActs& a, Act h) override {
    const ml::MlstmInputs in = Inputs(a);
    // The finals may alias the initial state, which the operator still reads: written after.
    std::vector<float> c(a.c_final != nullptr ? CElems(a) : 0),
        n(a.c_final != nullptr ? NElems(a) : 0), m(a.c_final != nullptr ? MElems(a) : 0);
    ml::MlstmForwardOutputs out{.h = {F(h), Values(a)}, .c_final = c, .n_final = n, .m_final = m};
    if (absl::Status s = ml::MlstmForward(in, options_, &out); !s.ok()) return s;
    if (a.c_final != nullptr) {
      std::copy(c.begin(), c.end(), a.c_final);
      std::copy(n.begin(), n.end(), a.n_final);
      std::copy(m.begin(), m.end(), a.m_final);
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const MlstmActs& a, Act dh, const MlstmActGrads& grads) override {
    const ml::MlstmInputs in = Inputs(a);
    ml::MlstmBackwardInputs bwd{.dh = {F(dh), Values(a)}};
    if (a.dc_final != nullptr) {
      bwd.dc_final = {a.dc_final, CElems(a)};
      bwd.dn_final = {a.dn_final, NElems(a)};
    }
    ml::MlstmGradients g{.dq = {F(grads.dq), Keys(a)},
                         .dk = {F(grads.dk), Keys(a)},
                         .dv = {F(grads.dv), Values(a)},
                         .di = {F(grads.di_pre), Gates(a)},
                         .df = {F(grads.df_pre), Gates(a)}};
    if (grads.dc0 != nullptr) {
      g.dc0 = {grads.dc0, CElems(a)};
      g.dn0 = {grads.dn0, NElems(a)};
    }
    if (absl::Status s = ml::MlstmBackward(in, options_, bwd, &g); !s.ok()) return s;
    // The operator's k was scaled by 1/sqrt(D): the chain rule back to the layer's k.
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    for (float& x : g.dk) x *= scale;
    return absl::OkStatus();
  }

 private:
  static size_t Keys(const MlstmActs& a) {
    return static_cast<size_t>(a.batch * a.seq_len * a.heads * a.head_dim);
  }
  static size_t Values(const MlstmActs& a) { return Keys(a); }
  static size_t Gates(const MlstmActs& a) {
    return static_cast<size_t>(a.batch * a.seq_len * a.heads);
  }
  static size_t CElems(const MlstmActs& a) {
    return static_cast<size_t>(a.batch * a.heads * a.head_dim * a.head_dim);
  }
  static size_t NElems(const MlstmActs& a) {
    return static_cast<size_t>(a.batch * a.heads * a.head_dim);
  }
  static size_t MElems(const MlstmActs& a) { return static_cast<size_t>(a.batch * a.heads); }

  ml::MlstmInputs Inputs(const MlstmActs& a) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
    k_scaled_.assign(F(a.k), F(a.k) + Keys(a));
    for (float& x : k_scaled_) x *= scale;
    ml::MlstmInputs in{.dims = {a.batch, a.seq_len, a.heads, a.head_dim, a.head_dim},
                       .q = {F(a.q), Keys(a)},
                       .k = k_scaled_,
                       .v = {F(a.v), Values(a)},
                       .i = {F(a.i_pre), Gates(a)},
                       .f = {F(a.f_pre), Gates(a)}};
    if (a.c0 != nullptr) {
      in.c0 = {a.c0, CElems(a)};
      in.n0 = {a.n0, NElems(a)};
      in.m0 = {a.m0, MElems(a)};
    }
    reset_.clear();
    if (a.doc_start != nullptr) {
      for (int64_t r = 0; r < a.batch * a.seq_len; ++r) {
        reset_.push_back(a.doc_start[r] == r % a.seq_len && r % a.seq_len != 0);
      }
      in.reset = reset_;
    }
    return in;
  }

  ml::MlstmOptions options_;
  std::vector<float> k_scaled_;
  std::vector<uint8_t> reset_;
};

const bool kRegistered = RegisterOps<MlstmOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuMlstmOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<MlstmOps> MakeCpuMlstmOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuMlstmOps>(options);
}

}  // namespace mesa::model
