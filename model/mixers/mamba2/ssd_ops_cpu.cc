// The SSD on the CPU backend: kernels/ssd's float32 recurrence (or the float64 oracle when the
// backend runs reference operators). The layer's rows hold x | B | C side by side; the operator
// takes them apart.
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/ssd/ssd_op.h"
#include "model/backend/cpu_backend.h"
#include "model/mixers/mamba2/ssd_ops.h"
#include "model/mixers/mamba2/ssd_ops_cpu.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace sd = ::mesa::kernels::ssd;

float* F(Act act) { return CpuBackend::AsFloats(act); }

class CpuSsdOps final : public SsdOps {
 public:
  explicit CpuSsdOps(const CpuBackendOptions& backend) {
    options_.impl = backend.mesa_impl == kernels::MesaImpl::kReference ? sd::SsdImpl::kReference
                                                                       : sd::SsdImpl::kRecurrent;
    options_.num_threads = backend.num_threads;
  }

  absl::Status Forward(const SsdActs& a, Act y) override {
    const sd::SsdInputs in = Inputs(a);
    // s_final may alias s0, which the operator still reads: written after.
    std::vector<float> s(a.s_final != nullptr ? States(a) : 0);
    sd::SsdForwardOutputs out{.y = {F(y), Values(a)}, .s_final = s};
    if (absl::Status st = sd::SsdForward(in, options_, &out); !st.ok()) return st;
    if (a.s_final != nullptr) std::copy(s.begin(), s.end(), a.s_final);
    return absl::OkStatus();
  }

  absl::Status Backward(const SsdActs& a, Act dy, const SsdActGrads& grads) override {
    const sd::SsdInputs in = Inputs(a);
    std::vector<float> dx(Values(a)), db(Bc(a)), dc(Bc(a)), da(a.heads), dbias(a.heads),
        dd(a.heads);
    sd::SsdGradients g{.dx = dx,
                       .ddt = {F(grads.d_dt_pre), Gates(a)},
                       .da_log = da,
                       .ddt_bias = dbias,
                       .dd = dd,
                       .db = db,
                       .dc = dc};
    if (grads.ds0 != nullptr) g.ds0 = {grads.ds0, States(a)};
    sd::SsdBackwardInputs bwd{.dy = {F(dy), Values(a)}};
    if (a.ds_final != nullptr) bwd.ds_final = {a.ds_final, States(a)};
    if (absl::Status st = sd::SsdBackward(in, options_, bwd, &g); !st.ok()) return st;
    // Back into the rows' x | B | C layout.
    const int64_t inner = a.heads * a.head_dim, row = inner + 2 * a.state;
    float* out = F(grads.d_xbc);
    for (int64_t r = 0; r < a.batch * a.seq_len; ++r) {
      std::copy_n(dx.begin() + r * inner, inner, out + r * row);
      std::copy_n(db.begin() + r * a.state, a.state, out + r * row + inner);
      std::copy_n(dc.begin() + r * a.state, a.state, out + r * row + inner + a.state);
    }
    for (int64_t h = 0; h < a.heads; ++h) {
      grads.d_a_log[h] += da[h];
      grads.d_dt_bias[h] += dbias[h];
      grads.d_d[h] += dd[h];
    }
    return absl::OkStatus();
  }

 private:
  static size_t Values(const SsdActs& a) {
    return static_cast<size_t>(a.batch * a.seq_len * a.heads * a.head_dim);
  }
  static size_t Bc(const SsdActs& a) { return static_cast<size_t>(a.batch * a.seq_len * a.state); }
  static size_t Gates(const SsdActs& a) {
    return static_cast<size_t>(a.batch * a.seq_len * a.heads);
  }
  static size_t States(const SsdActs& a) {
    return static_cast<size_t>(a.batch * a.heads * a.head_dim * a.state);
  }

  // The operator's span view: x, B, C taken apart from the rows; resets from document starts.
  sd::SsdInputs Inputs(const SsdActs& a) {
    const int64_t inner = a.heads * a.head_dim, row = inner + 2 * a.state;
    x_.resize(Values(a));
    b_.resize(Bc(a));
    c_.resize(Bc(a));
    const float* xbc = F(a.xbc);
    for (int64_t r = 0; r < a.batch * a.seq_len; ++r) {
      std::copy_n(xbc + r * row, inner, x_.begin() + r * inner);
      std::copy_n(xbc + r * row + inner, a.state, b_.begin() + r * a.state);
      std::copy_n(xbc + r * row + inner + a.state, a.state, c_.begin() + r * a.state);
    }
    const size_t h = static_cast<size_t>(a.heads);
    sd::SsdInputs in{.dims = {a.batch, a.seq_len, a.heads, a.head_dim, 1, a.state},
                     .x = x_,
                     .dt = {F(a.dt_pre), Gates(a)},
                     .a_log = {a.a_log, h},
                     .dt_bias = {a.dt_bias, h},
                     .d = {a.d, h},
                     .b = b_,
                     .c = c_};
    if (a.s0 != nullptr) in.s0 = {a.s0, States(a)};
    reset_.clear();
    if (a.doc_start != nullptr) {
      for (int64_t r = 0; r < a.batch * a.seq_len; ++r) {
        reset_.push_back(a.doc_start[r] == r % a.seq_len && r % a.seq_len != 0);
      }
      in.reset = reset_;
    }
    return in;
  }

  sd::SsdOptions options_;
  std::vector<float> x_, b_, c_;
  std::vector<uint8_t> reset_;
};

const bool kRegistered = RegisterOps<SsdOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuSsdOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<SsdOps> MakeCpuSsdOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuSsdOps>(options);
}

}  // namespace mesa::model
