#include "coordinator/token_table.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "openssl/crypto.h"
#include "yaml-cpp/yaml.h"

namespace mesa::coordinator {

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // OpenSSL's CRYPTO_memcmp takes the same time whatever the bytes hold; only the sizes shape it.
  // A presented value of another size is still compared (with itself) so the work is the same.
  if (a.size() != b.size()) {
    (void)CRYPTO_memcmp(a.data(), a.data(), a.size());
    return false;
  }
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

constexpr size_t kMinTokenLength = 16;

absl::Status TokensError(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--tokens_file: ", message));
}

// Tokens travel as gRPC metadata: visible ASCII, no spaces.
bool IsTokenText(absl::string_view token) {
  for (char c : token) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

absl::StatusOr<Role> ParseRole(absl::string_view role) {
  if (role == "user") return Role::kUser;
  if (role == "viewer") return Role::kViewer;
  if (role == "admin") return Role::kAdmin;
  return TokensError(absl::StrCat("role \"", role, "\" is not one of user, viewer, admin"));
}

}  // namespace

namespace {

// A user's `quota: {max_queued_jobs, max_gpus, submit_rate, submit_burst}` (each optional, >= 0).
absl::StatusOr<QuotaOverride> ParseQuota(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return TokensError(absl::StrCat(where, " is not a map"));
  QuotaOverride out;
  for (const auto& field : node) {
    const std::string key = field.first.Scalar();
    double value = -1;
    try {
      value = field.second.as<double>();
    } catch (const YAML::Exception&) {
    }
    if (!field.second.IsScalar() || value < 0) {
      return TokensError(absl::StrCat(where, ".", key, ": must be a number >= 0"));
    }
    const bool whole = value == static_cast<double>(static_cast<int64_t>(value));
    if (key == "submit_rate") {
      out.submit_rate = value;
    } else if (key != "max_queued_jobs" && key != "max_gpus" && key != "submit_burst") {
      return TokensError(absl::StrCat(where, ": unknown field \"", key, "\""));
    } else if (!whole) {
      return TokensError(absl::StrCat(where, ".", key, ": must be a whole number"));
    } else {
      const int64_t n = static_cast<int64_t>(value);
      (key == "max_queued_jobs" ? out.max_queued_jobs
       : key == "max_gpus"      ? out.max_gpus
                                : out.submit_burst) = n;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<TokenTable> TokenTable::Parse(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    // The message holds a position, not the file's text (which would hold tokens).
    return TokensError(absl::StrCat("not YAML (line ", e.mark.line + 1, ")"));
  }
  if (!root.IsMap() || !root["users"] || !root["users"].IsSequence()) {
    return TokensError("expected a map with a list `users`");
  }
  TokenTable table;
  std::set<std::string> names;
  int index = 0;
  for (const YAML::Node& user : root["users"]) {
    const std::string where = absl::StrCat("users[", index++, "]");
    if (!user.IsMap()) return TokensError(absl::StrCat(where, " is not a map"));
    for (const auto& field : user) {
      const std::string key = field.first.Scalar();
      if (key != "name" && key != "token" && key != "role" && key != "quota") {
        return TokensError(absl::StrCat(where, ": unknown field \"", key, "\""));
      }
    }
    Entry entry;
    if (!user["name"] || !user["name"].IsScalar() || user["name"].Scalar().empty()) {
      return TokensError(absl::StrCat(where, ": name is required"));
    }
    entry.principal.name = user["name"].Scalar();
    if (!names.insert(entry.principal.name).second) {
      return TokensError(absl::StrCat(where, ": name \"", entry.principal.name, "\" repeats"));
    }
    if (!user["token"] || !user["token"].IsScalar()) {
      return TokensError(absl::StrCat(where, " (", entry.principal.name, "): token is required"));
    }
    entry.token = user["token"].Scalar();
    if (entry.token.size() < kMinTokenLength || !IsTokenText(entry.token)) {
      return TokensError(absl::StrCat(where, " (", entry.principal.name,
                                      "): token must be at least ", kMinTokenLength,
                                      " visible ASCII characters without spaces"));
    }
    for (const Entry& other : table.entries_) {
      if (other.token == entry.token) {
        return TokensError(absl::StrCat(where, " (", entry.principal.name,
                                        "): token is also the token of ", other.principal.name));
      }
    }
    if (!user["role"] || !user["role"].IsScalar()) {
      return TokensError(absl::StrCat(where, " (", entry.principal.name, "): role is required"));
    }
    absl::StatusOr<Role> role = ParseRole(user["role"].Scalar());
    if (!role.ok()) return role.status();
    entry.principal.role = *role;
    if (user["quota"]) {
      absl::StatusOr<QuotaOverride> quota =
          ParseQuota(user["quota"], absl::StrCat(where, " (", entry.principal.name, "): quota"));
      if (!quota.ok()) return quota.status();
      table.quota_overrides_[entry.principal.name] = *quota;
    }
    table.entries_.push_back(std::move(entry));
  }
  if (table.entries_.empty()) return TokensError("no users");
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path, 1 << 20);
  if (!text.ok()) return TokensError(absl::StrCat(path, ": ", text.status().message()));
  return Parse(*text);
}

std::optional<Principal> TokenTable::Find(absl::string_view token) const {
  std::optional<Principal> found;
  for (const Entry& entry : entries_) {
    if (ConstantTimeEquals(token, entry.token)) found = entry.principal;
  }
  return found;
}

}  // namespace mesa::coordinator
