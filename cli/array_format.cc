#include "cli/array_format.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "cli/format.h"

namespace mesa::cli {
namespace {

// A CSV field, quoted when it holds a comma, a quote or a line break (quotes doubled).
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

}  // namespace

std::string FormatArrayTable(const mesa::v1::ArrayResult& array) {
  std::vector<std::vector<std::string>> rows;
  for (const mesa::v1::ArrayRow& r : array.rows()) {
    // Task rows: the task's own CG means (prefill, and decode where it decoded).
    std::string cg = absl::StrFormat("%.2f", r.cg_steps_mean());
    if (r.kind() == "task") {
      cg = r.cg_steps_mean_decode() > 0
               ? absl::StrFormat("%.2f / %.2f", r.cg_steps_mean_prefill(), r.cg_steps_mean_decode())
               : absl::StrFormat("%.2f", r.cg_steps_mean_prefill());
    }
    std::string value = r.stderr() > 0 ? absl::StrFormat("%.4f ± %.4f", r.value(), r.stderr())
                                       : absl::StrFormat("%.4f", r.value());
    if (r.draw_std() > 0) absl::StrAppendFormat(&value, " (sd %.4f over draws)", r.draw_std());
    rows.push_back({r.checkpoint(), r.cg_setting(), r.kind(), r.name(), r.metric(), value,
                    absl::StrCat(r.count()), cg});
  }
  std::string out =
      FormatTable({"CHECKPOINT", "CG", "KIND", "NAME", "METRIC", "VALUE", "N", "CG STEPS"}, rows);
  std::vector<std::string> children;
  for (const mesa::v1::ArrayChild& c : array.children()) {
    children.push_back(absl::StrCat(c.job_id(), " ", StateName(c.state())));
  }
  absl::StrAppend(&out, "Children: ", absl::StrJoin(children, ", "), "\n");
  for (const std::string& gap : array.missing()) absl::StrAppend(&out, "Missing: ", gap, "\n");
  return out;
}

std::string ArrayCsv(const mesa::v1::ArrayResult& array) {
  std::string out =
      "checkpoint,cg_setting,kind,name,metric,value,stderr,count,cg_steps_mean,"
      "cg_steps_mean_prefill,cg_steps_mean_decode,draw_std,job_ids\n";
  for (const mesa::v1::ArrayRow& r : array.rows()) {
    const std::vector<std::string> fields = {CsvField(r.checkpoint()),
                                             CsvField(r.cg_setting()),
                                             CsvField(r.kind()),
                                             CsvField(r.name()),
                                             CsvField(r.metric()),
                                             absl::StrFormat("%.17g", r.value()),
                                             absl::StrFormat("%.17g", r.stderr()),
                                             absl::StrCat(r.count()),
                                             absl::StrFormat("%.17g", r.cg_steps_mean()),
                                             absl::StrFormat("%.17g", r.cg_steps_mean_prefill()),
                                             absl::StrFormat("%.17g", r.cg_steps_mean_decode()),
                                             absl::StrFormat("%.17g", r.draw_std()),
                                             CsvField(absl::StrJoin(r.job_ids(), " "))};
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
  }
  return out;
}

}  // namespace mesa::cli
