// OpenBLAS helpers shared by the CPU operators (kernels/mesa, kernels/deltanet, ...).
#ifndef MESANET_KERNELS_BLAS_UTIL_H_
#define MESANET_KERNELS_BLAS_UTIL_H_

#include <cblas.h>

namespace mesa::kernels {

// Our own threads already cover the cores; OpenBLAS threading inside them only oversubscribes
// (and makes results depend on the thread count). While alive and `enable`, OpenBLAS runs on one
// thread; the caller's setting is restored afterwards.
class BlasSingleThreaded {
 public:
  explicit BlasSingleThreaded(bool enable = true) {
    previous_ = openblas_get_num_threads();
    changed_ = enable && previous_ != 1;
    if (changed_) openblas_set_num_threads(1);
  }
  ~BlasSingleThreaded() {
    if (changed_) openblas_set_num_threads(previous_);
  }
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int previous_ = 1;
  bool changed_ = false;
};

// Row-major C = alpha op(A) op(B) + beta C (k = 0: C = beta C).
inline void RowMajorGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                         const float* a, int lda, const float* b, int ldb, float beta, float* c,
                         int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) c[i * ldc + j] *= beta;
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace mesa::kernels

#endif  // MESANET_KERNELS_BLAS_UTIL_H_
