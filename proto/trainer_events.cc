#include "proto/trainer_events.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace mesa {

std::string FormatEventLine(const mesa::v1::TrainerEvent& event) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string line;
  // Serialising a valid message cannot fail; strings the trainer puts in (file names, messages)
  // that are not UTF-8 are the one case, and the event is still worth a line.
  if (!google::protobuf::util::MessageToJsonString(event, &line, print).ok()) {
    mesa::v1::TrainerEvent fallback;
    fallback.set_time(event.time());
    fallback.set_rank(event.rank());
    fallback.mutable_warning()->set_message(
        absl::StrCat("an event of type ", event.event_case(), " could not be encoded as JSON"));
    line.clear();
    (void)google::protobuf::util::MessageToJsonString(fallback, &line, print);
  }
  line += '\n';
  return line;
}

absl::StatusOr<mesa::v1::TrainerEvent> ParseEventLine(const std::string& line) {
  mesa::v1::TrainerEvent event;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  const auto status = google::protobuf::util::JsonStringToMessage(line, &event, parse);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a trainer event (", std::string(status.message()), "): ", line.substr(0, 200)));
  }
  return event;
}

}  // namespace mesa
