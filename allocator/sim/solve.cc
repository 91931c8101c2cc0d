#include "solve.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "flowtune/alloc/parallel.h"

namespace flowtune::sim {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what);
}

// Ids may be integers or strings; the key is their JSON text.
std::string id_key(const json& v, const std::string& where) {
  if (!v.is_number_integer() && !v.is_string()) fail(where, "id must be an integer or a string");
  return v.dump();
}

double number(const json& obj, const char* key, const std::string& where, bool required,
              double fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) fail(where, std::string("missing \"") + key + "\"");
    return fallback;
  }
  if (!it->is_number()) fail(where + "." + key, "must be a number");
  return it->get<double>();
}

struct Problem {
  std::vector<double> capacity_bps;
  std::vector<json> link_ids;
  std::vector<alloc::FlowSpec> flows;
  std::vector<json> flow_ids;
};

Problem parse(const json& in) {
  if (!in.is_object()) fail("problem", "must be a JSON object");
  auto links = in.find("links");
  auto flows = in.find("flows");
  if (links == in.end() || !links->is_array()) fail("links", "missing or not an array");
  if (flows == in.end() || !flows->is_array()) fail("flows", "missing or not an array");
  Problem p;
  std::map<std::string, alloc::LinkId> link_index;
  for (std::size_t i = 0; i < links->size(); ++i) {
    const json& l = (*links)[i];
    std::string where = "links[" + std::to_string(i) + "]";
    if (!l.is_object()) fail(where, "must be an object");
    if (!l.contains("id")) fail(where, "missing \"id\"");
    std::string key = id_key(l["id"], where + ".id");
    double cap = number(l, "capacity_bps", where, true, 0);
    if (!(cap >= alloc::kMinRateBps && cap <= alloc::kMaxRateBps)) {
      fail(where + ".capacity_bps", "must be a positive number between 1e3 and 1e15 (got " +
                                        l["capacity_bps"].dump() + ")");
    }
    if (!link_index.emplace(key, static_cast<alloc::LinkId>(i)).second) {
      fail(where + ".id", "duplicate link id " + key);
    }
    p.capacity_bps.push_back(cap);
    p.link_ids.push_back(l["id"]);
  }
  std::map<std::string, bool> seen_flows;
  for (std::size_t i = 0; i < flows->size(); ++i) {
    const json& f = (*flows)[i];
    std::string where = "flows[" + std::to_string(i) + "]";
    if (!f.is_object()) fail(where, "must be an object");
    if (!f.contains("id")) fail(where, "missing \"id\"");
    std::string key = id_key(f["id"], where + ".id");
    if (!seen_flows.emplace(key, true).second) fail(where + ".id", "duplicate flow id " + key);
    auto path = f.find("path");
    if (path == f.end() || !path->is_array()) fail(where + ".path", "missing or not an array");
    if (path->empty()) fail(where + ".path", "is empty");
    if (path->size() > alloc::kMaxPathLinks) {
      fail(where + ".path", "has " + std::to_string(path->size()) + " links; at most " +
                                std::to_string(alloc::kMaxPathLinks) + " are supported");
    }
    alloc::FlowSpec spec;
    for (std::size_t j = 0; j < path->size(); ++j) {
      std::string pw = where + ".path[" + std::to_string(j) + "]";
      auto it = link_index.find(id_key((*path)[j], pw));
      if (it == link_index.end()) fail(pw, "unknown link " + (*path)[j].dump());
      for (alloc::LinkId prev : spec.path) {
        if (prev == it->second) fail(pw, "link " + (*path)[j].dump() + " appears twice");
      }
      spec.path.push(it->second);
    }
    spec.weight = number(f, "weight", where, false, 1.0);
    if (!(spec.weight >= alloc::kMinWeight && spec.weight <= alloc::kMaxWeight)) {
      fail(where + ".weight", "must be between 1e-6 and 1e6 (got " + f["weight"].dump() + ")");
    }
    spec.max_bps = number(f, "max_bps", where, false, 0.0);
    if (spec.max_bps != 0 &&
        !(spec.max_bps >= alloc::kMinRateBps && spec.max_bps <= alloc::kMaxRateBps)) {
      fail(where + ".max_bps", "must be 0 (no cap) or between 1e3 and 1e15 (got " +
                                   f["max_bps"].dump() + ")");
    }
    p.flows.push_back(spec);
    p.flow_ids.push_back(f["id"]);
  }
  return p;
}

}  // namespace

json parse_problem(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    // Not only parse_error: a number too large for a double ("1e400") is
    // out_of_range, and is as much the file's fault.
    throw InputError("malformed JSON in '" + source + "': " + e.what());
  }
}

json solve(const json& problem, const SolveOptions& opt) {
  Problem p = parse(problem);
  alloc::EngineConfig cfg = opt.engine;
  std::unique_ptr<alloc::ParallelDriver> driver;
  if (opt.threads > 0) {
    driver = std::make_unique<alloc::ParallelDriver>(opt.threads);
    cfg.blocks = std::max(cfg.blocks, alloc::ParallelDriver::blocks_for_threads(opt.threads));
  }
  // Explicit problems have no racks: one site, so extra blocks stay empty and
  // the parallel driver only spreads the link updates. Kept for parity.
  alloc::Engine engine(p.capacity_bps, 1, cfg);
  std::vector<alloc::FlowId> ids;
  ids.reserve(p.flows.size());
  for (std::size_t i = 0; i < p.flows.size(); ++i) {
    alloc::FlowError err = engine.check_flow(p.flows[i]);
    if (err != alloc::FlowError::kOk) {
      fail("flows[" + std::to_string(i) + "]", alloc::to_string(err));
    }
    ids.push_back(engine.add_flow(p.flows[i]));
  }

  auto step = [&] {
    if (driver) {
      driver->iterate(engine);
    } else {
      engine.iterate();
    }
  };
  std::uint64_t n = 0;
  if (!p.flows.empty()) {
    std::uint64_t limit = opt.iterations.value_or(opt.max_iterations);
    while (n < limit) {
      step();
      ++n;
      if (!opt.iterations && engine.stats().converged) break;
    }
  }

  json out;
  out["rates"] = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    out["rates"].push_back({{"id", p.flow_ids[i]}, {"bps", engine.rate_bps(ids[i])}});
  }
  std::vector<double> alloc_bps = engine.link_allocation_bps();
  double max_util = 0;
  json links = json::array();
  for (std::size_t l = 0; l < alloc_bps.size(); ++l) {
    double u = alloc_bps[l] / p.capacity_bps[l];
    max_util = std::max(max_util, u);
    links.push_back({{"id", p.link_ids[l]},
                     {"allocated_bps", alloc_bps[l]},
                     {"utilization", u},
                     {"price", engine.price(static_cast<alloc::LinkId>(l))}});
  }
  out["iterations"] = n;
  out["converged"] = p.flows.empty() || engine.stats().converged;
  out["max_link_utilization"] = max_util;
  out["max_residual"] = engine.stats().max_residual;
  out["algorithm"] = alloc::to_string(cfg.algorithm);
  out["norm"] = alloc::to_string(cfg.normalizer);
  out["links"] = std::move(links);
  return out;
}

}  // namespace flowtune::sim
