#include "proto/spec_yaml.h"

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file_util.h"
#include "base/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace mesa {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using Json = nlohmann::json;

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

std::string Where(const std::string& path) { return path.empty() ? "(top level)" : path; }

// Levenshtein distance, to suggest the field a typo meant.
int EditDistance(const std::string& a, const std::string& b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownFieldMessage(const std::string& path, const std::string& key,
                                const Descriptor& descriptor) {
  std::string best;
  int best_distance = 3;  // Only suggest close matches.
  for (int i = 0; i < descriptor.field_count(); ++i) {
    const std::string& name = descriptor.field(i)->name();
    int distance = EditDistance(absl::AsciiStrToLower(key), name);
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  std::string message = absl::StrCat(Join(path, key), ": unknown field");
  if (!best.empty()) absl::StrAppend(&message, "; did you mean ", best, "?");
  return message;
}

// Abseil 20220623 from Debian has its own string_view, so messages are std::string here.
absl::Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(path), ": ", what));
}

absl::StatusOr<Json> ConvertValue(const YAML::Node& node, const FieldDescriptor& field,
                                  const std::string& path);

absl::StatusOr<Json> ConvertMessage(const YAML::Node& node, const Descriptor& descriptor,
                                    const std::string& path) {
  if (node.IsNull()) return Json::object();
  if (!node.IsMap())
    return Invalid(path, absl::StrCat("expected a mapping for ", descriptor.name()));
  Json object = Json::object();
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) return Invalid(path, "keys must be plain strings");
    const std::string key = entry.first.Scalar();
    const FieldDescriptor* field = descriptor.FindFieldByName(key);
    for (int i = 0; field == nullptr && i < descriptor.field_count(); ++i) {
      if (descriptor.field(i)->json_name() == key) field = descriptor.field(i);
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(UnknownFieldMessage(path, key, descriptor));
    }
    if (object.contains(field->name())) return Invalid(Join(path, key), "given twice");
    absl::StatusOr<Json> value = ConvertValue(entry.second, *field, Join(path, field->name()));
    if (!value.ok()) return value.status();
    object[field->name()] = *std::move(value);
  }
  return object;
}

absl::StatusOr<Json> ConvertScalar(const YAML::Node& node, const FieldDescriptor& field,
                                   const std::string& path) {
  if (!node.IsScalar()) return Invalid(path, "expected a single value");
  const std::string& text = node.Scalar();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      int64_t value;
      if (!absl::SimpleAtoi(text, &value)) {
        return Invalid(path, absl::StrCat("expected an integer, got \"", text, "\""));
      }
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_INT32 &&
          (value < INT32_MIN || value > INT32_MAX)) {
        return Invalid(path, absl::StrCat("out of range for a 32-bit integer: ", text));
      }
      return Json(value);
    }
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      uint64_t value;
      if (!absl::SimpleAtoi(text, &value)) {
        return Invalid(path, absl::StrCat("expected a non-negative integer, got \"", text, "\""));
      }
      if (field.cpp_type() == FieldDescriptor::CPPTYPE_UINT32 && value > UINT32_MAX) {
        return Invalid(path, absl::StrCat("out of range for a 32-bit integer: ", text));
      }
      return Json(value);
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double value;
      if (!absl::SimpleAtod(text, &value)) {
        return Invalid(path, absl::StrCat("expected a number, got \"", text, "\""));
      }
      return Json(value);
    }
    case FieldDescriptor::CPPTYPE_BOOL: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower == "true" || lower == "yes" || lower == "on") return Json(true);
      if (lower == "false" || lower == "no" || lower == "off") return Json(false);
      return Invalid(path, absl::StrCat("expected true or false, got \"", text, "\""));
    }
    case FieldDescriptor::CPPTYPE_STRING:
      if (field.type() == FieldDescriptor::TYPE_BYTES) {
        return Invalid(path, "bytes fields cannot be set from a job file");
      }
      return Json(text);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const EnumDescriptor& type = *field.enum_type();
      // Accept the full name, or the name without the enum's prefix, in any case.
      const std::string upper = absl::AsciiStrToUpper(text);
      std::vector<std::string> choices;
      for (int i = 0; i < type.value_count(); ++i) {
        const std::string& full = type.value(i)->name();
        if (absl::EndsWith(full, "_UNSPECIFIED")) continue;
        choices.push_back(full);
        if (upper == full || absl::EndsWith(full, absl::StrCat("_", upper))) return Json(full);
      }
      return Invalid(path, absl::StrCat("unknown value \"", text, "\"; expected one of ",
                                        absl::StrJoin(choices, ", ")));
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return Invalid(path, "unsupported field type");
}

absl::StatusOr<Json> ConvertSingle(const YAML::Node& node, const FieldDescriptor& field,
                                   const std::string& path) {
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return ConvertMessage(node, *field.message_type(), path);
  }
  return ConvertScalar(node, field, path);
}

absl::StatusOr<Json> ConvertValue(const YAML::Node& node, const FieldDescriptor& field,
                                  const std::string& path) {
  if (field.is_map()) {
    if (node.IsNull()) return Json::object();
    if (!node.IsMap()) return Invalid(path, "expected a mapping");
    const FieldDescriptor& value_field = *field.message_type()->map_value();
    Json object = Json::object();
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) return Invalid(path, "keys must be plain strings");
      const std::string key = entry.first.Scalar();
      absl::StatusOr<Json> value = ConvertSingle(entry.second, value_field, Join(path, key));
      if (!value.ok()) return value.status();
      object[key] = *std::move(value);
    }
    return object;
  }
  if (field.is_repeated()) {
    if (node.IsNull()) return Json::array();
    if (!node.IsSequence()) return Invalid(path, "expected a list");
    Json array = Json::array();
    for (size_t i = 0; i < node.size(); ++i) {
      absl::StatusOr<Json> value = ConvertSingle(node[i], field, absl::StrCat(path, "[", i, "]"));
      if (!value.ok()) return value.status();
      array.push_back(*std::move(value));
    }
    return array;
  }
  return ConvertSingle(node, field, path);
}

// Applies one "KEY=VALUE" override to the document's root mapping (see spec_yaml.h).
absl::Status ApplyOverride(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("override \"", assignment, "\": ", why,
                                                   " (write KEY=VALUE, e.g. training.steps=100)"));
  };
  if (eq == std::string::npos) return bad("no '='");
  const std::vector<std::string> keys = absl::StrSplit(assignment.substr(0, eq), '.');
  for (const std::string& key : keys) {
    if (key.empty()) return bad("an empty key in the path");
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return bad(absl::StrCat("the value is not valid YAML: ", e.what()));
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Node assignment copies values in yaml-cpp; reset() rebinds, so `node` walks down the tree.
  YAML::Node node;
  node.reset(root);
  std::string path;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    path = Join(path, keys[i]);
    if (!node.IsMap()) return bad(absl::StrCat(Where(path), "'s parent is not a mapping"));
    if (!node[keys[i]].IsDefined() || node[keys[i]].IsNull()) {
      node[keys[i]] = YAML::Node(YAML::NodeType::Map);
    }
    node.reset(node[keys[i]]);
  }
  if (!node.IsMap()) {
    return bad(absl::StrCat(Where(path), " is not a mapping, so it has no key ", keys.back()));
  }
  node[keys.back()] = value;
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseYamlIntoMessage(std::string_view yaml, google::protobuf::Message& message,
                                  absl::Span<const std::string> overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid YAML: ", e.what()));
  }
  try {
    for (const std::string& assignment : overrides) {
      if (absl::Status s = ApplyOverride(root, assignment); !s.ok()) return s;
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("overrides: ", e.what()));
  }
  absl::StatusOr<Json> json = ConvertMessage(root, *message.GetDescriptor(), "");
  if (!json.ok()) return json.status();
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  message.Clear();
  // yaml-cpp can decode valid UTF-8 input into invalid UTF-8 (control bytes in plain scalars);
  // nlohmann::json refuses to print such a string by throwing, which must not escape as an abort.
  std::string json_text;
  try {
    json_text = json->dump();
  } catch (const Json::exception&) {
    return absl::InvalidArgumentError(
        "job file: a value is not valid UTF-8 text after YAML decoding");
  }
  auto status = google::protobuf::util::JsonStringToMessage(json_text, &message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job file: ", status.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<mesa::v1::JobSpec> ParseJobSpecYaml(std::string_view yaml,
                                                   absl::Span<const std::string> overrides) {
  if (yaml.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job file is at most ", kMaxJobFileBytes, " bytes, got ", yaml.size()));
  }
  // Protobuf strings are UTF-8: refuse other bytes here, with the offset, rather than deep in the
  // conversion.
  const absl::string_view text(yaml.data(), yaml.size());
  if (const size_t bad = base::FirstInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job file is not valid UTF-8 (byte ", bad, ")"));
  }
  for (const std::string& assignment : overrides) {
    if (const size_t bad = base::FirstInvalidUtf8(assignment); bad != assignment.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("an override is not valid UTF-8 (byte ", bad, ")"));
    }
  }
  mesa::v1::JobSpec spec;
  absl::Status status = ParseYamlIntoMessage(yaml, spec, overrides);
  if (!status.ok()) return status;
  return spec;
}

namespace {

std::string Absolute(const std::string& base_dir, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  // A pipeline's job:<id> reference to another job's checkpoint (spec/job_refs.h) is no path.
  if (absl::StartsWith(path, "job:")) return path;
  std::string base = base_dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string relative = path;
  while (absl::StartsWith(relative, "./")) relative = relative.substr(2);
  return absl::StrCat(base, "/", relative);
}

std::string AbsoluteList(const std::string& base_dir, const std::string& paths) {
  std::vector<std::string> parts = absl::StrSplit(paths, ',');
  for (std::string& part : parts)
    part = Absolute(base_dir, std::string(absl::StripAsciiWhitespace(part)));
  return absl::StrJoin(parts, ",");
}

}  // namespace

void MakeSpecPathsAbsolute(const std::string& base_dir, mesa::v1::JobSpec& spec) {
  if (spec.has_data()) {
    mesa::v1::DataConfig& data = *spec.mutable_data();
    data.set_train_path(AbsoluteList(base_dir, data.train_path()));
    data.set_val_path(AbsoluteList(base_dir, data.val_path()));
  }
  if (spec.has_checkpoint()) {
    mesa::v1::CheckpointConfig& checkpoint = *spec.mutable_checkpoint();
    checkpoint.set_dir(Absolute(base_dir, checkpoint.dir()));
    checkpoint.set_init_from(Absolute(base_dir, checkpoint.init_from()));
  }
  if (spec.has_eval()) {
    spec.mutable_eval()->set_checkpoint(Absolute(base_dir, spec.eval().checkpoint()));
    for (mesa::v1::EvalDataset& d : *spec.mutable_eval()->mutable_datasets()) {
      d.set_val_path(AbsoluteList(base_dir, d.val_path()));
    }
    for (mesa::v1::EvalTask& t : *spec.mutable_eval()->mutable_tasks()) {
      t.set_path(Absolute(base_dir, t.path()));
      if (t.has_niah()) {
        t.mutable_niah()->set_haystack_path(Absolute(base_dir, t.niah().haystack_path()));
      }
    }
  }
  if (spec.has_array()) {
    for (std::string& checkpoint : *spec.mutable_array()->mutable_checkpoints()) {
      checkpoint = Absolute(base_dir, checkpoint);
    }
    if (spec.array().has_checkpoint_steps()) {
      mesa::v1::ArrayCheckpointSteps& steps = *spec.mutable_array()->mutable_checkpoint_steps();
      steps.set_root(Absolute(base_dir, steps.root()));
    }
  }
  if (spec.has_generate()) {
    mesa::v1::GenerateConfig& generate = *spec.mutable_generate();
    generate.set_checkpoint(Absolute(base_dir, generate.checkpoint()));
    generate.set_encoder_json(Absolute(base_dir, generate.encoder_json()));
    generate.set_vocab_bpe(Absolute(base_dir, generate.vocab_bpe()));
  }
}

absl::StatusOr<mesa::v1::JobSpec> LoadJobSpecFile(const std::string& path,
                                                  absl::Span<const std::string> overrides) {
  absl::StatusOr<std::string> text =
      base::ReadFile(path, kMaxJobFileBytes, base::FileKinds::kRegularOrStream);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("job file: ", text.status().message()));
  }
  absl::StatusOr<mesa::v1::JobSpec> spec = ParseJobSpecYaml(*text, overrides);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(), absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace mesa
