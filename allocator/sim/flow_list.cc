#include "flow_list.h"

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "workload.h"

namespace flowtune::sim {

namespace {

[[noreturn]] void fail(const std::string& path, std::size_t line, const std::string& what) {
  throw WorkloadError(path + ":" + std::to_string(line) + ": " + what);
}

// Splits a CSV row of plain fields (no quoting: every field is a number).
std::vector<std::string> fields(const std::string& row) {
  std::vector<std::string> out;
  std::stringstream ss(row);
  for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
  if (!row.empty() && row.back() == ',') out.emplace_back();
  return out;
}

bool to_u64(const std::string& s, std::uint64_t* v) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  char* end = nullptr;
  errno = 0;
  *v = std::strtoull(s.c_str(), &end, 10);
  return errno == 0 && *end == '\0';
}

bool to_double(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && *end == '\0' && std::isfinite(*v);
}

ListedFlow parse_row(const std::string& path, std::size_t line, const std::string& text,
                     std::uint64_t expect_index) {
  const std::vector<std::string> f = fields(text);
  if (f.size() != 7) fail(path, line, "expected 7 fields, got " + std::to_string(f.size()));
  std::uint64_t index = 0, src = 0, dst = 0;
  ListedFlow out;
  const bool ok = to_u64(f[0], &index) && to_u64(f[1], &src) && to_u64(f[2], &dst) &&
                  to_u64(f[3], &out.bytes) && to_double(f[4], &out.start_s) &&
                  to_u64(f[5], &out.ecmp_hash) && to_double(f[6], &out.end_s);
  if (!ok) fail(path, line, "not a number in '" + text + "'");
  if (index != expect_index) fail(path, line, "flow " + std::to_string(expect_index) + " expected");
  if (src > 0xffffffffu || dst > 0xffffffffu || src == dst)
    fail(path, line, "src and dst must be two distinct hosts");
  if (out.bytes == 0 || out.start_s < 0) fail(path, line, "a flow needs bytes and a start >= 0");
  out.src = static_cast<std::uint32_t>(src);
  out.dst = static_cast<std::uint32_t>(dst);
  return out;
}

}  // namespace

std::vector<ListedFlow> load_flow_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw WorkloadError("cannot open flow list '" + path + "'");
  std::vector<ListedFlow> flows;
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (line == 1) {
      if (text != kFlowListHeader)
        fail(path, line, std::string("the header must be '") + kFlowListHeader + "'");
      continue;
    }
    if (text.empty()) continue;
    ListedFlow f = parse_row(path, line, text, flows.size());
    if (!flows.empty() && f.start_s < flows.back().start_s)
      fail(path, line, "starts must not decrease");
    flows.push_back(f);
  }
  if (line == 0) throw WorkloadError(path + ": empty flow list");
  return flows;
}

std::string format_flow_list(const std::vector<ListedFlow>& flows) {
  std::string out = std::string(kFlowListHeader) + "\n";
  char row[192];
  for (std::size_t i = 0; i < flows.size(); ++i) {
    const ListedFlow& f = flows[i];
    std::snprintf(row, sizeof row,
                  "%zu,%" PRIu32 ",%" PRIu32 ",%" PRIu64 ",%.17g,%" PRIu64 ",%.17g\n", i, f.src,
                  f.dst, f.bytes, f.start_s, f.ecmp_hash, f.end_s);
    out += row;
  }
  return out;
}

}  // namespace flowtune::sim
