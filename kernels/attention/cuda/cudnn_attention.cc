// cuDNN fused attention: the backend-descriptor graphs, the plan cache and the calls.
//
// Layouts: q, k, v, o, do, dq, dk, dv are [B,T,H,D] in memory and described to cuDNN as
// [b,h,s,d] with strides (T*H*D, D, H*D, 1); K (and V in the backward) enter the first matmul
// transposed, [b,h,d,s] with strides (T*H*D, D, 1, H*D); lse [B,T,H] is cuDNN's "stats"
// [b,h,s,1] with strides (T*H, 1, H, 1). Scalars (scale, -inf, 1, the window) are by-value tensors
// whose host values travel in the variant pack.
#include "kernels/attention/cuda/cudnn_attention.h"

#include <cudnn.h>
#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mesa::kernels::attention::cuda {
namespace {

using ::mesa::kernels::cuda::DeviceBuffer;

// ------------------------------- the library, loaded once -------------------------------

struct CudnnApi {
  decltype(&cudnnGetVersion) GetVersion = nullptr;
  decltype(&cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&cudnnGetLastErrorString) GetLastErrorString = nullptr;
  decltype(&cudnnCreate) Create = nullptr;
  decltype(&cudnnSetStream) SetStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) CreateDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) SetAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) GetAttribute = nullptr;
  decltype(&cudnnBackendFinalize) Finalize = nullptr;
  decltype(&cudnnBackendExecute) Execute = nullptr;
};

template <typename F>
bool Resolve(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

// The library and its entry points, or why not. MESA_ATTENTION_CUDNN=0 turns cuDNN off.
const absl::StatusOr<CudnnApi>& Api() {
  static const absl::StatusOr<CudnnApi>* api = [] {
    const char* setting = std::getenv("MESA_ATTENTION_CUDNN");
    const std::string use = setting == nullptr ? "" : setting;
    if (use == "0") {
      return new absl::StatusOr<CudnnApi>(
          absl::UnavailableError("cuDNN attention turned off by MESA_ATTENTION_CUDNN=0"));
    }
    if (!use.empty() && use != "1") {
      // Read once per process, where no caller can be told: say it on stderr and run our kernels.
      std::fprintf(stderr, "MESA_ATTENTION_CUDNN must be 0 or 1, got '%s': cuDNN attention off\n",
                   use.c_str());
      return new absl::StatusOr<CudnnApi>(absl::InvalidArgumentError(
          absl::StrCat("MESA_ATTENTION_CUDNN must be 0 or 1, got '", use, "'")));
    }
    const char* path = std::getenv("MESA_CUDNN_LIBRARY");
    if (path == nullptr || *path == '\0') path = "libcudnn.so.9";
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      return new absl::StatusOr<CudnnApi>(
          absl::UnavailableError(absl::StrCat("cannot load ", path, ": ", dlerror())));
    }
    CudnnApi a;
    const bool ok = Resolve(lib, "cudnnGetVersion", &a.GetVersion) &&
                    Resolve(lib, "cudnnGetErrorString", &a.GetErrorString) &&
                    Resolve(lib, "cudnnGetLastErrorString", &a.GetLastErrorString) &&
                    Resolve(lib, "cudnnCreate", &a.Create) &&
                    Resolve(lib, "cudnnSetStream", &a.SetStream) &&
                    Resolve(lib, "cudnnBackendCreateDescriptor", &a.CreateDescriptor) &&
                    Resolve(lib, "cudnnBackendDestroyDescriptor", &a.DestroyDescriptor) &&
                    Resolve(lib, "cudnnBackendSetAttribute", &a.SetAttribute) &&
                    Resolve(lib, "cudnnBackendGetAttribute", &a.GetAttribute) &&
                    Resolve(lib, "cudnnBackendFinalize", &a.Finalize) &&
                    Resolve(lib, "cudnnBackendExecute", &a.Execute);
    if (!ok) {
      return new absl::StatusOr<CudnnApi>(
          absl::UnavailableError(absl::StrCat(path, " lacks the cuDNN 9 backend API")));
    }
    if (a.GetVersion() < 90000) {
      return new absl::StatusOr<CudnnApi>(absl::UnavailableError(
          absl::StrCat(path, " is cuDNN ", a.GetVersion(), "; 9.0 or newer is needed")));
    }
    return new absl::StatusOr<CudnnApi>(a);
  }();
  return *api;
}

// ------------------------------- graph building -------------------------------

// Fixed ids of the tensors that carry data; virtual ones count up from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDo,
  kDq,
  kDk,
  kDv,
  kRowSum,   // backward: sum over d of do * o, fp32 [b,h,s,1] (scratch)
  kDqAccum,  // backward: fp32 dq [b,h,s,d] contiguous (scratch)
  kScale,
  kNegInf,
  kOne,
  kWindow,
  kDocStart,  // packed documents: int32 [b,1,s,1], each query's document start
  kFirstVirtual = 100,
};

using Dims = std::array<int64_t, 4>;

struct Shape {
  int64_t b, t, h, d;
  int64_t window;  // 0: global causal; else 1 <= window < t
  bool documents;  // a kDocStart input bounds each query's keys from below
};

// The by-value scalars' host values. cuDNN reads them when a plan is enqueued, through the
// pointers in the (cached) variant pack, so they live in the plan and are rewritten before each
// call under the cache's lock.
struct ScalarValues {
  float scale, neg_inf, one, window;
};

// Owns every descriptor of one graph and its plan (cuDNN may refer to them until destroyed);
// the first failing call is kept and reported by status().
class Graph {
 public:
  explicit Graph(const CudnnApi& api) : api_(api) {}
  ~Graph() {
    ClearPacks();
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.DestroyDescriptor(*it);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const absl::Status& status() const { return status_; }

  int64_t Tensor(cudnnDataType_t type, const Dims& dims, const Dims& strides, bool is_virtual,
                 int64_t uid = 0, bool by_value = false) {
    if (uid == 0) uid = next_virtual_++;
    cudnnBackendDescriptor_t t = New(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    Set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    Set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    Set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    Set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    Set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    Set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) Set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    Finalize(t, "tensor");
    tensors_[uid] = t;
    return uid;
  }
  int64_t Scalar(int64_t uid) {
    return Tensor(CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, uid, true);
  }

  // y = mode(x[, b[, t]]); axis >= 0 for GEN_INDEX.
  void Pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision, int64_t x, int64_t b,
                 int64_t t, int64_t y, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = New(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    Set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    Set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &precision);
    if (axis >= 0) Set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    Finalize(pw, "pointwise");
    cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    SetTensor(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != 0) SetTensor(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != 0) SetTensor(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    SetTensor(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    const float one = 1.f;
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    Set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    AddOp(op, "pointwise op");
  }
  void Reduction(cudnnReduceTensorOp_t mode, int64_t x, int64_t y) {
    cudnnBackendDescriptor_t rd = New(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    Set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    Set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    Finalize(rd, "reduction");
    cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    SetTensor(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    SetTensor(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    AddOp(op, "reduction op");
  }
  void Matmul(int64_t a, int64_t b, int64_t c) {
    cudnnBackendDescriptor_t mm = New(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t fp32 = CUDNN_DATA_FLOAT;
    Set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fp32);
    Finalize(mm, "matmul");
    cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    Set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    SetTensor(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    SetTensor(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    SetTensor(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    AddOp(op, "matmul op");
  }
  void Reshape(int64_t x, int64_t y) {
    cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    SetTensor(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    SetTensor(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    AddOp(op, "reshape op");
  }

  // The operation graph, then the first engine configuration of heuristics mode A that cuDNN
  // finalizes into a plan. Unimplemented when none does.
  absl::Status Build(cudnnHandle_t handle) {
    if (!status_.ok()) return status_;
    cudnnBackendDescriptor_t graph = New(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    Set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data());
    Finalize(graph, "operation graph");
    cudnnBackendDescriptor_t heur = New(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    Set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    Set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    Finalize(heur, "engine heuristics");
    if (!status_.ok()) return status_;
    int64_t count = 0;
    Check(api_.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                            &count, nullptr),
          "engine count");
    if (!status_.ok()) return status_;
    std::vector<cudnnBackendDescriptor_t> configs(count);
    for (auto& c : configs) c = New(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    Check(api_.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                            count, &got, configs.data()),
          "engine configs");
    if (!status_.ok()) return status_;
    std::string tried;
    for (int64_t i = 0; i < got; ++i) {
      cudnnBackendDescriptor_t plan = New(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      Set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      Set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &configs[i]);
      if (!status_.ok()) return status_;
      const cudnnStatus_t s = api_.Finalize(plan);
      if (s != CUDNN_STATUS_SUCCESS) {
        absl::StrAppend(&tried, " [config ", i, ": ", api_.GetErrorString(s), " ", LastError(),
                        "]");
        continue;
      }
      Check(api_.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                              nullptr, &workspace_bytes_),
            "workspace size");
      plan_ = plan;
      return status_;
    }
    return absl::UnimplementedError(
        absl::StrCat("cuDNN has no engine for this attention graph (", got, " configs)", tried));
  }

  int64_t workspace_bytes() const { return workspace_bytes_; }
  ScalarValues& scalars() { return scalars_; }

  // Runs the plan with `pointers` (uid -> device pointer, or host pointer for by-value scalars).
  // The variant pack of a pointer set is kept (a training step calls each layer's attention with
  // the same buffers every step), so a repeated call costs cuDNN's execute alone.
  absl::Status Execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& pointers,
                       void* workspace) {
    std::vector<void*> key;
    for (const auto& [uid, ptr] : pointers) key.push_back(ptr);
    key.push_back(workspace);
    auto it = packs_.find(key);
    if (it == packs_.end()) {
      if (packs_.size() >= kMaxPacks) ClearPacks();
      absl::StatusOr<cudnnBackendDescriptor_t> pack = NewPack(pointers, workspace);
      if (!pack.ok()) return pack.status();
      it = packs_.emplace(std::move(key), *pack).first;
    }
    if (cudnnStatus_t s = api_.Execute(handle, plan_, it->second); s != CUDNN_STATUS_SUCCESS)
      return Error(s, "execute");
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kMaxPacks = 256;

  absl::StatusOr<cudnnBackendDescriptor_t> NewPack(
      const std::vector<std::pair<int64_t, void*>>& pointers, void* workspace) const {
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [uid, ptr] : pointers) {
      uids.push_back(uid);
      ptrs.push_back(ptr);
    }
    cudnnBackendDescriptor_t pack = nullptr;
    if (cudnnStatus_t s = api_.CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
        s != CUDNN_STATUS_SUCCESS) {
      return Error(s, "variant pack");
    }
    const int64_t n = static_cast<int64_t>(uids.size());
    cudnnStatus_t s = api_.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        n, uids.data());
    if (s == CUDNN_STATUS_SUCCESS) {
      s = api_.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                            ptrs.data());
    }
    if (s == CUDNN_STATUS_SUCCESS) {
      s = api_.SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                            &workspace);
    }
    if (s == CUDNN_STATUS_SUCCESS) s = api_.Finalize(pack);
    if (s != CUDNN_STATUS_SUCCESS) {
      api_.DestroyDescriptor(pack);
      return Error(s, "variant pack");
    }
    return pack;
  }
  void ClearPacks() {
    for (auto& [key, pack] : packs_) api_.DestroyDescriptor(pack);
    packs_.clear();
  }

  cudnnBackendDescriptor_t New(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!status_.ok()) return nullptr;
    if (Check(api_.CreateDescriptor(type, &d), "create descriptor")) owned_.push_back(d);
    return d;
  }
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    if (!status_.ok()) return;
    Check(api_.SetAttribute(d, name, type, count, value), "set attribute");
  }
  void SetTensor(cudnnBackendDescriptor_t op, cudnnBackendAttributeName_t name, int64_t uid) {
    Set(op, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tensors_[uid]);
  }
  void Finalize(cudnnBackendDescriptor_t d, const char* what) {
    if (!status_.ok()) return;
    Check(api_.Finalize(d), what);
  }
  void AddOp(cudnnBackendDescriptor_t op, const char* what) {
    Finalize(op, what);
    ops_.push_back(op);
  }
  std::string LastError() const {
    char message[512] = {0};
    api_.GetLastErrorString(message, sizeof(message));
    return message;
  }
  absl::Status Error(cudnnStatus_t s, const char* what) const {
    return absl::InternalError(
        absl::StrCat("cuDNN ", what, ": ", api_.GetErrorString(s), " ", LastError()));
  }
  bool Check(cudnnStatus_t s, const char* what) {
    if (s == CUDNN_STATUS_SUCCESS) return true;
    if (status_.ok()) status_ = Error(s, what);
    return false;
  }

  const CudnnApi& api_;
  absl::Status status_;
  std::vector<cudnnBackendDescriptor_t> owned_;
  std::map<int64_t, cudnnBackendDescriptor_t> tensors_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
  cudnnBackendDescriptor_t plan_ = nullptr;
  int64_t workspace_bytes_ = 0;
  ScalarValues scalars_{};
  // Variant packs by their pointers (the device pointers, host scalars and workspace in order).
  std::map<std::vector<void*>, cudnnBackendDescriptor_t> packs_;
};

// Tensor shapes of one problem.
struct Layout {
  explicit Layout(const Shape& s)
      : tokens{s.b, s.h, s.t, s.d},
        token_strides{s.t * s.h * s.d, s.d, s.h * s.d, 1},
        transposed{s.b, s.h, s.d, s.t},
        transposed_strides{s.t * s.h * s.d, s.d, 1, s.h * s.d},
        contiguous_strides{s.h * s.t * s.d, s.t * s.d, s.d, 1},
        scores{s.b, s.h, s.t, s.t},
        score_strides{s.h * s.t * s.t, s.t * s.t, s.t, 1},
        scores_t_strides{s.h * s.t * s.t, s.t * s.t, 1, s.t},
        rows{s.b, s.h, s.t, 1},
        row_strides{s.h * s.t, s.t, 1, 1},
        stats_strides{s.t * s.h, 1, s.h, 1} {}
  Dims tokens, token_strides, transposed, transposed_strides, contiguous_strides;
  Dims scores, score_strides, scores_t_strides, rows, row_strides, stats_strides;
};

// The causal mask (and the window's left edge) on the scores `x`, as cudnn-frontend's
// sliding_window_mask builds it: keep row >= col, then col + window > row.
int64_t Mask(Graph& g, const Layout& l, const Shape& s, int64_t x) {
  auto score = [&](cudnnDataType_t type) {
    return g.Tensor(type, l.scores, l.score_strides, true);
  };
  const int64_t row = score(CUDNN_DATA_INT32), col = score(CUDNN_DATA_INT32);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, 0, 0, row, 2);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, 0, 0, col, 3);
  const int64_t causal = score(CUDNN_DATA_BOOLEAN);
  int64_t masked = score(CUDNN_DATA_FLOAT);
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, 0, causal);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, kNegInf, causal, masked);
  if (s.documents) {  // keep col >= doc_start[row]: the query's own document only
    const int64_t col3 = score(CUDNN_DATA_INT32), in_doc = score(CUDNN_DATA_BOOLEAN);
    const int64_t doc_masked = score(CUDNN_DATA_FLOAT);
    g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, masked, 0, 0, col3, 3);
    g.Pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, col3, kDocStart, 0, in_doc);
    g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, masked, kNegInf, in_doc,
                doc_masked);
    masked = doc_masked;
  }
  if (s.window == 0) return masked;
  const int64_t row2 = score(CUDNN_DATA_INT32), col2 = score(CUDNN_DATA_INT32);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, masked, 0, 0, row2, 2);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, masked, 0, 0, col2, 3);
  const int64_t shifted = score(CUDNN_DATA_FLOAT), inside = score(CUDNN_DATA_BOOLEAN);
  g.Pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, col2, kWindow, 0, shifted);
  g.Pointwise(CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, shifted, row2, 0, inside);
  const int64_t windowed = score(CUDNN_DATA_FLOAT);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, masked, kNegInf, inside, windowed);
  return windowed;
}

// The by-value scalars and, with documents, the per-query document starts.
void Scalars(Graph& g, const Shape& s) {
  g.Scalar(kScale);
  g.Scalar(kNegInf);
  if (s.window != 0) g.Scalar(kWindow);
  if (s.documents) g.Tensor(CUDNN_DATA_INT32, {s.b, 1, s.t, 1}, {s.t, s.t, 1, 1}, false, kDocStart);
}

// o = softmax(mask(scale * q kᵀ)) v, stats = log-sum-exp of the masked scaled scores per row.
void ForwardGraph(Graph& g, const Shape& s, bool with_stats) {
  const Layout l(s);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kQ);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.transposed, l.transposed_strides, false, kK);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kV);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kO);
  // Without stats (inference) cuDNN still wants the node, as a virtual tensor.
  const int64_t stats = with_stats
                            ? g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.stats_strides, false, kStats)
                            : g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.row_strides, true);
  Scalars(g, s);
  auto score = [&] { return g.Tensor(CUDNN_DATA_FLOAT, l.scores, l.score_strides, true); };
  auto row = [&] { return g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.row_strides, true); };
  const int64_t qk = score(), scaled = score();
  g.Matmul(kQ, kK, qk);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, qk, kScale, 0, scaled);
  const int64_t masked = Mask(g, l, s, scaled);
  const int64_t max = row(), centered = score(), e = score(), sum = row(), log_sum = row();
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
  g.Pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, masked, max, 0, centered);
  g.Pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centered, 0, 0, e);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.Pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, 0, 0, log_sum);
  g.Pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, max, log_sum, 0, stats);
  // The second matmul's A operand must have V's type (cuDNN's fused-attention pattern).
  const int64_t p = g.Tensor(CUDNN_DATA_BFLOAT16, l.scores, l.score_strides, true);
  g.Pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, 0, p);
  g.Matmul(p, kV, kO);
}

// FlashAttention's backward: P = exp(mask(scale q kᵀ) - stats), dv = Pᵀ do,
// dS = scale * P ∘ (do vᵀ - rowsum(do ∘ o)), dk = dSᵀ q, dq = dS k: accumulated in an fp32
// tensor (float atomics), or, deterministic, written straight to dq, which makes cuDNN choose
// its engine that keeps dS in its workspace and sums dq in a fixed order (what cudnn-frontend's
// SDPA backward builds for set_deterministic_algorithm on Hopper).
void BackwardGraph(Graph& g, const Shape& s, bool deterministic) {
  const Layout l(s);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kQ);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.transposed, l.transposed_strides, false, kK);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.transposed, l.transposed_strides, false, kV);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kO);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kDo);
  g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.stats_strides, false, kStats);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kDq);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kDk);
  g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, false, kDv);
  g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.row_strides, false, kRowSum);
  if (!deterministic) g.Tensor(CUDNN_DATA_FLOAT, l.tokens, l.contiguous_strides, false, kDqAccum);
  Scalars(g, s);
  g.Scalar(kOne);
  auto score = [&] { return g.Tensor(CUDNN_DATA_FLOAT, l.scores, l.score_strides, true); };
  auto score_t = [&] {  // a transposed bf16 view of scores, the A operand of dv and dk
    return g.Tensor(CUDNN_DATA_BFLOAT16, l.scores, l.scores_t_strides, true);
  };
  const int64_t do_o = g.Tensor(CUDNN_DATA_FLOAT, l.tokens, l.contiguous_strides, true);
  const int64_t row_dot = g.Tensor(CUDNN_DATA_FLOAT, l.rows, l.row_strides, true);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, kDo, kO, 0, do_o);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, row_dot);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, row_dot, kOne, 0, kRowSum);

  const int64_t qk = score(), scaled = score(), centered = score();
  g.Matmul(kQ, kK, qk);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, qk, kScale, 0, scaled);
  g.Pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, scaled, kStats, 0, centered);
  const int64_t masked = Mask(g, l, s, centered);
  const int64_t p = score(), p_t = score_t();
  g.Pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, masked, 0, 0, p);
  g.Reshape(p, p_t);
  g.Matmul(p_t, kDo, kDv);

  const int64_t dp = score(), dp_centered = score(), ds = score(), ds_scaled = score();
  g.Matmul(kDo, kV, dp);
  g.Pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, kRowSum, 0, dp_centered);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp_centered, p, 0, ds);
  g.Pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, ds, kScale, 0, ds_scaled);
  const int64_t ds_t = score_t();
  g.Reshape(ds_scaled, ds_t);
  g.Matmul(ds_t, kQ, kDk);

  const int64_t k_rows = g.Tensor(CUDNN_DATA_BFLOAT16, l.tokens, l.token_strides, true);
  g.Reshape(kK, k_rows);
  if (deterministic) {
    g.Matmul(ds_scaled, k_rows, kDq);
  } else {
    g.Matmul(ds_scaled, k_rows, kDqAccum);
    g.Pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, kDqAccum, 0, 0, kDq);
  }
}

// ------------------------------- plan cache -------------------------------

struct PlanKey {
  int device;
  int64_t b, t, h, d, window;
  bool documents, backward, with_stats, deterministic;
  auto operator<=>(const PlanKey&) const = default;
};

struct Cache {
  std::mutex mu;
  std::map<int, cudnnHandle_t> handles;
  // A plan, or why cuDNN cannot serve the key (asked once).
  std::map<PlanKey, absl::StatusOr<std::shared_ptr<Graph>>> plans;
};

Cache& TheCache() {
  static Cache* cache = new Cache;
  return *cache;
}

Shape ShapeOf(const DeviceProblem& p) {
  const AttnDims& d = p.dims;
  // A window covering the whole sequence is global attention.
  const int64_t window = p.window >= d.seq_len ? 0 : p.window;
  return {d.batch, d.seq_len, d.heads, d.head_dim, window, p.doc_start != nullptr};
}

// The cached plan of `key` (built on first use) and the device's handle bound to `stream`.
// Holds cache.mu while it runs; the caller keeps the lock through Execute (cuDNN handles are not
// thread-safe).
absl::StatusOr<std::shared_ptr<Graph>> PlanFor(const CudnnApi& api, Cache& cache,
                                               const PlanKey& key, const Shape& s,
                                               cudaStream_t stream, cudnnHandle_t* handle) {
  auto h = cache.handles.find(key.device);
  if (h == cache.handles.end()) {
    cudnnHandle_t created = nullptr;
    if (cudnnStatus_t st = api.Create(&created); st != CUDNN_STATUS_SUCCESS)
      return absl::InternalError(absl::StrCat("cudnnCreate: ", api.GetErrorString(st)));
    h = cache.handles.emplace(key.device, created).first;
  }
  *handle = h->second;
  if (cudnnStatus_t st = api.SetStream(*handle, stream); st != CUDNN_STATUS_SUCCESS)
    return absl::InternalError(absl::StrCat("cudnnSetStream: ", api.GetErrorString(st)));
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) {
    auto graph = std::make_shared<Graph>(api);
    if (key.backward) {
      BackwardGraph(*graph, s, key.deterministic);
    } else {
      ForwardGraph(*graph, s, key.with_stats);
    }
    // Whatever stops a plan from being built means cuDNN cannot serve this shape (a version
    // without an engine for it answers in several ways): Unimplemented, so that kAuto runs our
    // kernels; the message says what cuDNN said.
    absl::Status built = graph->Build(*handle);
    absl::StatusOr<std::shared_ptr<Graph>> entry =
        built.ok() ? absl::StatusOr<std::shared_ptr<Graph>>(graph)
                   : absl::UnimplementedError(built.message());
    it = cache.plans.emplace(key, std::move(entry)).first;
  }
  return it->second;
}

absl::StatusOr<PlanKey> KeyOf(const DeviceProblem& p, bool backward, bool with_stats) {
  int device = 0;
  MESA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  const Shape s = ShapeOf(p);
  return PlanKey{device,   s.b,         s.t,      s.h,        s.d,
                 s.window, s.documents, backward, with_stats, backward && p.deterministic};
}

ScalarValues ValuesOf(const DeviceProblem& p) {
  return {EffectiveScale({.scale = p.scale}, p.dims.head_dim),
          -std::numeric_limits<float>::infinity(), 1.f, static_cast<float>(ShapeOf(p).window)};
}

size_t Aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// One call's plan, the device's handle bound to the stream, and the cache's lock, held until the
// plan is enqueued. The plan's scalars are set for p.
struct Call {
  std::unique_lock<std::mutex> lock;
  const CudnnApi* api = nullptr;
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<Graph> plan;
  // uid -> pointer: the call's tensors, then the plan's by-value scalars.
  std::vector<std::pair<int64_t, void*>> pointers;

  // The document starts (if any) and the by-value scalars (`one`: the backward's 1).
  void AddProblemInputs(const DeviceProblem& p, bool one) {
    if (p.doc_start != nullptr) pointers.push_back({kDocStart, const_cast<int32_t*>(p.doc_start)});
    const bool window = ShapeOf(p).window != 0;
    ScalarValues& v = plan->scalars();
    pointers.push_back({kScale, &v.scale});
    pointers.push_back({kNegInf, &v.neg_inf});
    if (window) pointers.push_back({kWindow, &v.window});
    if (one) pointers.push_back({kOne, &v.one});
  }
};

absl::StatusOr<Call> Begin(const DeviceProblem& p, bool backward, bool with_stats,
                           cudaStream_t stream) {
  const absl::StatusOr<CudnnApi>& api = Api();
  if (!api.ok()) return api.status();
  if (!CudnnExpresses(p)) return absl::UnimplementedError("cuDNN attention: bf16 only");
  const absl::StatusOr<PlanKey> key = KeyOf(p, backward, with_stats);
  if (!key.ok()) return key.status();
  Cache& cache = TheCache();
  Call call{.lock = std::unique_lock<std::mutex>(cache.mu), .api = &*api};
  absl::StatusOr<std::shared_ptr<Graph>> plan =
      PlanFor(*api, cache, *key, ShapeOf(p), stream, &call.handle);
  if (!plan.ok()) return plan.status();
  call.plan = *std::move(plan);
  call.plan->scalars() = ValuesOf(p);
  return call;
}

}  // namespace

absl::Status CudnnAvailable() { return Api().status(); }

bool CudnnExpresses(const DeviceProblem& p) { return p.dtype == DType::kBF16; }

absl::Status CudnnForward(const DeviceProblem& p, const DeviceInputs& in, void* o, float* lse,
                          cudaStream_t stream) {
  absl::StatusOr<Call> call = Begin(p, /*backward=*/false, lse != nullptr, stream);
  if (!call.ok()) return call.status();
  call->pointers = {{kQ, const_cast<void*>(in.q)},
                    {kK, const_cast<void*>(in.k)},
                    {kV, const_cast<void*>(in.v)},
                    {kO, o}};
  if (lse != nullptr) call->pointers.push_back({kStats, lse});
  call->AddProblemInputs(p, /*one=*/false);
  void* workspace = nullptr;
  const size_t bytes = static_cast<size_t>(call->plan->workspace_bytes());
  if (bytes > 0) MESA_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&workspace, bytes, stream), "workspace");
  absl::Status s = call->plan->Execute(call->handle, call->pointers, workspace);
  if (workspace != nullptr) cudaFreeAsync(workspace, stream);
  return s;
}

absl::Status CudnnBackward(const DeviceProblem& p, const DeviceInputs& in, const void* o,
                           const float* lse, const void* d_o, void* dq, void* dk, void* dv,
                           DeviceBuffer* scratch, cudaStream_t stream) {
  absl::StatusOr<Call> call = Begin(p, /*backward=*/true, /*with_stats=*/true, stream);
  if (!call.ok()) return call.status();
  const int64_t plan_bytes = call->plan->workspace_bytes();
  if (p.deterministic && plan_bytes > kMaxDeterministicWorkspaceBytes) {
    return absl::UnimplementedError(absl::StrCat(
        "cuDNN attention: the deterministic backward's workspace (dS, [B,H,T,T] bf16) would take ",
        plan_bytes >> 20, " MiB, over the limit of ", kMaxDeterministicWorkspaceBytes >> 20,
        " MiB"));
  }
  // Scratch: [cuDNN workspace | fp32 dq accumulator (none when deterministic) | fp32 row sums].
  const size_t ws_bytes = Aligned(static_cast<size_t>(plan_bytes));
  const size_t acc_bytes =
      p.deterministic ? 0 : Aligned(static_cast<size_t>(p.dims.TokenElems()) * sizeof(float));
  const size_t row_bytes = Aligned(static_cast<size_t>(p.dims.RowElems()) * sizeof(float));
  if (auto s = scratch->Ensure(ws_bytes + acc_bytes + row_bytes); !s.ok()) return s;
  char* base = scratch->as<char>();
  void* dq_accum = base + ws_bytes;
  void* row_sum = base + ws_bytes + acc_bytes;
  // cuDNN before 9.6 expects the accumulator cleared by its caller.
  if (!p.deterministic && call->api->GetVersion() < 90600) {
    MESA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dq_accum, 0, acc_bytes, stream), "dq clear");
  }
  call->pointers = {{kQ, const_cast<void*>(in.q)},
                    {kK, const_cast<void*>(in.k)},
                    {kV, const_cast<void*>(in.v)},
                    {kO, const_cast<void*>(o)},
                    {kDo, const_cast<void*>(d_o)},
                    {kStats, const_cast<float*>(lse)},
                    {kDq, dq},
                    {kDk, dk},
                    {kDv, dv},
                    {kRowSum, row_sum}};
  if (!p.deterministic) call->pointers.push_back({kDqAccum, dq_accum});
  call->AddProblemInputs(p, /*one=*/true);
  return call->plan->Execute(call->handle, call->pointers, ws_bytes > 0 ? base : nullptr);
}

}  // namespace mesa::kernels::attention::cuda
