#include "agent_proto.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>

namespace flowtune::client::agent {

namespace {
Op op_of(Event::Kind k) {
  switch (k) {
    case Event::kRegister:
      return Op::kRegister;
    case Event::kUnregister:
      return Op::kUnregister;
    case Event::kBegin:
      return Op::kBegin;
    case Event::kSent:
      return Op::kSent;
    case Event::kWrote:
      return Op::kWrote;
    case Event::kEnd:
      return Op::kEnd;
    case Event::kUnsent:
      return Op::kUnsent;
  }
  return Op::kTick;
}

Event::Kind kind_of(Op o) {
  switch (o) {
    case Op::kRegister:
      return Event::kRegister;
    case Op::kUnregister:
      return Event::kUnregister;
    case Op::kBegin:
      return Event::kBegin;
    case Op::kSent:
      return Event::kSent;
    case Op::kWrote:
      return Event::kWrote;
    case Op::kUnsent:
      return Event::kUnsent;
    default:
      return Event::kEnd;
  }
}
}  // namespace

void append(std::vector<std::uint8_t>& out, Record r, std::string_view payload) {
  if (payload.size() > kMaxPayload) payload = payload.substr(0, kMaxPayload);
  r.payload = static_cast<std::uint16_t>(payload.size());
  const std::size_t at = out.size();
  out.resize(at + sizeof r + payload.size());
  std::memcpy(out.data() + at, &r, sizeof r);
  if (!payload.empty()) std::memcpy(out.data() + at + sizeof r, payload.data(), payload.size());
}

Record record_of(const Event& e, const TenantNames* tenants, std::string* tenant) {
  Record r;
  r.op = op_of(e.kind);
  r.fd = e.ref.fd;
  r.gen = e.ref.gen;
  r.value = e.bytes;
  r.mss = e.mss;
  r.src_ip = e.tuple.src_ip;
  r.dst_ip = e.tuple.dst_ip;
  r.src_port = e.tuple.src_port;
  r.dst_port = e.tuple.dst_port;
  r.protocol = e.tuple.protocol;
  if (e.writing) r.flags |= kWriting;
  tenant->clear();
  if (e.policy) {
    r.flags |= kHasPolicy;
    r.weight = e.policy->weight;
    r.priority_class = e.policy->priority_class;
    r.deadline_ms = e.policy->deadline_ms;
    r.coflow_id = e.policy->coflow_id;
    if (e.policy->tenant != 0 && tenants != nullptr) *tenant = tenants->name(e.policy->tenant);
  }
  return r;
}

Event event_of(const Record& r, std::string_view tenant, TenantNames* tenants) {
  Event e;
  e.kind = kind_of(r.op);
  e.ref = SocketRef{r.fd, r.gen};
  e.bytes = r.value;
  e.mss = r.mss;
  e.tuple.src_ip = r.src_ip;
  e.tuple.dst_ip = r.dst_ip;
  e.tuple.src_port = r.src_port;
  e.tuple.dst_port = r.dst_port;
  e.tuple.protocol = r.protocol;
  e.writing = (r.flags & kWriting) != 0;
  if ((r.flags & kHasPolicy) != 0) {
    FlowletPolicy p;
    // The process checked its own values (api.cc); a bad one from a
    // broken peer is clamped, never trusted to be in range.
    p.weight = r.weight >= wire::kMinWeight && r.weight <= wire::kMaxWeight ? r.weight : 1.0f;
    p.priority_class = r.priority_class < wire::kNumClasses ? r.priority_class : wire::kClassUnset;
    p.deadline_ms = r.deadline_ms;
    p.coflow_id = r.coflow_id;
    if (!tenant.empty() && tenants != nullptr) {
      const int t = tenants->intern(tenant);
      p.tenant = t > 0 ? static_cast<std::uint8_t>(t) : 0;
    }
    e.policy = p;
  }
  return e;
}

bool parse_address(std::string_view text, void* out, unsigned* len) {
  auto* a = static_cast<sockaddr_un*>(out);
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (text.empty() || text.size() >= sizeof a->sun_path) return false;
  std::memcpy(a->sun_path, text.data(), text.size());
  if (text[0] == '@') a->sun_path[0] = '\0';  // abstract: no file, one per netns
  *len = static_cast<unsigned>(offsetof(sockaddr_un, sun_path) + text.size() +
                               (text[0] == '@' ? 0 : 1));
  return true;
}

}  // namespace flowtune::client::agent
