// Operators per backend, looked up by the backend's name. Each mixer declares its operator
// interface (e.g. MesaOps in model/mixers/mesa/mesa_ops.h, with a static `kName` for messages) and
// each backend's implementation of it registers a factory from a static initialiser in an
// alwayslink library (RegisterOps<MesaOps>("cuda", &Make...)). The Backend interface therefore
// names no mixer, and a new mixer or a new backend's kernels are new files only.
#ifndef MESANET_MODEL_MIXERS_MIXER_OPS_H_
#define MESANET_MODEL_MIXERS_MIXER_OPS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "model/backend/backend.h"

namespace mesa::model {

template <typename Ops>
using OpsFactory = std::unique_ptr<Ops> (*)(Backend& backend);

template <typename Ops>
std::map<std::string, OpsFactory<Ops>>& OpsFactories() {
  static auto* factories = new std::map<std::string, OpsFactory<Ops>>();
  return *factories;
}

// Registers `factory` as the implementation of `Ops` on backends named `backend_name`.
template <typename Ops>
bool RegisterOps(const std::string& backend_name, OpsFactory<Ops> factory) {
  OpsFactories<Ops>()[backend_name] = factory;
  return true;
}

// A new instance of `Ops` for `backend`; Unimplemented when none is registered for its name.
template <typename Ops>
absl::StatusOr<std::unique_ptr<Ops>> MakeOps(Backend& backend) {
  const auto& factories = OpsFactories<Ops>();
  auto it = factories.find(backend.Name());
  if (it == factories.end()) {
    return absl::UnimplementedError(absl::StrCat("the ", backend.Name(), " backend has no ",
                                                 Ops::kName, " operator (none is linked in)"));
  }
  std::unique_ptr<Ops> ops = it->second(backend);
  if (ops == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("the ", Ops::kName, " operator for the ",
                                                      backend.Name(),
                                                      " backend does not run on this backend"));
  }
  return ops;
}

// One layer's instance of `Ops`, made for the backend it is first called with (and again if a
// later call brings another backend). Instances are per layer so that an operator may keep what a
// layer's forward computed for the same layer's backward.
template <typename Ops>
class LayerOps {
 public:
  absl::StatusOr<Ops*> For(Backend& backend) {
    if (ops_ == nullptr || backend_ != &backend) {
      absl::StatusOr<std::unique_ptr<Ops>> made = MakeOps<Ops>(backend);
      if (!made.ok()) return made.status();
      ops_ = *std::move(made);
      backend_ = &backend;
    }
    return ops_.get();
  }

 private:
  const Backend* backend_ = nullptr;
  std::unique_ptr<Ops> ops_;
};

}  // namespace mesa::model

#endif  // MESANET_MODEL_MIXERS_MIXER_OPS_H_
