#include "model/trainer/internals.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spec/mixers.h"

// LAPACK's symmetric eigensolver (Debian's OpenBLAS carries LAPACK; no LAPACKE header).
extern "C" void dsyev_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
                       double* w, double* work, const int* lwork, int* info);

namespace mesa::model {

std::vector<double> FinalKeyState(const SolveInputs& in, int64_t b, int64_t h) {
  const int64_t d = in.head_dim, heads = in.heads;
  std::vector<double> state(d * d, 0.0);
  // Backwards from the last token: each earlier token's weight picks up the later decays. With
  // document resets the state restarted at the last document's first token.
  const int64_t last = in.seq_len - 1;
  const int64_t first = in.doc_start.empty() ? 0 : in.doc_start[b * in.seq_len + last];
  double decay = 1.0;
  for (int64_t t = last; t >= first; --t) {
    const int64_t gate = (b * in.seq_len + t) * heads + h;
    const double w = decay * in.beta[gate];
    const float* k = &in.k[gate * d];
    for (int64_t i = 0; i < d; ++i) {
      const double wki = w * k[i];
      for (int64_t j = 0; j < d; ++j) state[i * d + j] += wki * k[j];
    }
    decay *= std::exp(static_cast<double>(in.log_gamma[gate]));
  }
  return state;
}

absl::StatusOr<double> SpdConditionNumber(std::vector<double> a, int n) {
  std::vector<double> eigenvalues(n);
  int lwork = -1, info = 0;
  double query = 0;
  dsyev_("N", "U", &n, a.data(), &n, eigenvalues.data(), &query, &lwork, &info);
  lwork = static_cast<int>(query);
  std::vector<double> work(std::max(1, lwork));
  dsyev_("N", "U", &n, a.data(), &n, eigenvalues.data(), work.data(), &lwork, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dsyev failed: info ", info));
  // Ascending order.
  if (!(eigenvalues.front() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the matrix is not positive definite (smallest eigenvalue ", eigenvalues.front(), ")"));
  }
  return eigenvalues.back() / eigenvalues.front();
}

double InternalsProbe::Moments::std() const {
  const double m = mean();
  return std::sqrt(std::max(0.0, sum_sq / n - m * m));
}

void InternalsProbe::Moments::Add(double x) {
  min = n == 0 ? x : std::min(min, x);
  max = n == 0 ? x : std::max(max, x);
  sum += x;
  sum_sq += x * x;
  ++n;
}

InternalsProbe::InternalsProbe(const ModelConfig& model)
    : model_(model), heads_(model.n_layers, std::vector<Head>(model.n_heads)) {}

absl::Status InternalsProbe::Observe(const MesaNet& net, const std::vector<int32_t>& token_steps,
                                     int batch, bool whole_rows) {
  const int64_t heads = model_.n_heads;
  const int64_t tokens = static_cast<int64_t>(token_steps.size()) / model_.n_layers / heads;
  SolveInputs in;
  for (int l = 0; l < model_.n_layers; ++l) {
    const bool solves = spec::TraitsOf(model_.LayerMixer(l)).solves_with_cg;
    if (solves) {
      const int32_t* s = token_steps.data() + int64_t{l} * tokens * heads;
      for (int64_t i = 0; i < tokens * heads; ++i) {
        heads_[l][i % heads].cg_sum += s[i];
        ++heads_[l][i % heads].cg_tokens;
      }
    }
    if (!net.CopySolveInputsToHost(l, &in)) continue;
    for (int64_t i = 0; i < static_cast<int64_t>(in.beta.size()); ++i) {
      Head& head = heads_[l][i % heads];
      head.gamma.Add(std::exp(static_cast<double>(in.log_gamma[i])));
      head.beta.Add(in.beta[i]);
    }
    // The condition numbers: the last position of each row of the first batch (each costs a
    // D x D eigendecomposition and a pass over the row).
    if (!solves || !whole_rows || batches_ > 0) continue;
    const int d = model_.head_dim;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> system = FinalKeyState(in, b, h);
        for (int j = 0; j < d; ++j) system[int64_t{j} * d + j] += in.lambda[h * d + j];
        absl::StatusOr<double> condition = SpdConditionNumber(std::move(system), d);
        if (!condition.ok()) {
          return absl::Status(condition.status().code(),
                              absl::StrCat("eval.internals: layer ", l, " head ", h, " row ", b,
                                           ": H + diag(Λ): ", condition.status().message()));
        }
        heads_[l][h].condition.Add(*condition);
      }
    }
  }
  ++batches_;
  return absl::OkStatus();
}

void InternalsProbe::Fill(std::vector<mesa::v1::LayerInternals>* layers) const {
  for (size_t l = 0; l < layers->size() && l < heads_.size(); ++l) {
    mesa::v1::LayerInternals& layer = (*layers)[l];
    for (int h = 0; h < model_.n_heads; ++h) {
      const Head& in = heads_[l][h];
      if (in.gamma.n == 0 && in.cg_tokens == 0) continue;  // no gates, no solve
      while (layer.heads_size() <= h) layer.add_heads()->set_head(layer.heads_size() - 1);
      mesa::v1::HeadInternals& out = *layer.mutable_heads(h);
      if (in.cg_tokens > 0) out.set_cg_steps_mean(in.cg_sum / in.cg_tokens);
      if (in.gamma.n > 0) {
        out.set_gamma_mean(in.gamma.mean());
        out.set_gamma_std(in.gamma.std());
        out.set_gamma_min(in.gamma.min);
        out.set_gamma_max(in.gamma.max);
        out.set_beta_mean(in.beta.mean());
        out.set_beta_std(in.beta.std());
        out.set_beta_min(in.beta.min);
        out.set_beta_max(in.beta.max);
      }
      if (in.condition.n > 0) {
        out.set_condition_mean(in.condition.mean());
        out.set_condition_min(in.condition.min);
        out.set_condition_max(in.condition.max);
        out.set_condition_rows(in.condition.n);
      }
    }
  }
}

}  // namespace mesa::model
