#include "kernels/ssd/ssd_op.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/ssd/chunked.h"
#include "kernels/ssd/recurrent.h"

namespace mesa::kernels::ssd {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "the SSD's CUDA kernels are not linked into this binary "
      "(//kernels/ssd/cuda:ssd_cuda_register); use impl = chunked, recurrent or reference");
}

std::vector<double> D(std::span<const float> x) { return {x.begin(), x.end()}; }

void Back(const std::vector<double>& x, std::span<float> out) {
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(x[i]);
}

SsdProblem<float> Floats(const SsdInputs& in) {
  return {in.dims, in.x, in.dt, in.a_log, in.dt_bias, in.d, in.b, in.c, in.reset, in.s0};
}

// The float64 oracle on the op's float32 tensors.
struct Problem64 {
  explicit Problem64(const SsdInputs& in)
      : x(D(in.x)),
        dt(D(in.dt)),
        a_log(D(in.a_log)),
        dt_bias(D(in.dt_bias)),
        d(D(in.d)),
        b(D(in.b)),
        c(D(in.c)),
        s0(D(in.s0)),
        p{in.dims, x, dt, a_log, dt_bias, d, b, c, in.reset, s0} {}
  std::vector<double> x, dt, a_log, dt_bias, d, b, c, s0;
  SsdProblem<double> p;
};

}  // namespace

absl::Status SsdForward(const SsdInputs& in, const SsdOptions& options, SsdForwardOutputs* out) {
  if (auto s = ValidateSsdInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateSsdForwardOutputs(in, *out); !s.ok()) return s;
  if (options.impl == SsdImpl::kRecurrent) {
    SsdRecurrentForward<float>(Floats(in), options, {out->y, out->s_final});
    return absl::OkStatus();
  }
  if (options.impl == SsdImpl::kChunked) {
    SsdChunkedForward(in, options, *out);
    return absl::OkStatus();
  }
  if (options.impl == SsdImpl::kCuda) {
    const SsdCudaBackend* cuda = GetSsdCudaBackend();
    return cuda == nullptr ? NoCuda() : cuda->forward(in, options, out);
  }
  const Problem64 p(in);
  std::vector<double> y(out->y.size()), s(out->s_final.size());
  SsdOptions one = options;
  one.num_threads = 1;
  SsdRecurrentForward<double>(p.p, one, {y, s});
  Back(y, out->y);
  Back(s, out->s_final);
  return absl::OkStatus();
}

absl::Status SsdBackward(const SsdInputs& in, const SsdOptions& options,
                         const SsdBackwardInputs& bwd, SsdGradients* grads) {
  if (auto s = ValidateSsdInputs(in, options); !s.ok()) return s;
  if (auto s = ValidateSsdBackward(in, bwd, *grads); !s.ok()) return s;
  SsdGradients& g = *grads;
  if (options.impl == SsdImpl::kRecurrent) {
    SsdRecurrentBackward<float>(Floats(in), options, {bwd.dy, bwd.ds_final},
                                {g.dx, g.ddt, g.da_log, g.ddt_bias, g.dd, g.db, g.dc, g.ds0});
    return absl::OkStatus();
  }
  if (options.impl == SsdImpl::kChunked) {
    SsdChunkedBackward(in, options, bwd, g);
    return absl::OkStatus();
  }
  if (options.impl == SsdImpl::kCuda) {
    const SsdCudaBackend* cuda = GetSsdCudaBackend();
    return cuda == nullptr ? NoCuda() : cuda->backward(in, options, bwd, grads);
  }
  const Problem64 p(in);
  const std::vector<double> dy = D(bwd.dy), dsf = D(bwd.ds_final);
  std::vector<double> dx(g.dx.size()), ddt(g.ddt.size()), da(g.da_log.size()),
      dbias(g.ddt_bias.size()), dd(g.dd.size()), db(g.db.size()), dc(g.dc.size()),
      ds0(g.ds0.size());
  SsdOptions one = options;
  one.num_threads = 1;
  SsdRecurrentBackward<double>(p.p, one, {dy, dsf}, {dx, ddt, da, dbias, dd, db, dc, ds0});
  Back(dx, g.dx);
  Back(ddt, g.ddt);
  Back(da, g.da_log);
  Back(dbias, g.ddt_bias);
  Back(dd, g.dd);
  Back(db, g.db);
  Back(dc, g.dc);
  Back(ds0, g.ds0);
  return absl::OkStatus();
}

absl::StatusOr<SsdImpl> ParseSsdImpl(std::string_view name) {
  if (name == "reference") return SsdImpl::kReference;
  if (name == "recurrent") return SsdImpl::kRecurrent;
  if (name == "chunked") return SsdImpl::kChunked;
  if (name == "cuda") return SsdImpl::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown mamba2 impl '", std::string(name),
                   "' (expected reference, recurrent, chunked or cuda)"));
}

std::string_view SsdImplName(SsdImpl impl) {
  switch (impl) {
    case SsdImpl::kReference:
      return "reference";
    case SsdImpl::kRecurrent:
      return "recurrent";
    case SsdImpl::kChunked:
      return "chunked";
    case SsdImpl::kCuda:
      return "cuda";
  }
  return "?";
}

}  // namespace mesa::kernels::ssd
