// Op-check tool: runs one operator (Mesa, the DeltaNet family, attention, the RG-LRU) on tensors
// from a safetensors file; one kOps row per op.
//
//   bazel run //kernels:mesa_op -- --in IN.safetensors --out OUT.safetensors
//       [--op mesa|deltanet|gated_deltanet|attention|rglru|mlstm|mamba2] [--window W]
//       [--cg_steps N | --cg_tol EPS --cg_max N] [--device cpu|cuda] [--impl reference|chunked]
//
// --op deltanet / gated_deltanet (--device cpu or cuda): IN: q, k, v [B,T,H,D]; beta [B,T,H];
// log_gamma [B,T,H] (gated only); optional do [B,T,H,D]; optional s0 [B,H,D,D] (or [N,H,D,D] with
// cu_seqlens); optional cu_seqlens [N+1]. OUT: o and s_final; with do: dq, dk, dv, dbeta (and
// dlog_gamma, and ds0 when s0 was given). The CG flags do not apply.
//
// --op attention (--device cpu or cuda; --impl reference|cpu on the CPU): causal softmax attention,
// scale 1/sqrt(D), no rotary; --window W (0, the default: global causal; W >= 1: each token sees
// itself and the W-1 before it). IN: q, k, v [B,T,H,D]; optional do [B,T,H,D]. OUT: o [B,T,H,D]
// and lse [B,T,H] (the rows' log-sum-exp); with do: dq, dk, dv. The CG flags do not apply.
//
// --op rglru (--device cpu or cuda; --impl reference|chunked on the CPU): the RG-LRU recurrence of
// Hawk (docs/math.md §9), c = 8, a restart at t = 0 of every row. IN: x (the conv output u), r
// (ρ), i (ι) [B,T,D]; p [D]; optional do [B,T,D]. OUT: o [B,T,D] (= h); with do: dx, dr, di and
// dp [D] (summed over B and T), with the clipped sqrt derivative.
//
// --op mlstm (--device cpu|cuda; --impl reference|recurrent|chunked on the CPU): the mLSTM's matrix
// memory (docs/math.md §8.9), stabilised, m_0 = 0, eps = 1e-6, m not differentiated. IN: q, k
// [B,T,H,Dk] (k already scaled by 1/sqrt(Dk)), v [B,T,H,Dv], i (ĩ), f (f̃, sigmoid forget gate)
// [B,T,H]; optional do [B,T,H,Dv]. OUT: o [B,T,H,Dv]; with do: dq, dk, dv, di, df.
//
// --op mamba2 (--device cpu|cuda; --impl reference|recurrent|chunked on the CPU): Mamba-2's SSD
// scan (docs/math.md §8.10), no dt clamp; head h reads group h / (H/G). IN: x [B,T,H,P], dt [B,T,H]
// (before softplus and bias), A_log, dt_bias, D [H], B, C [B,T,G,N]; optional do [B,T,H,P]. OUT: o
// [B,T,H,P] (= y); with do: dx, ddt, dA_log, ddt_bias, dD (summed over B and T), dB, dC.
//
// --op mesa:
// IN:  q, k, v [B,T,H,D]; log_gamma, beta [B,T,H]; lambda [H,D]; optional do [B,T,H,D];
//      optional h0, g0 [B,H,D,D] (or [N,H,D,D] with cu_seqlens); optional cu_seqlens [N+1]
//      (I32/I64). Float tensors may be F32, F64, BF16 or F16 (converted to float32).
// OUT: F32 o; with do: dq, dk, dv, dlog_gamma, dbeta, dlambda (and dh0, dg0 when h0/g0 were
//      given); F32 scalar cg_steps_mean (the forward's mean CG steps per token).
// Errors print "mesa_op: error: ..." to stderr and exit 1. See docs/kernels.md.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/cli_flags.h"
#include "formats/safetensors.h"
#include "kernels/attention/attention_op.h"
#include "kernels/common/limits.h"
#include "kernels/deltanet/deltanet_op.h"
#include "kernels/mesa/mesa_op.h"
#include "kernels/mlstm/mlstm_op.h"
#include "kernels/rglru/rglru_op.h"
#include "kernels/ssd/ssd_op.h"

ABSL_FLAG(std::string, in, "", "input safetensors file (q, k, v, log_gamma, beta, lambda[, do])");
ABSL_FLAG(std::string, out, "", "output safetensors file");
ABSL_FLAG(int32_t, cg_steps, -1, "fixed number of CG steps (default 30; 0 = GLA readout q* = q)");
ABSL_FLAG(double, cg_tol, 0.0, "tolerance mode: stop a token when ||r|| <= cg_tol * ||r0||");
ABSL_FLAG(int32_t, cg_max, -1, "maximum CG steps in tolerance mode (default 30)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, impl, "",
          "default chunked. "
          "CPU implementation: reference (float64) or chunked (float32)");
ABSL_FLAG(
    std::string, reference_solver, "exact",
    "for --impl reference: exact (Cholesky, the oracle) or cg (float64 CG, same step semantics)");
ABSL_FLAG(int32_t, threads, 0, "CPU threads (0 = all cores)");
ABSL_FLAG(std::string, op, "mesa",
          "mesa, deltanet, gated_deltanet, attention, rglru, mlstm or mamba2");
ABSL_FLAG(int64_t, window, 0,
          "--op attention: 0 = global causal; W >= 1 = each token sees the last W tokens");

namespace mesa::kernels {
namespace {

namespace st = ::mesa::safetensors;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Resolves a path relative to where `bazel run` was invoked.
std::string UserPath(const std::string& path) {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (path.empty() || path[0] == '/' || dir == nullptr) return path;
  return absl::StrCat(dir, "/", path);
}

struct LoadedTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

absl::StatusOr<LoadedTensor> LoadFloat(const st::SafetensorsFile& file, const std::string& name,
                                       const std::vector<int64_t>& expected_shape) {
  absl::StatusOr<st::TensorView> view = file.Get(name);
  if (!view.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is missing required tensor '", name, "'"));
  }
  if (view->dtype != st::DType::kF32 && view->dtype != st::DType::kF64 &&
      view->dtype != st::DType::kBF16 && view->dtype != st::DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has dtype ",
                                                   std::string(st::DTypeName(view->dtype)),
                                                   "; expected F32, F64, BF16 or F16"));
  }
  if (!expected_shape.empty() && view->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ",
                                                   ShapeString(view->shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  absl::StatusOr<std::vector<float>> data = st::ToFloat32(*view);
  if (!data.ok()) return data.status();
  return LoadedTensor{view->shape, std::move(*data)};
}

// cu_seqlens (I32/I64, 1-D) when present.
absl::StatusOr<std::vector<int32_t>> LoadOffsets(const st::SafetensorsFile& file) {
  std::vector<int32_t> cu_seqlens;
  if (!file.Has("cu_seqlens")) return cu_seqlens;
  absl::StatusOr<st::TensorView> view = file.Get("cu_seqlens");
  if (view->dtype != st::DType::kI32 && view->dtype != st::DType::kI64) {
    return absl::InvalidArgumentError("tensor 'cu_seqlens' must be I32 or I64");
  }
  if (view->shape.size() != 1) {
    return absl::InvalidArgumentError("tensor 'cu_seqlens' must be 1-D [N+1]");
  }
  absl::StatusOr<std::vector<double>> values = st::ToFloat64(*view);
  if (!values.ok()) return values.status();
  for (double value : *values) {
    if (value < 0 || value > 2147483647.0) {
      return absl::InvalidArgumentError("cu_seqlens entry out of int32 range");
    }
    cu_seqlens.push_back(static_cast<int32_t>(value));
  }
  if (cu_seqlens.size() == 1)
    return absl::InvalidArgumentError("cu_seqlens needs at least 2 entries");
  return cu_seqlens;
}

// --device and --impl of the DeltaNet and attention ops (impl `cpu_default` on the CPU, cuda on
// the GPU); the CG flags are Mesa's only.
absl::StatusOr<std::string> NonMesaImpl(const std::string& cpu_default) {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
  }
  if (absl::GetFlag(FLAGS_cg_steps) != -1 || absl::GetFlag(FLAGS_cg_tol) != 0.0 ||
      absl::GetFlag(FLAGS_cg_max) != -1) {
    return absl::InvalidArgumentError("the CG flags apply to --op mesa only");
  }
  const std::string impl = absl::GetFlag(FLAGS_impl).empty()
                               ? (device == "cuda" ? "cuda" : cpu_default)
                               : absl::GetFlag(FLAGS_impl);
  if ((device == "cuda") != (impl == "cuda")) {
    return absl::InvalidArgumentError(absl::StrCat("--impl ", impl, " does not run on --device ",
                                                   device, " (cuda runs impl cuda only)"));
  }
  return impl;
}

// q [B,T,H,D], and k, v of the same shape.
absl::StatusOr<std::vector<LoadedTensor>> LoadQkv(const st::SafetensorsFile& file) {
  absl::StatusOr<LoadedTensor> q = LoadFloat(file, "q", {});
  if (!q.ok()) return q.status();
  if (q->shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'q' must have shape [B, T, H, D], got ", ShapeString(q->shape)));
  }
  std::vector<LoadedTensor> qkv = {*std::move(q)};
  for (const char* name : {"k", "v"}) {
    absl::StatusOr<LoadedTensor> t = LoadFloat(file, name, qkv[0].shape);
    if (!t.ok()) return t.status();
    qkv.push_back(*std::move(t));
  }
  return qkv;
}

// --op rglru: x (= u) [B,T,D], r (= ρ), i (= ι) of the same shape, p [D]; optional do.
absl::Status RunRgLru(const st::SafetensorsFile& file, const std::string& out_path) {
  namespace rg = ::mesa::kernels::rglru;
  absl::StatusOr<std::string> impl = NonMesaImpl("chunked");
  if (!impl.ok()) return impl.status();
  absl::StatusOr<rg::RgLruImpl> parsed = rg::ParseRgLruImpl(*impl);
  if (!parsed.ok()) return parsed.status();
  const rg::RgLruOptions options{.impl = *parsed, .num_threads = absl::GetFlag(FLAGS_threads)};
  absl::StatusOr<LoadedTensor> x = LoadFloat(file, "x", {});
  if (!x.ok()) return x.status();
  if (x->shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'x' must have shape [B, T, D], got ", ShapeString(x->shape)));
  }
  const int64_t b = x->shape[0], t = x->shape[1], d = x->shape[2];
  absl::StatusOr<LoadedTensor> r = LoadFloat(file, "r", x->shape);
  if (!r.ok()) return r.status();
  absl::StatusOr<LoadedTensor> i = LoadFloat(file, "i", x->shape);
  if (!i.ok()) return i.status();
  absl::StatusOr<LoadedTensor> p = LoadFloat(file, "p", {d});
  if (!p.ok()) return p.status();
  const rg::RgLruInputs in{
      .dims = {b, t, d}, .u = x->data, .rho = r->data, .iota = i->data, .p = p->data};
  std::vector<float> h(x->data.size());
  rg::RgLruForwardOutputs fwd{.h = h};
  if (absl::Status s = rg::RgLruForward(in, options, &fwd); !s.ok()) return s;
  std::vector<st::TensorView> outputs = {st::F32View("o", x->shape, h)};
  std::vector<float> dx, dr, di, dp;
  if (file.Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(file, "do", x->shape);
    if (!d_o.ok()) return d_o.status();
    dx.resize(h.size());
    dr.resize(h.size());
    di.resize(h.size());
    dp.resize(d);
    rg::RgLruGradients grads{.du = dx, .drho = dr, .diota = di, .dp = dp};
    if (absl::Status s = rg::RgLruBackward(in, options, {.dh = d_o->data}, &grads); !s.ok()) {
      return s;
    }
    outputs.push_back(st::F32View("dx", x->shape, dx));
    outputs.push_back(st::F32View("dr", x->shape, dr));
    outputs.push_back(st::F32View("di", x->shape, di));
    outputs.push_back(st::F32View("dp", {d}, dp));
  }
  const std::string impl_name(rg::RgLruImplName(options.impl));
  if (absl::Status s = st::WriteFile(out_path, outputs, {{"op", "rglru"}, {"impl", impl_name}});
      !s.ok()) {
    return s;
  }
  std::printf("mesa_op: op=rglru impl=%s B=%lld T=%lld D=%lld%s -> %s\n", impl_name.c_str(),
              static_cast<long long>(b), static_cast<long long>(t), static_cast<long long>(d),
              file.Has("do") ? " (with gradients)" : "", out_path.c_str());
  return absl::OkStatus();
}

// --op mlstm: q, k [B,T,H,Dk] (k already scaled), v [B,T,H,Dv], i, f [B,T,H]; optional do.
absl::Status RunMlstm(const st::SafetensorsFile& file, const std::string& out_path) {
  namespace ml = ::mesa::kernels::mlstm;
  absl::StatusOr<std::string> impl = NonMesaImpl("recurrent");
  if (!impl.ok()) return impl.status();
  absl::StatusOr<ml::MlstmImpl> parsed = ml::ParseMlstmImpl(*impl);
  if (!parsed.ok()) return parsed.status();
  const ml::MlstmOptions options{.impl = *parsed, .num_threads = absl::GetFlag(FLAGS_threads)};
  absl::StatusOr<LoadedTensor> q = LoadFloat(file, "q", {});
  if (!q.ok()) return q.status();
  if (q->shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'q' must have shape [B, T, H, Dk], got ", ShapeString(q->shape)));
  }
  const int64_t b = q->shape[0], t = q->shape[1], h = q->shape[2], dk = q->shape[3];
  absl::StatusOr<LoadedTensor> k = LoadFloat(file, "k", q->shape);
  if (!k.ok()) return k.status();
  absl::StatusOr<LoadedTensor> v = LoadFloat(file, "v", {});
  if (!v.ok()) return v.status();
  if (v->shape.size() != 4 || v->shape[0] != b || v->shape[1] != t || v->shape[2] != h) {
    return absl::InvalidArgumentError(absl::StrCat("tensor 'v' must have shape [", b, ", ", t, ", ",
                                                   h, ", Dv], got ", ShapeString(v->shape)));
  }
  const int64_t dv = v->shape[3];
  absl::StatusOr<LoadedTensor> i = LoadFloat(file, "i", {b, t, h});
  if (!i.ok()) return i.status();
  absl::StatusOr<LoadedTensor> f = LoadFloat(file, "f", {b, t, h});
  if (!f.ok()) return f.status();
  const ml::MlstmInputs in{.dims = {b, t, h, dk, dv},
                           .q = q->data,
                           .k = k->data,
                           .v = v->data,
                           .i = i->data,
                           .f = f->data};
  std::vector<float> o(v->data.size());
  ml::MlstmForwardOutputs fwd{.h = o};
  if (absl::Status s = ml::MlstmForward(in, options, &fwd); !s.ok()) return s;
  std::vector<st::TensorView> outputs = {st::F32View("o", v->shape, o)};
  std::vector<float> dq, dkk, dvv, di, df;
  if (file.Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(file, "do", v->shape);
    if (!d_o.ok()) return d_o.status();
    dq.resize(q->data.size());
    dkk.resize(q->data.size());
    dvv.resize(v->data.size());
    di.resize(i->data.size());
    df.resize(i->data.size());
    ml::MlstmGradients grads{.dq = dq, .dk = dkk, .dv = dvv, .di = di, .df = df};
    if (absl::Status s = ml::MlstmBackward(in, options, {.dh = d_o->data}, &grads); !s.ok()) {
      return s;
    }
    outputs.push_back(st::F32View("dq", q->shape, dq));
    outputs.push_back(st::F32View("dk", q->shape, dkk));
    outputs.push_back(st::F32View("dv", v->shape, dvv));
    outputs.push_back(st::F32View("di", {b, t, h}, di));
    outputs.push_back(st::F32View("df", {b, t, h}, df));
  }
  const std::string impl_name(ml::MlstmImplName(options.impl));
  if (absl::Status s = st::WriteFile(out_path, outputs, {{"op", "mlstm"}, {"impl", impl_name}});
      !s.ok()) {
    return s;
  }
  std::printf("mesa_op: op=mlstm impl=%s B=%lld T=%lld H=%lld Dk=%lld Dv=%lld%s -> %s\n",
              impl_name.c_str(), static_cast<long long>(b), static_cast<long long>(t),
              static_cast<long long>(h), static_cast<long long>(dk), static_cast<long long>(dv),
              file.Has("do") ? " (with gradients)" : "", out_path.c_str());
  return absl::OkStatus();
}

// --op mamba2: x [B,T,H,P], dt [B,T,H], A_log, dt_bias, D [H], B, C [B,T,G,N]; optional do.
absl::Status RunMamba2(const st::SafetensorsFile& file, const std::string& out_path) {
  namespace sd = ::mesa::kernels::ssd;
  absl::StatusOr<std::string> impl = NonMesaImpl("recurrent");
  if (!impl.ok()) return impl.status();
  absl::StatusOr<sd::SsdImpl> parsed = sd::ParseSsdImpl(*impl);
  if (!parsed.ok()) return parsed.status();
  const sd::SsdOptions options{.impl = *parsed, .num_threads = absl::GetFlag(FLAGS_threads)};
  absl::StatusOr<LoadedTensor> x = LoadFloat(file, "x", {});
  if (!x.ok()) return x.status();
  if (x->shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor 'x' must have shape [B, T, H, P], got ", ShapeString(x->shape)));
  }
  const int64_t b = x->shape[0], t = x->shape[1], h = x->shape[2], p = x->shape[3];
  absl::StatusOr<LoadedTensor> bm = LoadFloat(file, "B", {});
  if (!bm.ok()) return bm.status();
  if (bm->shape.size() != 4 || bm->shape[0] != b || bm->shape[1] != t) {
    return absl::InvalidArgumentError(absl::StrCat("tensor 'B' must have shape [", b, ", ", t,
                                                   ", G, N], got ", ShapeString(bm->shape)));
  }
  const int64_t g = bm->shape[2], n = bm->shape[3];
  absl::StatusOr<LoadedTensor> cm = LoadFloat(file, "C", bm->shape);
  if (!cm.ok()) return cm.status();
  absl::StatusOr<LoadedTensor> dt = LoadFloat(file, "dt", {b, t, h});
  if (!dt.ok()) return dt.status();
  absl::StatusOr<LoadedTensor> a_log = LoadFloat(file, "A_log", {h});
  if (!a_log.ok()) return a_log.status();
  absl::StatusOr<LoadedTensor> dt_bias = LoadFloat(file, "dt_bias", {h});
  if (!dt_bias.ok()) return dt_bias.status();
  absl::StatusOr<LoadedTensor> skip = LoadFloat(file, "D", {h});
  if (!skip.ok()) return skip.status();
  const sd::SsdInputs in{.dims = {b, t, h, p, g, n},
                         .x = x->data,
                         .dt = dt->data,
                         .a_log = a_log->data,
                         .dt_bias = dt_bias->data,
                         .d = skip->data,
                         .b = bm->data,
                         .c = cm->data};
  std::vector<float> o(x->data.size());
  sd::SsdForwardOutputs fwd{.y = o};
  if (absl::Status s = sd::SsdForward(in, options, &fwd); !s.ok()) return s;
  std::vector<st::TensorView> outputs = {st::F32View("o", x->shape, o)};
  std::vector<float> dx, ddt, da, dbias, dd, db, dc;
  if (file.Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(file, "do", x->shape);
    if (!d_o.ok()) return d_o.status();
    dx.resize(x->data.size());
    ddt.resize(dt->data.size());
    da.resize(h);
    dbias.resize(h);
    dd.resize(h);
    db.resize(bm->data.size());
    dc.resize(bm->data.size());
    sd::SsdGradients grads{
        .dx = dx, .ddt = ddt, .da_log = da, .ddt_bias = dbias, .dd = dd, .db = db, .dc = dc};
    if (absl::Status s = sd::SsdBackward(in, options, {.dy = d_o->data}, &grads); !s.ok()) {
      return s;
    }
    outputs.push_back(st::F32View("dx", x->shape, dx));
    outputs.push_back(st::F32View("ddt", {b, t, h}, ddt));
    outputs.push_back(st::F32View("dA_log", {h}, da));
    outputs.push_back(st::F32View("ddt_bias", {h}, dbias));
    outputs.push_back(st::F32View("dD", {h}, dd));
    outputs.push_back(st::F32View("dB", bm->shape, db));
    outputs.push_back(st::F32View("dC", bm->shape, dc));
  }
  const std::string impl_name(sd::SsdImplName(options.impl));
  if (absl::Status s = st::WriteFile(out_path, outputs, {{"op", "mamba2"}, {"impl", impl_name}});
      !s.ok()) {
    return s;
  }
  std::printf("mesa_op: op=mamba2 impl=%s B=%lld T=%lld H=%lld P=%lld G=%lld N=%lld%s -> %s\n",
              impl_name.c_str(), static_cast<long long>(b), static_cast<long long>(t),
              static_cast<long long>(h), static_cast<long long>(p), static_cast<long long>(g),
              static_cast<long long>(n), file.Has("do") ? " (with gradients)" : "",
              out_path.c_str());
  return absl::OkStatus();
}

// --op deltanet | gated_deltanet.
absl::Status RunDeltaNet(const st::SafetensorsFile& file, bool gated, const std::string& out_path) {
  namespace dn = ::mesa::kernels::deltanet;
  absl::StatusOr<std::string> impl = NonMesaImpl("chunked");
  if (!impl.ok()) return impl.status();
  dn::DeltaOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<dn::DeltaImpl> parsed = dn::ParseDeltaImpl(*impl);
  if (!parsed.ok()) return parsed.status();
  options.impl = *parsed;

  absl::StatusOr<std::vector<LoadedTensor>> qkv = LoadQkv(file);
  if (!qkv.ok()) return qkv.status();
  const LoadedTensor *q = &(*qkv)[0], *k = &(*qkv)[1], *v = &(*qkv)[2];
  const int64_t b = q->shape[0], t = q->shape[1], h = q->shape[2], d = q->shape[3];
  absl::StatusOr<LoadedTensor> beta = LoadFloat(file, "beta", {b, t, h});
  if (!beta.ok()) return beta.status();
  LoadedTensor log_gamma;
  if (gated) {
    absl::StatusOr<LoadedTensor> lg = LoadFloat(file, "log_gamma", {b, t, h});
    if (!lg.ok()) return lg.status();
    log_gamma = *std::move(lg);
  } else if (file.Has("log_gamma")) {
    return absl::InvalidArgumentError(
        "tensor 'log_gamma' given to --op deltanet, which has no forget gate (use gated_deltanet)");
  }
  absl::StatusOr<std::vector<int32_t>> cu_seqlens = LoadOffsets(file);
  if (!cu_seqlens.ok()) return cu_seqlens.status();
  const int64_t num_seqs = cu_seqlens->empty() ? b : static_cast<int64_t>(cu_seqlens->size()) - 1;
  const std::vector<int64_t> state_shape = {num_seqs, h, d, d};
  LoadedTensor s0;
  if (file.Has("s0")) {
    absl::StatusOr<LoadedTensor> state = LoadFloat(file, "s0", state_shape);
    if (!state.ok()) return state.status();
    s0 = *std::move(state);
  }
  dn::DeltaInputs in{.dims = {b, t, h, d},
                     .q = q->data,
                     .k = k->data,
                     .v = v->data,
                     .beta = beta->data,
                     .log_gamma = log_gamma.data,
                     .s0 = s0.data,
                     .cu_seqlens = *cu_seqlens};
  absl::StatusOr<dn::DeltaForwardResult> fwd =
      dn::DeltaNetForwardAlloc(in, options, /*want_final_state=*/true);
  if (!fwd.ok()) return fwd.status();
  std::vector<st::TensorView> outputs = {st::F32View("o", q->shape, fwd->o),
                                         st::F32View("s_final", state_shape, fwd->s_final)};
  dn::DeltaGradientsResult grads;
  if (file.Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(file, "do", q->shape);
    if (!d_o.ok()) return d_o.status();
    absl::StatusOr<dn::DeltaGradientsResult> g =
        dn::DeltaNetBackwardAlloc(in, d_o->data, options, /*want_state_grad=*/!s0.data.empty());
    if (!g.ok()) return g.status();
    grads = *std::move(g);
    outputs.push_back(st::F32View("dq", q->shape, grads.dq));
    outputs.push_back(st::F32View("dk", q->shape, grads.dk));
    outputs.push_back(st::F32View("dv", q->shape, grads.dv));
    outputs.push_back(st::F32View("dbeta", {b, t, h}, grads.dbeta));
    if (gated) outputs.push_back(st::F32View("dlog_gamma", {b, t, h}, grads.dlog_gamma));
    if (!s0.data.empty()) outputs.push_back(st::F32View("ds0", state_shape, grads.ds0));
  }
  st::Metadata metadata = {{"op", gated ? "gated_deltanet" : "deltanet"},
                           {"impl", std::string(dn::DeltaImplName(options.impl))}};
  if (absl::Status s = st::WriteFile(out_path, outputs, metadata); !s.ok()) return s;
  std::printf("mesa_op: op=%s impl=%s B=%lld T=%lld H=%lld D=%lld%s -> %s\n",
              gated ? "gated_deltanet" : "deltanet",
              std::string(dn::DeltaImplName(options.impl)).c_str(), static_cast<long long>(b),
              static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d),
              file.Has("do") ? " (with gradients)" : "", out_path.c_str());
  return absl::OkStatus();
}

// --op attention.
absl::Status RunAttention(const st::SafetensorsFile& file, const std::string& out_path) {
  namespace at = ::mesa::kernels::attention;
  absl::StatusOr<std::string> impl = NonMesaImpl("cpu");
  if (!impl.ok()) return impl.status();
  at::AttnOptions options{.window = absl::GetFlag(FLAGS_window),
                          .num_threads = absl::GetFlag(FLAGS_threads)};
  absl::StatusOr<at::AttnImpl> parsed = at::ParseAttnImpl(*impl);
  if (!parsed.ok()) return parsed.status();
  options.impl = *parsed;
  absl::StatusOr<std::vector<LoadedTensor>> qkv = LoadQkv(file);
  if (!qkv.ok()) return qkv.status();
  const std::vector<int64_t>& shape = (*qkv)[0].shape;
  const int64_t b = shape[0], t = shape[1], h = shape[2], d = shape[3];
  const at::AttnInputs in{
      .dims = {b, t, h, d}, .q = (*qkv)[0].data, .k = (*qkv)[1].data, .v = (*qkv)[2].data};
  absl::StatusOr<at::AttnForwardResult> fwd = at::AttentionForwardAlloc(in, options);
  if (!fwd.ok()) return fwd.status();
  std::vector<st::TensorView> outputs = {st::F32View("o", shape, fwd->o),
                                         st::F32View("lse", {b, t, h}, fwd->lse)};
  at::AttnGradientsResult grads;
  if (file.Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(file, "do", shape);
    if (!d_o.ok()) return d_o.status();
    absl::StatusOr<at::AttnGradientsResult> g =
        at::AttentionBackwardAlloc(in, d_o->data, options, fwd->o, fwd->lse);
    if (!g.ok()) return g.status();
    grads = *std::move(g);
    outputs.push_back(st::F32View("dq", shape, grads.dq));
    outputs.push_back(st::F32View("dk", shape, grads.dk));
    outputs.push_back(st::F32View("dv", shape, grads.dv));
  }
  st::Metadata metadata = {{"op", "attention"},
                           {"impl", std::string(at::AttnImplName(options.impl))},
                           {"window", absl::StrCat(options.window)}};
  if (absl::Status s = st::WriteFile(out_path, outputs, metadata); !s.ok()) return s;
  std::printf("mesa_op: op=attention impl=%s window=%lld B=%lld T=%lld H=%lld D=%lld%s -> %s\n",
              std::string(at::AttnImplName(options.impl)).c_str(),
              static_cast<long long>(options.window), static_cast<long long>(b),
              static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d),
              file.Has("do") ? " (with gradients)" : "", out_path.c_str());
  return absl::OkStatus();
}

// --op mesa.
absl::Status RunMesa(const std::string& in_path, const std::string& out_path) {
  MesaOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  const int cg_steps = absl::GetFlag(FLAGS_cg_steps), cg_max = absl::GetFlag(FLAGS_cg_max);
  const double cg_tol = absl::GetFlag(FLAGS_cg_tol);
  const bool tolerance_mode = cg_tol != 0.0 || cg_max != -1;
  if (cg_steps != -1 && tolerance_mode) {
    return absl::InvalidArgumentError(
        "give either --cg_steps N or --cg_tol EPS --cg_max N, not both");
  }
  if (tolerance_mode) {
    if (!(cg_tol > 0)) return absl::InvalidArgumentError("--cg_tol must be > 0 in tolerance mode");
    options.cg = {cg_max == -1 ? kDefaultCgSteps : cg_max, static_cast<float>(cg_tol)};
  } else {
    options.cg = {cg_steps == -1 ? kDefaultCgSteps : cg_steps, 0.f};
  }
  if (options.cg.max_steps < 0) return absl::InvalidArgumentError("CG step counts must be >= 0");
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cuda") {
    if (!absl::GetFlag(FLAGS_impl).empty()) {
      return absl::InvalidArgumentError(
          "--impl selects a CPU implementation; do not combine it with --device cuda");
    }
    options.impl = MesaImpl::kCuda;
  } else if (device == "cpu") {
    const std::string impl_name =
        absl::GetFlag(FLAGS_impl).empty() ? "chunked" : absl::GetFlag(FLAGS_impl);
    absl::StatusOr<MesaImpl> impl = ParseMesaImpl(impl_name);
    if (!impl.ok()) return impl.status();
    if (*impl == MesaImpl::kCuda)
      return absl::InvalidArgumentError("use --device cuda for the CUDA implementation");
    options.impl = *impl;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got '", device, "'"));
  }
  const std::string solver = absl::GetFlag(FLAGS_reference_solver);
  if (solver == "exact") {
    options.reference_solver = ReferenceSolver::kExact;
  } else if (solver == "cg") {
    options.reference_solver = ReferenceSolver::kCg;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--reference_solver must be exact or cg, got '", solver, "'"));
  }

  absl::StatusOr<st::SafetensorsFile> file = st::SafetensorsFile::ReadFile(in_path);
  if (!file.ok()) return file.status();

  absl::StatusOr<std::vector<LoadedTensor>> qkv = LoadQkv(*file);
  if (!qkv.ok()) return qkv.status();
  const LoadedTensor *q = &(*qkv)[0], *k = &(*qkv)[1], *v = &(*qkv)[2];
  const int64_t b = q->shape[0], t = q->shape[1], h = q->shape[2], d = q->shape[3];
  if (d > 128 || d < 16 || d % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head dim D = ", d, " unsupported: must be a multiple of 16 in [16, 128]"));
  }
  absl::StatusOr<LoadedTensor> log_gamma = LoadFloat(*file, "log_gamma", {b, t, h});
  if (!log_gamma.ok()) return log_gamma.status();
  absl::StatusOr<LoadedTensor> beta = LoadFloat(*file, "beta", {b, t, h});
  if (!beta.ok()) return beta.status();
  absl::StatusOr<LoadedTensor> lambda = LoadFloat(*file, "lambda", {h, d});
  if (!lambda.ok()) return lambda.status();

  absl::StatusOr<std::vector<int32_t>> offsets = LoadOffsets(*file);
  if (!offsets.ok()) return offsets.status();
  const std::vector<int32_t>& cu_seqlens = *offsets;
  const int64_t num_seqs = cu_seqlens.empty() ? b : static_cast<int64_t>(cu_seqlens.size()) - 1;
  const std::vector<int64_t> state_shape = {num_seqs, h, d, d};
  LoadedTensor h0, g0;
  for (auto [name, dst] : {std::pair{"h0", &h0}, {"g0", &g0}}) {
    if (!file->Has(name)) continue;
    absl::StatusOr<LoadedTensor> state = LoadFloat(*file, name, state_shape);
    if (!state.ok()) return state.status();
    *dst = std::move(*state);
  }

  MesaInputs in{.dims = {b, t, h, d},
                .q = q->data,
                .k = k->data,
                .v = v->data,
                .log_gamma = log_gamma->data,
                .beta = beta->data,
                .lambda = lambda->data,
                .h0 = h0.data,
                .g0 = g0.data,
                .cu_seqlens = cu_seqlens};
  absl::StatusOr<MesaForwardResult> fwd = MesaForwardAlloc(in, options);
  if (!fwd.ok()) return fwd.status();

  const std::vector<int64_t> token_shape = q->shape;
  const float steps_mean = static_cast<float>(fwd->cg_steps_mean);
  std::vector<st::TensorView> outputs = {st::F32View("o", token_shape, fwd->o)};
  MesaGradientsResult grads;
  if (file->Has("do")) {
    absl::StatusOr<LoadedTensor> d_o = LoadFloat(*file, "do", token_shape);
    if (!d_o.ok()) return d_o.status();
    const bool state_grads = !h0.data.empty() || !g0.data.empty();
    absl::StatusOr<MesaGradientsResult> g =
        MesaBackwardAlloc(in, fwd->q_star, d_o->data, options, state_grads);
    if (!g.ok()) return g.status();
    grads = std::move(*g);
    outputs.push_back(st::F32View("dq", token_shape, grads.dq));
    outputs.push_back(st::F32View("dk", token_shape, grads.dk));
    outputs.push_back(st::F32View("dv", token_shape, grads.dv));
    outputs.push_back(st::F32View("dlog_gamma", {b, t, h}, grads.dlog_gamma));
    outputs.push_back(st::F32View("dbeta", {b, t, h}, grads.dbeta));
    outputs.push_back(st::F32View("dlambda", {h, d}, grads.dlambda));
    if (state_grads) {
      outputs.push_back(st::F32View("dh0", state_shape, grads.dh0));
      outputs.push_back(st::F32View("dg0", state_shape, grads.dg0));
    }
  }
  outputs.push_back(st::F32View("cg_steps_mean", {}, std::span<const float>(&steps_mean, 1)));
  st::Metadata metadata = {
      {"impl", std::string(MesaImplName(options.impl))},
      {"cg_max_steps", absl::StrCat(options.cg.max_steps)},
      {"cg_tolerance", absl::StrCat(options.cg.tolerance)},
  };
  if (options.impl == MesaImpl::kReference) metadata["reference_solver"] = solver;
  if (absl::Status s = st::WriteFile(out_path, outputs, metadata); !s.ok()) return s;
  std::printf("mesa_op: impl=%s B=%lld T=%lld H=%lld D=%lld cg_steps_mean=%.3f%s -> %s\n",
              std::string(MesaImplName(options.impl)).c_str(), static_cast<long long>(b),
              static_cast<long long>(t), static_cast<long long>(h), static_cast<long long>(d),
              fwd->cg_steps_mean, file->Has("do") ? " (with gradients)" : "", out_path.c_str());
  return absl::OkStatus();
}

// The operators --op names: adding one is a Run function and a row.
struct OpEntry {
  const char* name;
  absl::Status (*run)(const std::string& in_path, const std::string& out_path);
  bool takes_window;  // --window
};

absl::Status WithFile(const std::string& in_path, const std::string& out_path,
                      absl::Status (*run)(const st::SafetensorsFile&, const std::string&)) {
  absl::StatusOr<st::SafetensorsFile> file = st::SafetensorsFile::ReadFile(in_path);
  if (!file.ok()) return file.status();
  return run(*file, out_path);
}

constexpr OpEntry kOps[] = {
    {"mesa", &RunMesa, false},
    {"deltanet",
     [](const std::string& in, const std::string& out) {
       return WithFile(in, out, [](const st::SafetensorsFile& f, const std::string& o) {
         return RunDeltaNet(f, /*gated=*/false, o);
       });
     },
     false},
    {"gated_deltanet",
     [](const std::string& in, const std::string& out) {
       return WithFile(in, out, [](const st::SafetensorsFile& f, const std::string& o) {
         return RunDeltaNet(f, /*gated=*/true, o);
       });
     },
     false},
    {"attention",
     [](const std::string& in, const std::string& out) { return WithFile(in, out, &RunAttention); },
     true},
    {"rglru",
     [](const std::string& in, const std::string& out) { return WithFile(in, out, &RunRgLru); },
     false},
    {"mlstm",
     [](const std::string& in, const std::string& out) { return WithFile(in, out, &RunMlstm); },
     false},
    {"mamba2",
     [](const std::string& in, const std::string& out) { return WithFile(in, out, &RunMamba2); },
     false},
};

// "mesa, deltanet, ..., mlstm or mamba2".
std::string OpNames() {
  std::string names;
  for (size_t i = 0; i < std::size(kOps); ++i) {
    if (i > 0) names += i + 1 == std::size(kOps) ? " or " : ", ";
    names += kOps[i].name;
  }
  return names;
}

absl::Status Run() {
  const std::string in_path = UserPath(absl::GetFlag(FLAGS_in));
  const std::string out_path = UserPath(absl::GetFlag(FLAGS_out));
  if (in_path.empty() || out_path.empty())
    return absl::InvalidArgumentError("--in and --out are required");
  const std::string op = absl::GetFlag(FLAGS_op);
  for (const OpEntry& entry : kOps) {
    if (op != entry.name) continue;
    if (!entry.takes_window && absl::GetFlag(FLAGS_window) != 0) {
      return absl::InvalidArgumentError("--window applies to --op attention only");
    }
    return entry.run(in_path, out_path);
  }
  return absl::InvalidArgumentError(absl::StrCat("--op must be ", OpNames(), ", got '", op, "'"));
}

}  // namespace
}  // namespace mesa::kernels

int main(int argc, char** argv) {
  mesa::base::ParseFlagsOrExit(argc, argv,
                               "mesa_op --in IN.safetensors --out OUT.safetensors [--op "
                               "mesa|deltanet|gated_deltanet|attention|rglru|mlstm|mamba2] "
                               "[--device cpu|cuda] ...\n"
                               "  Runs an operator on tensors from a file.");
  absl::Status status = mesa::kernels::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "mesa_op: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
