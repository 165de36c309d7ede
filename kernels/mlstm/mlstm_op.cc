#include "kernels/mlstm/mlstm_op.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/mlstm/chunked.h"
#include "kernels/mlstm/recurrent.h"

namespace mesa::kernels::mlstm {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "the mLSTM's CUDA kernels are not linked into this binary "
      "(//kernels/mlstm/cuda:mlstm_cuda_register); use impl = chunked, recurrent or reference");
}

std::vector<double> D(std::span<const float> x) { return {x.begin(), x.end()}; }

void Back(const std::vector<double>& x, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(x[i]);
}

// The float64 oracle on the op's float32 tensors.
struct Problem64 {
  explicit Problem64(const MlstmInputs& in)
      : q(D(in.q)),
        k(D(in.k)),
        v(D(in.v)),
        i(D(in.i)),
        f(D(in.f)),
        c0(D(in.c0)),
        n0(D(in.n0)),
        m0(D(in.m0)),
        p{in.dims, q, k, v, i, f, in.reset, c0, n0, m0} {}
  std::vector<double> q, k, v, i, f, c0, n0, m0;
  MlstmProblem<double> p;
};

}  // namespace

absl::Status MlstmForward(const MlstmInputs& in, const MlstmOptions& options,
                          MlstmForwardOutputs* out) {
  if (auto s = ValidateMlstmInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateMlstmForwardOutputs(in, *out); !s.ok()) return s;
  if (options.impl == MlstmImpl::kRecurrent) return RecurrentForward(in, options, out);
  if (options.impl == MlstmImpl::kChunked) {
    ChunkedForward(in, options, *out);
    return absl::OkStatus();
  }
  if (options.impl == MlstmImpl::kCuda) {
    const MlstmCudaBackend* cuda = GetMlstmCudaBackend();
    return cuda == nullptr ? NoCuda() : cuda->forward(in, options, out);
  }
  const Problem64 p(in);
  std::vector<double> h(out->h.size()), c(out->c_final.size()), n(out->n_final.size()),
      m(out->m_final.size());
  ReferenceForward64(p.p, options.eps, {h, c, n, m});
  Back(h, out->h);
  Back(c, out->c_final);
  Back(n, out->n_final);
  Back(m, out->m_final);
  return absl::OkStatus();
}

absl::Status MlstmBackward(const MlstmInputs& in, const MlstmOptions& options,
                           const MlstmBackwardInputs& bwd, MlstmGradients* grads) {
  if (auto s = ValidateMlstmInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateMlstmBackward(in, bwd, *grads); !s.ok()) return s;
  if (options.impl == MlstmImpl::kRecurrent) return RecurrentBackward(in, options, bwd, grads);
  if (options.impl == MlstmImpl::kChunked) {
    ChunkedBackward(in, options, bwd, *grads);
    return absl::OkStatus();
  }
  if (options.impl == MlstmImpl::kCuda) {
    const MlstmCudaBackend* cuda = GetMlstmCudaBackend();
    return cuda == nullptr ? NoCuda() : cuda->backward(in, options, bwd, grads);
  }
  const Problem64 p(in);
  const std::vector<double> dh = D(bwd.dh), dcf = D(bwd.dc_final), dnf = D(bwd.dn_final);
  std::vector<double> dq(grads->dq.size()), dk(grads->dk.size()), dv(grads->dv.size()),
      di(grads->di.size()), df(grads->df.size()), dc0(grads->dc0.size()), dn0(grads->dn0.size());
  ReferenceBackward64(p.p, options.eps, {dh, dcf, dnf}, {dq, dk, dv, di, df, dc0, dn0});
  Back(dq, grads->dq);
  Back(dk, grads->dk);
  Back(dv, grads->dv);
  Back(di, grads->di);
  Back(df, grads->df);
  Back(dc0, grads->dc0);
  Back(dn0, grads->dn0);
  return absl::OkStatus();
}

absl::StatusOr<MlstmImpl> ParseMlstmImpl(std::string_view name) {
  if (name == "reference") return MlstmImpl::kReference;
  if (name == "recurrent") return MlstmImpl::kRecurrent;
  if (name == "chunked") return MlstmImpl::kChunked;
  if (name == "cuda") return MlstmImpl::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mlstm impl '", std::string(name),
                   "' (expected reference, recurrent, chunked or cuda)"));
}

std::string_view MlstmImplName(MlstmImpl impl) {
  switch (impl) {
    case MlstmImpl::kReference:
      return "reference";
    case MlstmImpl::kRecurrent:
      return "recurrent";
    case MlstmImpl::kChunked:
      return "chunked";
    case MlstmImpl::kCuda:
      return "cuda";
  }
  return "unknown";
}

}  // namespace mesa::kernels::mlstm
