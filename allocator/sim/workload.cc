#include "workload.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flowtune::sim {

double Rng::exponential(double mean) {
  // 1 - u lies in (0, 1], so the log is finite.
  return -std::log(1.0 - uniform()) * mean;
}

namespace {

[[noreturn]] void fail(const std::string& path, std::size_t line, const std::string& what) {
  throw WorkloadError(path + ":" + std::to_string(line) + ": " + what);
}

bool parse_numbers(const std::string& text, std::vector<double>* out) {
  std::istringstream in(text);
  out->clear();
  std::string tok;
  while (in >> tok) {
    char* end = nullptr;
    double v = std::strtod(tok.c_str(), &end);
    if (end == tok.c_str() || *end != '\0' || !std::isfinite(v)) return false;
    out->push_back(v);
  }
  return true;
}

}  // namespace

FlowSizeCdf FlowSizeCdf::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw WorkloadError("cannot open flow-size CDF '" + path + "'");
  std::vector<double> sizes, cdf, row;
  double stated_mean = 0;
  std::string text;
  std::size_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos || text[0] == '#') continue;
    if (!parse_numbers(text, &row)) fail(path, line, "not a number in '" + text + "'");
    if (row.size() == 1 && sizes.empty() && stated_mean == 0) {
      if (!(row[0] > 0)) fail(path, line, "the mean size must be positive");
      stated_mean = row[0];
      continue;
    }
    if (row.size() != 2) fail(path, line, "expected 'size cdf', got '" + text + "'");
    sizes.push_back(row[0]);
    cdf.push_back(row[1]);
  }
  if (sizes.empty()) throw WorkloadError(path + ": no 'size cdf' rows");
  if (cdf.back() == 100) {
    for (double& c : cdf) c /= 100;
  }
  try {
    FlowSizeCdf d(std::move(sizes), std::move(cdf),
                  stated_mean > 0 ? Sampling::kStep : Sampling::kLinear);
    d.stated_mean_ = stated_mean;
    return d;
  } catch (const WorkloadError& e) {
    throw WorkloadError(path + ": " + e.what());
  }
}

FlowSizeCdf::FlowSizeCdf(std::vector<double> sizes, std::vector<double> cdf, Sampling sampling)
    : sizes_(std::move(sizes)), cdf_(std::move(cdf)), sampling_(sampling) {
  if (sizes_.empty() || sizes_.size() != cdf_.size()) {
    throw WorkloadError("a CDF needs as many probabilities as sizes, at least one");
  }
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    std::string row = "row " + std::to_string(i + 1) + ": ";
    if (!(sizes_[i] >= 0)) throw WorkloadError(row + "size must not be negative");
    if (!(cdf_[i] >= 0 && cdf_[i] <= 1)) throw WorkloadError(row + "cdf must lie in [0, 1]");
    if (i > 0 && !(sizes_[i] > sizes_[i - 1])) throw WorkloadError(row + "sizes must ascend");
    if (i > 0 && cdf_[i] < cdf_[i - 1]) throw WorkloadError(row + "cdf must not decrease");
  }
  if (std::abs(cdf_.back() - 1) > 1e-9) throw WorkloadError("the cdf must end at 1 (or 100)");
  cdf_.back() = 1;
  // The first point carries the probability mass cdf[0] under both rules.
  mean_ = std::max(sizes_[0], 1.0) * cdf_[0];
  for (std::size_t i = 1; i < sizes_.size(); ++i) {
    double p = cdf_[i] - cdf_[i - 1];
    mean_ += p * (sampling_ == Sampling::kStep ? sizes_[i] : (sizes_[i - 1] + sizes_[i]) / 2);
  }
}

double FlowSizeCdf::quantile(double u) const {
  // Sizes are whole bytes, at least one (a flowlet carries data).
  if (sampling_ == Sampling::kStep) {
    auto it = std::lower_bound(cdf_.begin(), cdf_.end(), u);
    return std::max(1.0, sizes_[static_cast<std::size_t>(it - cdf_.begin())]);
  }
  auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
  std::size_t i = static_cast<std::size_t>(it - cdf_.begin());
  if (i == 0) return std::max(1.0, sizes_[0]);
  if (i == cdf_.size()) return sizes_.back();
  double f = (u - cdf_[i - 1]) / (cdf_[i] - cdf_[i - 1]);
  return std::max(1.0, std::round(sizes_[i - 1] + f * (sizes_[i] - sizes_[i - 1])));
}

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> names = {"web", "cache", "hadoop", "websearch",
                                                 "datamining"};
  return names;
}

namespace {

std::string builtin_file(const std::string& name) {
  if (name == "web") return "fb_web.txt";
  if (name == "cache") return "fb_cache.txt";
  if (name == "hadoop") return "fb_hadoop.txt";
  if (name == "websearch") return "websearch.txt";
  if (name == "datamining") return "datamining.txt";
  return "";
}

bool readable(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace

FlowSizeCdf load_workload(const std::string& name_or_path) {
  std::string file = builtin_file(name_or_path);
  if (file.empty()) {
    if (!readable(name_or_path)) {
      std::string names;
      for (const auto& n : workload_names()) names += (names.empty() ? "" : ", ") + n;
      throw WorkloadError("unknown workload '" + name_or_path + "': not one of " + names +
                          " and not a readable file");
    }
    return FlowSizeCdf::load(name_or_path);
  }
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("FLOWTUNE_WORKLOADS"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
  dirs.emplace_back(FT_SIM_INSTALLED_WORKLOADS);
  dirs.emplace_back(FT_SIM_SOURCE_WORKLOADS);
  std::string tried;
  for (const auto& d : dirs) {
    std::string path = d + "/" + file;
    if (readable(path)) return FlowSizeCdf::load(path);
    tried += (tried.empty() ? "" : ", ") + path;
  }
  throw WorkloadError("workload '" + name_or_path + "' not found (tried " + tried +
                      "; set FLOWTUNE_WORKLOADS to the folder holding " + file + ")");
}

PoissonArrivals::PoissonArrivals(double load, std::uint32_t hosts, double host_link_bps,
                                 double mean_bytes)
    : rate_(load * hosts * host_link_bps / (8 * mean_bytes)) {
  if (!(load > 0) || hosts == 0 || !(host_link_bps > 0) || !(mean_bytes > 0)) {
    throw WorkloadError("Poisson arrivals need a positive load, hosts, link rate and mean size");
  }
}

}  // namespace flowtune::sim
