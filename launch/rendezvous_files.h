// The files of a trainer rendezvous directory (MESA_RENDEZVOUS=file:DIR), shared by the trainer's
// FileIdExchange (model/comm/unique_id_exchange.h), which writes and polls them, and the worker
// agent's bridge (worker/rendezvous_bridge.h), which relays them to the coordinator:
//   KEY          a value; KEY is 1 to 128 of [A-Za-z0-9._-], the file appears whole (written under
//                a temporary name and renamed)
//   KEY+want     an empty marker: a rank is waiting for KEY
//   anything else (temporaries, whose names always contain '+') is ignored
#ifndef MESANET_LAUNCH_RENDEZVOUS_FILES_H_
#define MESANET_LAUNCH_RENDEZVOUS_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mesa::launch {

inline constexpr char kRendezvousWantSuffix[] = "+want";
// Used when the worker gives no MESA_RENDEZVOUS: a directory under the job's checkpoint root,
// which every rank of a job shares.
inline constexpr char kCheckpointRendezvousDir[] = ".rendezvous";

bool IsRendezvousKey(absl::string_view key);

std::string RendezvousValuePath(absl::string_view dir, absl::string_view key);
std::string RendezvousWantPath(absl::string_view dir, absl::string_view key);

enum class RendezvousEntry { kValue, kWant, kOther };

// Classifies a file name found in the directory; for kValue and kWant, *key is set.
RendezvousEntry ClassifyRendezvousEntry(absl::string_view name, std::string* key);

}  // namespace mesa::launch

#endif  // MESANET_LAUNCH_RENDEZVOUS_FILES_H_
