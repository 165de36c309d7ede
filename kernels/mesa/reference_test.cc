// Finite-difference checks (float64) of the reference backward, and sanity of its solvers.
#include "kernels/mesa/reference.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "kernels/mesa/mesa_test_util.h"

namespace mesa::kernels::cpu {
namespace {

using mesa::kernels::testing::ProblemConfig;
using mesa::kernels::testing::RandomProblem;

// L = sum(do ⊙ o) + sum(dh_final ⊙ H_T) + sum(dg_final ⊙ G_T).
double Loss(const ReferenceProblem& p, const ReferenceCotangents& cot, const MesaOptions& options) {
  ReferenceForwardResult fwd = RunReferenceForward(p, options);
  double loss = 0;
  for (size_t i = 0; i < fwd.o.size(); ++i) loss += cot.d_o[i] * fwd.o[i];
  for (size_t i = 0; i < fwd.h_final.size(); ++i) {
    loss += cot.dh_final[i] * fwd.h_final[i] + cot.dg_final[i] * fwd.g_final[i];
  }
  return loss;
}

std::vector<double> ToDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

void CheckGradients(const ProblemConfig& config, const MesaOptions& options) {
  const testing::Problem fp = RandomProblem(config);
  ReferenceProblem p = ReferenceProblem::FromInputs(fp.Inputs());
  ReferenceCotangents cot{.d_o = ToDouble(fp.d_o),
                          .dh_final = ToDouble(fp.dh_final),
                          .dg_final = ToDouble(fp.dg_final)};
  cot.q_star = RunReferenceForward(p, options).q_star;
  const ReferenceGradientsResult grads = RunReferenceBackward(p, cot, options);

  struct Param {
    const char* name;
    std::vector<double>* values;
    const std::vector<double>* grad;
  };
  const Param params[] = {
      {"q", &p.q, &grads.dq},          {"k", &p.k, &grads.dk},
      {"v", &p.v, &grads.dv},          {"log_gamma", &p.log_gamma, &grads.dlog_gamma},
      {"beta", &p.beta, &grads.dbeta}, {"lambda", &p.lambda, &grads.dlambda},
      {"h0", &p.h0, &grads.dh0},       {"g0", &p.g0, &grads.dg0}};
  const double step = 1e-5;
  for (const Param& param : params) {
    ASSERT_EQ(param.values->size(), param.grad->size()) << param.name;
    double max_err = 0, max_grad = 0;
    // h0 is a symmetric matrix: perturb (i, j) and (j, i) together; expect dh0[i,j] + dh0[j,i].
    const bool symmetric = std::string(param.name) == "h0";
    const size_t dim = static_cast<size_t>(p.dims.head_dim);
    for (size_t i = 0; i < param.values->size(); ++i) {
      const size_t row = (i / dim) % dim, col = i % dim;
      if (symmetric && col < row) continue;
      const size_t mirror = i - row * dim - col + col * dim + row;
      const bool pair = symmetric && col != row;
      auto set = [&](double delta) {
        (*param.values)[i] += delta;
        if (pair) (*param.values)[mirror] += delta;
      };
      set(step);
      const double up = Loss(p, cot, options);
      set(-2 * step);
      const double down = Loss(p, cot, options);
      set(step);
      const double numeric = (up - down) / (2 * step);
      const double analytic = (*param.grad)[i] + (pair ? (*param.grad)[mirror] : 0.0);
      max_err = std::max(max_err, std::fabs(numeric - analytic));
      max_grad = std::max(max_grad, std::fabs(numeric));
    }
    const double rel = max_err / std::max(max_grad, 1e-12);
    std::printf("  d%-10s max|fd - analytic| / max|fd| = %.2e (max|fd| = %.2e)\n", param.name, rel,
                max_grad);
    EXPECT_LT(rel, 1e-6) << "gradient of " << param.name;
    EXPECT_GT(max_grad, 1e-6) << param.name
                              << " gradient is trivially zero; the check would be vacuous";
  }
}

TEST(MesaReferenceGradients, FiniteDifferencesExactSolve) {
  MesaOptions options{.impl = MesaImpl::kReference, .cg = {30, 0.f}};
  CheckGradients(
      {.batch = 2, .seq_len = 7, .heads = 2, .head_dim = 16, .initial_state = true, .seed = 3},
      options);
}

TEST(MesaReferenceGradients, FiniteDifferencesVarlenWithStrongMemory) {
  // Gates near 1 and lambda at its floor (ill-conditioned systems), packed sequences.
  MesaOptions options{.impl = MesaImpl::kReference, .cg = {30, 0.f}};
  CheckGradients({.heads = 1,
                  .head_dim = 16,
                  .log_gamma_min = -0.01f,
                  .log_gamma_max = -0.0001f,
                  .lambda_min = 0.25f,
                  .lambda_max = 0.26f,
                  .initial_state = true,
                  .seq_lens = {3, 0, 6},
                  .seed = 4},
                 options);
}

TEST(MesaReferenceGradients, FiniteDifferencesGlaZeroSteps) {
  // max_steps = 0: q* = q, exact GLA gradients (lambda gets none, so skip it).
  MesaOptions options{.impl = MesaImpl::kReference, .cg = {0, 0.f}};
  const testing::Problem fp =
      RandomProblem({.seq_len = 6, .heads = 1, .head_dim = 16, .initial_state = true, .seed = 5});
  ReferenceProblem p = ReferenceProblem::FromInputs(fp.Inputs());
  ReferenceCotangents cot{.d_o = ToDouble(fp.d_o),
                          .dh_final = ToDouble(fp.dh_final),
                          .dg_final = ToDouble(fp.dg_final)};
  cot.q_star = RunReferenceForward(p, options).q_star;
  EXPECT_EQ(cot.q_star, p.q);
  const ReferenceGradientsResult grads = RunReferenceBackward(p, cot, options);
  for (double g : grads.dlambda) EXPECT_EQ(g, 0.0);
  // Spot-check dk and dlog_gamma by finite differences.
  for (auto [values, grad] : {std::pair{&p.k, &grads.dk}, {&p.log_gamma, &grads.dlog_gamma}}) {
    for (size_t i = 0; i < values->size(); i += 7) {
      const double saved = (*values)[i];
      (*values)[i] = saved + 1e-5;
      const double up = Loss(p, cot, options);
      (*values)[i] = saved - 1e-5;
      const double down = Loss(p, cot, options);
      (*values)[i] = saved;
      EXPECT_NEAR((up - down) / 2e-5, (*grad)[i], 1e-7 * std::max(1.0, std::fabs((*grad)[i])));
    }
  }
}

TEST(MesaReferenceSolvers, CgConvergesToExactSolve) {
  const testing::Problem fp =
      RandomProblem({.batch = 1, .seq_len = 20, .heads = 1, .head_dim = 16, .seed = 6});
  ReferenceProblem p = ReferenceProblem::FromInputs(fp.Inputs());
  MesaOptions exact{.impl = MesaImpl::kReference, .cg = {30, 0.f}};
  MesaOptions cg = exact;
  cg.reference_solver = ReferenceSolver::kCg;
  const ReferenceForwardResult a = RunReferenceForward(p, exact);
  const ReferenceForwardResult b = RunReferenceForward(p, cg);
  EXPECT_EQ(a.cg_steps_mean, 0.0);
  EXPECT_GT(b.cg_steps_mean, 0.0);
  for (size_t i = 0; i < a.q_star.size(); ++i) EXPECT_NEAR(a.q_star[i], b.q_star[i], 1e-9);
  // One CG step from x0 = 0 gives alpha q, not q (0 steps is the special GLA rule).
  cg.cg.max_steps = 1;
  const ReferenceForwardResult one = RunReferenceForward(p, cg);
  EXPECT_NE(one.q_star[0], p.q[0]);
  EXPECT_EQ(one.cg_steps_mean, 1.0);
}

}  // namespace
}  // namespace mesa::kernels::cpu
