#include "model/mixers/attention/attention_ops_cpu.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/attention/attention_op.h"
#include "model/mixers/attention/rotary.h"
#include "model/mixers/mixer_ops.h"

namespace mesa::model {
namespace {

namespace ka = ::mesa::kernels::attention;

float* F(Act act) { return CpuBackend::AsFloats(act); }

ka::AttnInputs ToInputs(const AttnActs& a) {
  const size_t n = static_cast<size_t>(a.shape.TokenElems());
  return {.dims = {a.shape.batch, a.shape.seq_len, a.shape.heads, a.shape.head_dim},
          .q = {F(a.q), n},
          .k = {F(a.k), n},
          .v = {F(a.v), n},
          .doc_start = a.doc_start != nullptr
                           ? std::span<const int32_t>(
                                 a.doc_start, static_cast<size_t>(a.shape.batch * a.shape.seq_len))
                           : std::span<const int32_t>()};
}

class CpuAttentionOps final : public AttentionOps {
 public:
  explicit CpuAttentionOps(const CpuBackendOptions& backend) {
    options_.impl = backend.mesa_impl == kernels::MesaImpl::kReference ? ka::AttnImpl::kReference
                                                                       : ka::AttnImpl::kCpu;
    options_.num_threads = backend.num_threads;
  }

  absl::Status Rotary(Act x, const AttnShape& s, std::span<const int64_t> starts,
                      bool inverse) override {
    RotaryCpu(F(x), s.batch, s.seq_len, s.heads, s.head_dim, starts, inverse);
    return absl::OkStatus();
  }

  absl::Status Forward(const AttnActs& in, Act o) override {
    ka::AttnOptions options = options_;
    options.window = in.window;
    lse_.resize(static_cast<size_t>(in.shape.batch * in.shape.seq_len * in.shape.heads));
    ka::AttnForwardOutputs out{.o = {F(o), static_cast<size_t>(in.shape.TokenElems())},
                               .lse = lse_};
    return ka::AttentionForward(ToInputs(in), options, &out);
  }

  absl::Status Backward(const AttnActs& in, Act o, Act d_o, Act dq, Act dk, Act dv) override {
    ka::AttnOptions options = options_;
    options.window = in.window;
    const size_t n = static_cast<size_t>(in.shape.TokenElems());
    ka::AttnBackwardInputs bwd{.d_o = {F(d_o), n}};
    // The forward's lse when it was of this shape (the layer's backward follows its forward).
    if (lse_.size() == static_cast<size_t>(in.shape.batch * in.shape.seq_len * in.shape.heads)) {
      bwd.o = {F(o), n};
      bwd.lse = lse_;
    }
    ka::AttnGradients grads{.dq = {F(dq), n}, .dk = {F(dk), n}, .dv = {F(dv), n}};
    return ka::AttentionBackward(ToInputs(in), bwd, options, &grads);
  }

  absl::Status ForwardCached(const AttnActs& in, const KvCacheView& cache, int first_row,
                             Act o) override {
    const int64_t hd = in.shape.heads * in.shape.head_dim, cap = cache.capacity;
    const float* q = F(in.q);
    const float* k = F(in.k);
    const float* v = F(in.v);
    float* out = F(o);
    // Token by token: a piece longer than a sliding window overwrites slots that its own earlier
    // tokens still attend to.
    for (int64_t b = 0; b < in.shape.batch; ++b) {
      const int64_t row = first_row + b;
      float* k_row = F(cache.k) + row * cap * hd;
      float* v_row = F(cache.v) + row * cap * hd;
      for (int64_t t = 0; t < in.shape.seq_len; ++t) {
        const int64_t pos = cache.lengths[row] + t;
        const int64_t token = b * in.shape.seq_len + t;
        std::memcpy(k_row + (pos % cap) * hd, k + token * hd, hd * sizeof(float));
        std::memcpy(v_row + (pos % cap) * hd, v + token * hd, hd * sizeof(float));
        const int32_t length = static_cast<int32_t>(std::min(pos + 1, cap));
        ka::AttnDecodeInputs step{.batch = 1,
                                  .heads = in.shape.heads,
                                  .head_dim = in.shape.head_dim,
                                  .capacity = cap,
                                  .q = {q + token * hd, static_cast<size_t>(hd)},
                                  .k_cache = {k_row, static_cast<size_t>(cap * hd)},
                                  .v_cache = {v_row, static_cast<size_t>(cap * hd)},
                                  .lengths = {&length, 1}};
        if (absl::Status s = ka::AttentionDecode(step, /*scale=*/0.0f,
                                                 {out + token * hd, static_cast<size_t>(hd)},
                                                 options_.num_threads);
            !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  ka::AttnOptions options_;
  std::vector<float> lse_;  // of the last Forward, [B,T,H]
};

const bool kRegistered = RegisterOps<AttentionOps>("cpu", [](Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return MakeCpuAttentionOps(cpu != nullptr ? cpu->options() : CpuBackendOptions{});
});

}  // namespace

std::unique_ptr<AttentionOps> MakeCpuAttentionOps(const CpuBackendOptions& options) {
  return std::make_unique<CpuAttentionOps>(options);
}

}  // namespace mesa::model
