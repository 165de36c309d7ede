#include "cli/config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "yaml-cpp/yaml.h"

namespace mesa::cli {
namespace {

constexpr size_t kMaxConfigBytes = 1 << 20;

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// A token in a file other users may read is worth a warning.
void WarnIfShared(const std::string& path, absl::string_view what, ContextSettings* out) {
  struct stat info;
  if (stat(path.c_str(), &info) == 0 && (info.st_mode & 0077) != 0) {
    out->warnings.push_back(absl::StrCat(
        "warning: ", path, " holds ", what, " and is readable or writable by other users (mode ",
        absl::StrFormat("%03o", info.st_mode & 0777), "); chmod 600 it"));
  }
}

}  // namespace

std::string DefaultConfigPath() {
  if (std::string path = Env("MESA_CONFIG"); !path.empty()) return path;
  if (std::string xdg = Env("XDG_CONFIG_HOME"); !xdg.empty()) return xdg + "/mesa/config.yaml";
  if (std::string home = Env("HOME"); !home.empty()) return home + "/.config/mesa/config.yaml";
  return "";
}

absl::StatusOr<ContextSettings> LoadContext(const std::string& path, const std::string& name,
                                            bool must_exist) {
  ContextSettings out;
  auto error = [&](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat("config ", path, ": ", message));
  };
  if (path.empty()) {
    if (!name.empty()) return absl::InvalidArgumentError("--context needs a configuration file");
    return out;
  }
  std::error_code exists_error;
  if (!must_exist && name.empty() && !std::filesystem::exists(path, exists_error)) return out;
  absl::StatusOr<std::string> text = base::ReadFile(path, kMaxConfigBytes);
  if (!text.ok()) return error(text.status().message());
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    // A position, not the text (which may hold tokens).
    return error(absl::StrCat("not YAML (line ", e.mark.line + 1, ")"));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) return error("expected a map with `contexts` and `current_context`");
  for (const auto& field : root) {
    const std::string key = field.first.Scalar();
    if (key != "contexts" && key != "current_context") {
      return error(absl::StrCat("unknown key \"", key, "\""));
    }
  }
  std::string wanted = name;
  if (wanted.empty() && root["current_context"]) {
    if (!root["current_context"].IsScalar()) return error("current_context must be a name");
    wanted = root["current_context"].Scalar();
  }
  const YAML::Node contexts = root["contexts"];
  if (contexts && !contexts.IsSequence()) return error("contexts must be a list");
  std::set<std::string> names;
  std::optional<YAML::Node> chosen;  // a copy shares the node (Node::operator= would not)
  int index = 0;
  for (const YAML::Node& context : contexts ? contexts : YAML::Node(YAML::NodeType::Sequence)) {
    const std::string where = absl::StrCat("contexts[", index++, "]");
    if (!context.IsMap()) return error(absl::StrCat(where, " is not a map"));
    for (const auto& field : context) {
      const std::string key = field.first.Scalar();
      if (key != "name" && key != "server" && key != "ca" && key != "token" &&
          key != "token_file") {
        return error(absl::StrCat(where, ": unknown key \"", key, "\""));
      }
      if (!field.second.IsScalar()) return error(absl::StrCat(where, ".", key, " must be text"));
    }
    if (!context["name"] || context["name"].Scalar().empty()) {
      return error(absl::StrCat(where, ": name is required"));
    }
    const std::string context_name = context["name"].Scalar();
    if (!names.insert(context_name).second) {
      return error(absl::StrCat(where, ": context \"", context_name, "\" repeats"));
    }
    if (context["token"] && context["token_file"]) {
      return error(absl::StrCat(where, " (", context_name,
                                "): token and token_file exclude "
                                "each other"));
    }
    if (context_name == wanted) chosen.emplace(context);
  }
  if (wanted.empty()) return out;
  if (!chosen.has_value()) return error(absl::StrCat("no context \"", wanted, "\""));
  const YAML::Node& c = *chosen;
  // Relative file names are the configuration file's neighbours, wherever mesactl runs.
  const std::filesystem::path dir = std::filesystem::absolute(path).parent_path();
  auto file = [&](const std::string& value) {
    const std::filesystem::path p(value);
    return (p.is_absolute() ? p : dir / p).lexically_normal().string();
  };
  if (c["server"]) out.server = c["server"].Scalar();
  if (c["ca"]) out.ca = file(c["ca"].Scalar());
  if (c["token"]) {
    out.token = c["token"].Scalar();
    WarnIfShared(path, "a token", &out);
  } else if (c["token_file"]) {
    const std::string token_file = file(c["token_file"].Scalar());
    absl::StatusOr<std::string> token =
        base::ReadFile(token_file, 64 << 10, base::FileKinds::kRegularOrStream);
    if (!token.ok()) {
      return error(
          absl::StrCat("context \"", wanted, "\": token_file: ", token.status().message()));
    }
    out.token = std::string(absl::StripAsciiWhitespace(*token));
    if (out.token.empty()) {
      return error(absl::StrCat("context \"", wanted, "\": token_file ", token_file, " is empty"));
    }
    WarnIfShared(token_file, "a token", &out);
  }
  return out;
}

}  // namespace mesa::cli
