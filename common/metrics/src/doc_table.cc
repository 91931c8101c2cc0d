#include "flowtune/metrics/doc_table.h"

#include <set>
#include <sstream>
#include <stdexcept>

namespace flowtune::metrics {

namespace {

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t`");
  if (b == std::string::npos) return {};
  const std::size_t e = s.find_last_not_of(" \t`");
  return s.substr(b, e - b + 1);
}

// The cells of a markdown table row "| a | b | ... |".
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::size_t at = line.find('|');
  while (at != std::string::npos) {
    const std::size_t next = line.find('|', at + 1);
    if (next == std::string::npos) break;
    out.push_back(trim(line.substr(at + 1, next - at - 1)));
    at = next;
  }
  return out;
}

}  // namespace

std::vector<DocRow> doc_rows(const std::string& markdown, const std::string& section) {
  const std::string open = "<!-- metrics:" + section + " -->";
  const std::string close = "<!-- /metrics:" + section + " -->";
  std::istringstream in(markdown);
  std::string line;
  int n = 0;
  bool inside = false, closed = false;
  std::vector<DocRow> rows;
  while (std::getline(in, line)) {
    ++n;
    if (line.find(open) != std::string::npos) { inside = true; continue; }
    if (line.find(close) != std::string::npos) { closed = inside; break; }
    if (!inside || line.rfind("|", 0) != 0) continue;
    const std::vector<std::string> c = cells(line);
    if (c.size() < 5) {
      throw std::runtime_error("line " + std::to_string(n) + ": a metric row has 5 cells: name, type, unit, labels, meaning");
    }
    if (c[0] == "metric" || c[0].find_first_not_of("-: ") == std::string::npos) continue;  // header
    rows.push_back({c[0], c[1], c[2], c[3] == "-" ? std::string() : c[3], n});
  }
  if (!closed) throw std::runtime_error("no table between " + open + " and " + close);
  return rows;
}

std::vector<std::string> compare(const std::vector<DocRow>& doc, std::span<const Spec> table) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const DocRow& r : doc) {
    const std::string at = "doc line " + std::to_string(r.line) + ": " + r.name;
    if (!seen.insert(r.name).second) out.push_back(at + " is listed twice");
    const Spec* s = find(table, r.name);
    if (s == nullptr) {
      out.push_back(at + " is not in the code's table");
      continue;
    }
    if (r.type != to_string(s->type)) out.push_back(at + " has type " + r.type + ", the code " + to_string(s->type));
    if (r.unit != s->unit) out.push_back(at + " has unit " + r.unit + ", the code " + s->unit);
    if (r.labels != s->labels) out.push_back(at + " has labels '" + r.labels + "', the code '" + s->labels + "'");
  }
  for (const Spec& s : table) {
    if (seen.count(s.name) == 0) out.push_back(std::string(s.name) + " is in the code but not in the doc");
  }
  return out;
}

}  // namespace flowtune::metrics
