#include "kernels/rglru/rglru_types.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/tensor_checks.h"

namespace mesa::kernels::rglru {
namespace {

const RgLruCudaBackend*& CudaBackendSlot() {
  static const RgLruCudaBackend* backend = nullptr;
  return backend;
}

}  // namespace

absl::Status ValidateRgLruInputs(const RgLruInputs& in, const RgLruOptions& options) {
  const RgLruDims& d = in.dims;
  if (d.batch < 1 || d.seq_len < 1 || d.width < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch, seq_len and width must be >= 1, got B=",
                                                   d.batch, " T=", d.seq_len, " D=", d.width));
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads must be >= 0, got ", options.num_threads));
  }
  if (options.chunk_size < 1 || options.chunk_size > kMaxRgLruChunkSize) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_size must be in [1, ", kMaxRgLruChunkSize,
                                                   "], got ", options.chunk_size));
  }
  if (auto s = CheckSize("x", in.u.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("r", in.rho.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("i", in.iota.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("p", in.p.size(), d.width); !s.ok()) return s;
  if (auto s = CheckOptionalSize("h0", in.h0.size(), d.StateElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("started", in.started.size(), d.batch); !s.ok()) return s;
  if (auto s = CheckOptionalSize("reset", in.reset.size(), d.batch * d.seq_len); !s.ok()) return s;
  for (auto [name, data] :
       {std::pair{"x", in.u}, {"r", in.rho}, {"i", in.iota}, {"p", in.p}, {"h0", in.h0}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateRgLruForwardOutputs(const RgLruInputs& in, const RgLruForwardOutputs& out) {
  if (auto s = CheckSize("h", out.h.size(), in.dims.TokenElems()); !s.ok()) return s;
  return CheckOptionalSize("h_final", out.h_final.size(), in.dims.StateElems());
}

absl::Status ValidateRgLruBackward(const RgLruInputs& in, const RgLruBackwardInputs& bwd,
                                   const RgLruGradients& grads) {
  const RgLruDims& d = in.dims;
  if (auto s = CheckSize("do", bwd.dh.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dh_final", bwd.dh_final.size(), d.StateElems()); !s.ok()) {
    return s;
  }
  if (auto s = CheckSize("dx", grads.du.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dr", grads.drho.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("di", grads.diota.size(), d.TokenElems()); !s.ok()) return s;
  if (auto s = CheckSize("dp", grads.dp.size(), d.width); !s.ok()) return s;
  if (auto s = CheckOptionalSize("dh0", grads.dh0.size(), d.StateElems()); !s.ok()) return s;
  for (auto [name, data] : {std::pair{"do", bwd.dh}, {"dh_final", bwd.dh_final}}) {
    if (auto s = CheckFinite(name, data); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void RegisterRgLruCudaBackend(const RgLruCudaBackend& backend) {
  static RgLruCudaBackend stored;
  stored = backend;
  CudaBackendSlot() = &stored;
}

const RgLruCudaBackend* GetRgLruCudaBackend() { return CudaBackendSlot(); }

}  // namespace mesa::kernels::rglru
