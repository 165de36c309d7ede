// mesactl's configuration file: named contexts, each a coordinator with the CA and token to use
// there (kubectl's kubeconfig, in small), so that users switch clusters with --context instead of
// exporting MESA_SERVER, MESA_CA and MESA_TOKEN. See docs/mesactl.md.
//
//   current_context: prod            # used when neither --context nor $MESA_CONTEXT names one
//   contexts:
//     - name: prod
//       server: coordinator.example:50051
//       ca: prod-ca.pem              # relative paths: to the configuration file's directory
//       token_file: prod.token       # the token in a file of its own (chmod 600), or
//     - name: dev                    #   token: <token>  (then chmod 600 this file)
//       server: 127.0.0.1:50051
#ifndef MESANET_CLI_CONFIG_H_
#define MESANET_CLI_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mesa::cli {

// What a context says; empty fields are not set.
struct ContextSettings {
  std::string server;
  std::string ca;     // absolute
  std::string token;  // from `token` or the content of `token_file`
  // Lines for stderr (a token in a file others may read); never hold the token.
  std::vector<std::string> warnings;
};

// The configuration file: $MESA_CONFIG, else $XDG_CONFIG_HOME/mesa/config.yaml, else
// $HOME/.config/mesa/config.yaml ("" when none of the variables is set).
std::string DefaultConfigPath();

// The context `name` of the file at `path` (empty `name`: the file's current_context; neither:
// no context, all fields empty). A missing file is no context when `must_exist` is false (the
// default path), else an error. INVALID_ARGUMENT naming the file and the key for a malformed
// file, an unknown key, an unknown context, or both `token` and `token_file`; messages never
// hold a token.
absl::StatusOr<ContextSettings> LoadContext(const std::string& path, const std::string& name,
                                            bool must_exist);

}  // namespace mesa::cli

#endif  // MESANET_CLI_CONFIG_H_
