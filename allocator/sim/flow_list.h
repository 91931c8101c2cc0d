// A flow list: the flowlets of one run, one CSV row each, so that two
// simulators (flowtune-sim run, flowtune-packet) can run the same flows and
// be compared flow by flow (docs/packet.md, "Agreement with the flow-level
// model"). The header row is kFlowListHeader; columns:
//   flow       the flowlet's index in the run (rows in this order)
//   src, dst   hosts as the engine numbers them (rack-major)
//   bytes      payload bytes
//   start_s    arrival, simulated seconds (rows sorted by it)
//   ecmp_hash  alloc::ecmp_hash of its 5-tuple: picks its spine
//   end_s      its last byte at the receiver; -1: not finished (ignored
//              when the list is read as input)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flowtune::sim {

struct ListedFlow {
  std::uint32_t src = 0;
  std::uint32_t dst = 0;
  std::uint64_t bytes = 0;
  double start_s = 0;
  std::uint64_t ecmp_hash = 0;
  double end_s = -1;
};

inline constexpr const char* kFlowListHeader = "flow,src,dst,bytes,start_s,ecmp_hash,end_s";

// Reads a flow list; throws WorkloadError (workload.h) naming the file and
// line on a bad header, a malformed row, rows out of order or unsorted starts.
std::vector<ListedFlow> load_flow_list(const std::string& path);
// The list as CSV, header first; times printed exactly (17 digits).
std::string format_flow_list(const std::vector<ListedFlow>& flows);

}  // namespace flowtune::sim
