// CSV reader: numeric samples with a class label or regression targets.
#include "data/dataset.hpp"

#include "backends/error.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace strata::data {

namespace {

// The whole file as text.
std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) STRATA_THROW(data, "cannot open '", path, "': ", std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  std::size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) STRATA_THROW(data, "cannot read '", path, "': ", std::strerror(err));
  return text;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// One field of a line, trimmed and NUL-terminated in place.
struct Field {
  char* begin;
  char* end;
  std::string str() const { return std::string(begin, end); }
};

// Splits [begin, end) at commas; trims each field and writes a NUL after it
// (over the comma or line end, which are no longer needed).
void split_fields(char* begin, char* end, std::vector<Field>& fields) {
  fields.clear();
  char* p = begin;
  for (;;) {
    char* q = p;
    while (q != end && *q != ',') ++q;
    const bool last = q == end;
    char* b = p;
    char* e = q;
    while (b != e && is_blank(*b)) ++b;
    while (e != b && is_blank(e[-1])) --e;
    *e = '\0';
    fields.push_back({b, e});
    if (last) break;
    p = q + 1;
  }
}

// Full-consumption parses; false when the field is not a (finite) number.
bool parse_float(const Field& f, float& v) {
  if (f.begin == f.end) return false;
  char* e = nullptr;
  v = std::strtof(f.begin, &e);
  return e == f.end && std::isfinite(v);
}

bool parse_double(const Field& f, double& v) {
  if (f.begin == f.end) return false;
  char* e = nullptr;
  v = std::strtod(f.begin, &e);
  return e == f.end && std::isfinite(v);
}

}  // namespace

Dataset read_csv(const std::string& path, CsvTask task, std::size_t classes,
                 std::size_t target_width) {
  STRATA_REQUIRE(task == CsvTask::classification || target_width > 0, config,
                 "read_csv: target_width must be positive for regression");
  return parse_csv(read_text(path), path, task, classes, target_width);
}

Dataset parse_csv(std::string text, const std::string& path, CsvTask task, std::size_t classes,
                  std::size_t target_width) {
  const bool classify = task == CsvTask::classification;
  STRATA_REQUIRE(classify || target_width > 0, config,
                 "read_csv: target_width must be positive for regression");

  std::size_t pos = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;  // UTF-8 byte-order mark

  Dataset out;
  out.name = path;
  std::size_t columns = 0;  // fields per line, fixed by the first non-comment line
  std::size_t columns_line = 0;
  const std::size_t targets = classify ? 1 : target_width;
  std::int64_t max_label = -1;
  std::vector<Field> fields;

  std::size_t line_no = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    char* begin = &text[pos];
    char* end = &text[0] + eol;
    pos = eol + 1;
    ++line_no;

    while (begin != end && is_blank(*begin)) ++begin;
    while (end != begin && is_blank(end[-1])) --end;
    if (begin == end || *begin == '#') continue;
    split_fields(begin, end, fields);

    float v = 0;
    if (columns == 0) {
      columns = fields.size();
      columns_line = line_no;
      if (columns <= targets) {
        if (classify)
          STRATA_THROW(data, "'", path, "' line ", line_no, ": found ", columns,
                       " field; need at least 2 (features, then the label)");
        STRATA_THROW(data, "'", path, "' line ", line_no, ": target_width ", targets,
                     " leaves no feature columns: found ", columns, " fields, need at least ",
                     targets + 1);
      }
      out.features = columns - targets;
      if (!parse_float(fields[0], v)) continue;  // header line
    }
    if (fields.size() != columns)
      STRATA_THROW(data, "'", path, "' line ", line_no, ": expected ", columns,
                   " fields (as on line ", columns_line, "), found ", fields.size());

    for (std::size_t j = 0; j < out.features; ++j) {
      if (!parse_float(fields[j], v))
        STRATA_THROW(data, "'", path, "' line ", line_no, ", field ", j + 1,
                     ": not a finite number: '", fields[j].str(), "'");
      out.x.push_back(v);
    }
    if (classify) {
      const Field& f = fields[columns - 1];
      double label = 0;
      if (!parse_double(f, label) || label != std::floor(label))
        STRATA_THROW(data, "'", path, "' line ", line_no, ": label '", f.str(),
                     "' is not an integer");
      if (label < 0)
        STRATA_THROW(data, "'", path, "' line ", line_no, ": label '", f.str(),
                     "' is negative");
      const double limit = classes > 0 ? static_cast<double>(classes)
                                       : double{std::numeric_limits<std::int32_t>::max()};
      if (label >= limit)
        STRATA_THROW(data, "'", path, "' line ", line_no, ": label ", f.str(),
                     " is out of range [0, ", static_cast<std::int64_t>(limit), ")");
      const auto l = static_cast<std::int32_t>(label);
      out.labels.push_back(l);
      if (l > max_label) max_label = l;
    } else {
      for (std::size_t j = out.features; j < columns; ++j) {
        if (!parse_float(fields[j], v))
          STRATA_THROW(data, "'", path, "' line ", line_no, ", field ", j + 1,
                       ": not a finite number: '", fields[j].str(), "'");
        out.targets.push_back(v);
      }
    }
  }

  if (out.x.empty())
    STRATA_THROW(data, "'", path, "' has no samples",
                 line_no == 0 ? " (the file is empty)" : " (only blank, comment or header lines)");
  if (classify) {
    out.classes = classes > 0 ? classes : static_cast<std::size_t>(max_label) + 1;
  } else {
    out.target_width = target_width;
  }
  return out;
}

}  // namespace strata::data
