// The host agent's local protocol: what a process served by the agent
// (agent_link.h) and the agent (agent/) say to each other over one
// SOCK_SEQPACKET unix socket. Both ends are built from this tree and run
// on one host, so a record is a fixed binary header in host byte order
// plus a short payload; a packet holds whole records. The first record a
// process sends is kHello; the agent answers kWelcome (value 1: served,
// 0: refused, the payload says why).
//
//   process -> agent: kHello, kRegister, kUnregister, kBegin, kSent,
//                     kWrote, kEnd, kUnsent (the answer to a kLook)
//   agent -> process: kWelcome, kRate, kLook, kEnded, kTick (liveness)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "event_queue.h"
#include "policy.h"

namespace flowtune::client::agent {

inline constexpr std::uint32_t kProtocolVersion = 1;
// The agent's address when FLOWTUNE_AGENT names none: an abstract unix
// name, so one per network namespace, as the host itself is.
inline constexpr std::string_view kDefaultAddress = "@flowtune-agent";
// The largest packet either side sends (records are gathered up to it).
inline constexpr std::size_t kMaxPacket = 32 * 1024;

enum class Op : std::uint8_t {
  kHello = 1,
  kRegister,
  kUnregister,
  kBegin,
  kSent,
  kWrote,
  kEnd,
  kUnsent,
  kWelcome = 16,
  kRate,
  kLook,
  kEnded,
  kTick,
};

// One record's fixed part (64 bytes). Fields a kind does not use are 0.
struct Record {
  Op op = Op::kTick;
  std::uint8_t flags = 0;  // kHasPolicy, kWriting
  std::uint8_t priority_class = 0;
  std::uint8_t reserved = 0;
  std::uint16_t payload = 0;  // bytes that follow the record
  std::uint16_t reserved2 = 0;
  std::int32_t fd = -1;
  std::uint32_t gen = 0;
  std::uint64_t value = 0;  // bytes (begin, sent, wrote, unsent), rate, version, verdict
  std::uint64_t coflow_id = 0;
  float weight = 1;
  std::uint32_t deadline_ms = 0;
  std::uint32_t mss = 0;
  std::uint32_t src_ip = 0, dst_ip = 0;
  std::uint16_t src_port = 0, dst_port = 0;
  std::uint8_t protocol = 0;
  std::uint8_t pad[3] = {};
};
static_assert(sizeof(Record) == 64);
inline constexpr std::uint8_t kHasPolicy = 1;
inline constexpr std::uint8_t kWriting = 2;
// A payload is a tenant name, a hello's settings or a refusal's reason.
inline constexpr std::size_t kMaxPayload = 1024;

// What a process asks of its session; the agent serves it only if its own
// session would do the same (else the process runs its own).
struct HelloBody {
  std::uint64_t min_flowlet_bytes = 0;
  std::uint64_t max_rate_bytes_per_sec = 0;
  std::uint64_t min_rate_bytes_per_sec = 0;
  std::uint32_t explicit_allocator = 0;  // 1: the allocator string follows
  // The host the process names (ft_config.host, FLOWTUNE_HOST): the last
  // host_bytes of the payload; 0: it names none.
  std::uint32_t host_bytes = 0;
};

// Appends a record and its payload to a packet being built.
void append(std::vector<std::uint8_t>& out, Record r, std::string_view payload = {});
// Calls f(record, payload) for each record of a packet; false if the
// packet is malformed (a truncated record or payload, an unknown op).
template <class F>
bool for_each_record(const std::uint8_t* p, std::size_t n, F f) {
  while (n > 0) {
    Record r;
    if (n < sizeof r) return false;
    std::memcpy(&r, p, sizeof r);
    const std::size_t len = r.payload;
    if (len > kMaxPayload || n - sizeof r < len) return false;
    const auto o = static_cast<std::uint8_t>(r.op);
    if (o < 1 || (o > static_cast<std::uint8_t>(Op::kUnsent) && o < 16) ||
        o > static_cast<std::uint8_t>(Op::kTick)) {
      return false;
    }
    f(r, std::string_view(reinterpret_cast<const char*>(p) + sizeof r, len));
    p += sizeof r + len;
    n -= sizeof r + len;
  }
  return true;
}

// An application event as a record (tenant: the name of its policy's
// tenant, which travels as the payload), and back. event_of interns the
// tenant into `tenants`; a name that does not fit leaves the flowlet in
// no tenant.
Record record_of(const Event& e, const TenantNames* tenants, std::string* tenant);
Event event_of(const Record& r, std::string_view tenant, TenantNames* tenants);

// "@name" (abstract) or a path, as a sockaddr_un; false if too long.
bool parse_address(std::string_view text, void* sockaddr_un_out, unsigned* len_out);

}  // namespace flowtune::client::agent
