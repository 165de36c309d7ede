// The release of every binary (mesa-coordinator, mesa-worker, mesa-train, mesactl): printed by
// `mesactl version` and `--version`, exported as mesa_build_info{version} and answered by
// ClusterService.GetVersion. Bump it with every release (docs/operations.md, "Upgrades").
#ifndef MESANET_BASE_VERSION_H_
#define MESANET_BASE_VERSION_H_

namespace mesa {

inline constexpr char kVersion[] = "0.16.0";

}  // namespace mesa

#endif  // MESANET_BASE_VERSION_H_
