#include "flowtune/wire/codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include "flowtune.capnp.h"

namespace flowtune::wire {
namespace {

namespace s = ::flowtune::wire::schema;

static_assert(kProtocolVersion == s::PROTOCOL_VERSION, "messages.h and the schema disagree");

capnp::Text::Reader as_text(const std::string& s) { return {s.data(), s.size()}; }

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Packed encoding: Cap'n Proto's zero-run compression, 2-3x fewer bytes for
// these small messages, which matter for control traffic (paper §5.3.2).
std::vector<std::uint8_t> flatten(capnp::MallocMessageBuilder& b) {
  // Packing never grows a word by more than 2 bytes (tag + count), so one
  // fixed buffer suffices: no stream reallocation in the middle of a word.
  const std::size_t words = capnp::computeSerializedSizeInWords(b);
  std::vector<std::uint8_t> out(words * (sizeof(capnp::word) + 2) + 16);
  kj::ArrayOutputStream stream(kj::arrayPtr(out.data(), out.size()));
  capnp::writePackedMessage(stream, b);
  out.resize(stream.getArray().size());
  return out;
}

void fill(s::FlowletStart::Builder out, const FlowletStart& f) {
  out.setFlowKey(f.flow_key);
  std::visit(Overloaded{[&](const FiveTuple& t) {
                          auto o = out.getEndpoints().initTuple();
                          o.setSrcIp(t.src_ip);
                          o.setDstIp(t.dst_ip);
                          o.setSrcPort(t.src_port);
                          o.setDstPort(t.dst_port);
                          o.setProtocol(t.protocol);
                        },
                        [&](const HostPair& h) {
                          auto o = out.getEndpoints().initHosts();
                          o.setSrc(h.src);
                          o.setDst(h.dst);
                        }},
             f.endpoints);
  out.setBytes(f.bytes);
  out.setWeight(f.weight);
  out.setCoflowId(f.coflow_id);
  if (f.priority_class != kClassUnset) out.setPriorityClass(f.priority_class);
  if (!f.tenant.empty()) out.setTenant(f.tenant);
  if (f.deadline_us != 0) out.setDeadlineUs(f.deadline_us);
}

// ---- decoding: every field checked, failures named ----

struct Failure {
  DecodeError error;
  std::string detail;
};

// Where a field sits in the message ("events[3].start.weight"), rendered only
// when a check fails: building it eagerly cost more than decoding itself.
struct Where {
  const Where* parent = nullptr;
  const char* name = "";
  long index = -1;  // >= 0: render as name[index]
  std::string str() const {
    std::string out = parent != nullptr ? parent->str() : std::string();
    if (!out.empty() && name[0] != '\0') out += '.';
    out += name;
    if (index >= 0) out += "[" + std::to_string(index) + "]";
    return out;
  }
};

// Throws Failure{e, where + detail()} when !ok; detail runs only then.
template <typename Detail>
void require(bool ok, DecodeError e, const Where& where, Detail&& detail) {
  if (!ok) throw Failure{e, where.str() + detail()};
}

std::string text(capnp::Text::Reader t, const Where& where) {
  require(t.size() <= kMaxTextBytes, DecodeError::kBadValue, where,
          [] { return " longer than " + std::to_string(kMaxTextBytes) + " bytes"; });
  std::string out(t.begin(), t.end());
  require(out.find('\0') == std::string::npos, DecodeError::kBadValue, where,
          [] { return std::string(" contains a NUL byte"); });
  return out;
}

// Keys start at 1 (0 names no flow in an error report), and a rate always
// comes with a lease: items that are all zeros are refused, so a list of
// them (which packs to almost nothing, and which Cap'n Proto reads from a
// list of empty elements that takes no bytes at all) cannot pass the
// unpacked-size bound and then fail it once re-encoded.
FlowletStart read_start(s::FlowletStart::Reader r, const Where& where) {
  FlowletStart f;
  f.flow_key = r.getFlowKey();
  require(f.flow_key != 0, DecodeError::kBadValue, Where{&where, "flowKey"},
          [] { return std::string(" = 0 (keys start at 1)"); });
  auto ep = r.getEndpoints();
  switch (ep.which()) {
    case s::FlowletStart::Endpoints::TUPLE: {
      auto t = ep.getTuple();
      f.endpoints = FiveTuple{t.getSrcIp(), t.getDstIp(), t.getSrcPort(), t.getDstPort(),
                              t.getProtocol()};
      break;
    }
    case s::FlowletStart::Endpoints::HOSTS: {
      auto h = ep.getHosts();
      f.endpoints = HostPair{h.getSrc(), h.getDst()};
      break;
    }
    default:
      throw Failure{DecodeError::kMalformed, where.str() + ".endpoints: unknown variant"};
  }
  f.bytes = r.getBytes();
  require(f.bytes <= kMaxFlowletBytes, DecodeError::kBadValue, where,
          [&] { return ".bytes = " + std::to_string(f.bytes) + " is absurd"; });
  f.weight = r.getWeight();
  require(f.weight >= kMinWeight && f.weight <= kMaxWeight, DecodeError::kBadValue, where,
          [&] { return ".weight = " + std::to_string(f.weight) + " outside [1e-6, 1e6]"; });
  f.coflow_id = r.getCoflowId();
  f.priority_class = r.getPriorityClass();
  require(f.priority_class < kNumClasses || f.priority_class == kClassUnset,
          DecodeError::kBadValue, where, [&] {
            return ".priorityClass = " + std::to_string(f.priority_class) + " outside 0.." +
                   std::to_string(kNumClasses - 1) + " (255 = not set)";
          });
  if (r.hasTenant()) f.tenant = text(r.getTenant(), Where{&where, "tenant"});
  f.deadline_us = r.getDeadlineUs();
  require(f.deadline_us <= kMaxDeadlineUs, DecodeError::kBadValue, where,
          [&] { return ".deadlineUs = " + std::to_string(f.deadline_us) + " is absurd"; });
  return f;
}

// Counts items against kMaxItemsPerMessage while a message is read.
struct Budget {
  std::size_t items = 0;
  std::size_t hellos = 0;
  void take(std::size_t n, const Where& where) {
    items += n;
    require(items <= kMaxItemsPerMessage, DecodeError::kBadValue, where, [] {
      return ": more than " + std::to_string(kMaxItemsPerMessage) + " items in one message";
    });
  }
};

EndpointEvent read_event(s::EndpointEvent::Reader r, const Where& where, Budget& budget) {
  budget.take(1, where);
  switch (r.which()) {
    case s::EndpointEvent::HELLO: {
      require(++budget.hellos == 1, DecodeError::kBadValue, where,
              [] { return std::string(": a second hello"); });
      auto h = r.getHello();
      const Where hello{&where, "hello"};
      return Hello{text(h.getEndpointId(), Where{&hello, "endpointId"}),
                   text(h.getHostId(), Where{&hello, "hostId"}), h.getHostPacer()};
    }
    case s::EndpointEvent::START:
      return read_start(r.getStart(), Where{&where, "start"});
    case s::EndpointEvent::END:
      return FlowletEnd{r.getEnd()};
    case s::EndpointEvent::HEARTBEAT:
      return Heartbeat{};
    case s::EndpointEvent::RESYNC: {
      auto list = r.getResync();
      budget.take(list.size(), Where{&where, "resync"});
      Resync out;
      out.flows.reserve(list.size());
      for (unsigned i = 0; i < list.size(); ++i) {
        out.flows.push_back(read_start(list[i], Where{&where, "resync", static_cast<long>(i)}));
      }
      return out;
    }
    case s::EndpointEvent::RATE_REQUEST: {
      auto list = r.getRateRequest();
      budget.take(list.size(), Where{&where, "rateRequest"});
      RateRequest out;
      out.flow_keys.reserve(list.size());
      for (std::uint64_t key : list) {
        require(key != 0, DecodeError::kBadValue, Where{&where, "rateRequest"},
                [] { return std::string(": flow key 0 (keys start at 1)"); });
        out.flow_keys.push_back(key);
      }
      return out;
    }
    case s::EndpointEvent::PROGRESS: {
      auto list = r.getProgress();
      const Where at{&where, "progress"};
      budget.take(list.size(), at);
      Progress out;
      out.flows.reserve(list.size());
      for (unsigned i = 0; i < list.size(); ++i) {
        const FlowProgress p{list[i].getFlowKey(), list[i].getBytes(), list[i].getSent()};
        require(p.flow_key != 0, DecodeError::kBadValue, at,
                [] { return std::string(": flow key 0 (keys start at 1)"); });
        require(p.sent <= p.bytes && p.bytes <= kMaxFlowletBytes, DecodeError::kBadValue, at, [&] {
          return ": bytes " + std::to_string(p.bytes) + ", sent " + std::to_string(p.sent) +
                 " (sent <= bytes <= 2^60)";
        });
        out.flows.push_back(p);
      }
      return out;
    }
  }
  throw Failure{DecodeError::kMalformed, where.str() + ": unknown event type"};
}

// Words a packed stream unpacks to, counted without unpacking, or the first
// count past `limit` (the scan stops there): each word is a tag byte and
// the tag's nonzero bytes; tag 0 is followed by a count of further zero
// words, tag 0xff by a count of raw words copied as they are. A stream cut
// inside a word counts the words before it (the reader then reports the
// truncation).
std::size_t unpacked_words(std::span<const std::uint8_t> b, std::size_t limit) {
  // The bytes that follow each tag: a table, so the scan's chain per word
  // is a load and an add (a popcount without the instruction is ~10).
  static constexpr auto kFollow = [] {
    std::array<std::uint8_t, 256> t{};
    for (unsigned v = 0; v < 256; ++v) t[v] = static_cast<std::uint8_t>(std::popcount(v));
    return t;
  }();
  std::size_t words = 0, i = 0;
  while (i < b.size() && words <= limit) {
    const std::uint8_t tag = b[i++];
    i += kFollow[tag];
    if (i > b.size()) break;
    ++words;
    if ((tag == 0x00 || tag == 0xff) && i < b.size()) {
      const std::size_t more = b[i++];
      words += more;
      if (tag == 0xff) i += more * sizeof(capnp::word);
    }
  }
  return words;
}

// What a legitimate message unpacks to at most: zero runs inside these
// messages' structs are short, so they pack 2-4x (measured in
// codec_test); a run of zeros 64x its packed size is a decompression bomb
// (4 KB of zero runs unpack to 4 MiB), refused before any allocation.
constexpr std::size_t kMaxUnpackRatio = 64;
constexpr std::size_t kUnpackAllowanceBytes = 64u << 10;

std::size_t unpack_bound(std::size_t packed_bytes) {
  return std::min(std::max(kUnpackAllowanceBytes, kMaxUnpackRatio * packed_bytes), kMaxMessageBytes);
}

// Runs body(reader) over bytes with Cap'n Proto's limits, turning every
// failure into a DecodeStatus.
// `scanned`: the frame's unpacked_bytes() when the caller has it (SIZE_MAX:
// scan here).
template <typename Body>
DecodeStatus with_reader(std::span<const std::uint8_t> bytes, std::size_t scanned, Body&& body) {
  DecodeStatus st;
  if (bytes.size() > kMaxMessageBytes) {
    st.error = DecodeError::kTooLarge;
    st.detail = std::to_string(bytes.size()) + " bytes";
    return st;
  }
  if (bytes.empty()) {
    st.error = DecodeError::kTruncated;
    st.detail = "empty message";
    return st;
  }
  const std::size_t bound = unpack_bound(bytes.size());
  const std::size_t words = scanned != SIZE_MAX ? scanned / sizeof(capnp::word)
                                                : unpacked_words(bytes, bound / sizeof(capnp::word));
  if (words * sizeof(capnp::word) > bound) {
    st.error = DecodeError::kTooLarge;
    st.detail = std::to_string(bytes.size()) + " bytes unpack to more than " +
                std::to_string(bound) + " (at most " + std::to_string(kMaxUnpackRatio) +
                "x their size, 64 KiB at least, " + std::to_string(kMaxMessageBytes) + " at most)";
    return st;
  }
  capnp::ReaderOptions options;
  // The reader refuses a segment table claiming more words than this before
  // it allocates them: the stream's own unpacked size (with room for
  // reading a list twice), so a header cannot claim what the bytes do not
  // hold. The nesting limit covers the schema's depth with room to spare.
  options.traversalLimitInWords = std::min(2 * words + kUnpackAllowanceBytes / sizeof(capnp::word),
                                           kMaxMessageBytes / sizeof(capnp::word));
  options.nestingLimit = 8;
  try {
    kj::ArrayInputStream in(kj::arrayPtr(bytes.data(), bytes.size()));
    {
      // The reader fetches segments after the first lazily, and its
      // destructor consumes any left: only after it is gone does the stream
      // position mark the end of the message.
      capnp::PackedMessageReader reader(in, options);
      body(reader, st);
    }
    kj::byte extra;
    if (st.ok() && in.tryRead(&extra, 1, 1) != 0) {
      st.error = DecodeError::kMalformed;
      st.detail = "trailing bytes after the message";
    }
  } catch (const Failure& f) {
    st.error = f.error;
    st.detail = f.detail;
  } catch (const kj::Exception& e) {
    st.error = DecodeError::kMalformed;
    st.detail = e.getDescription().cStr();
  } catch (const std::exception& e) {
    st.error = DecodeError::kMalformed;
    st.detail = e.what();
  }
  return st;
}

void check_version(std::uint16_t v, DecodeStatus& st) {
  st.version = v;
  require(v == kProtocolVersion, DecodeError::kUnsupportedVersion, Where{}, [&] {
    return "protocol version " + std::to_string(v) + ", this side speaks " +
           std::to_string(kProtocolVersion);
  });
}

}  // namespace

const char* to_string(DecodeError e) {
  switch (e) {
    case DecodeError::kOk: return "ok";
    case DecodeError::kTooLarge: return "message too large";
    case DecodeError::kTruncated: return "truncated message";
    case DecodeError::kMalformed: return "malformed message";
    case DecodeError::kUnsupportedVersion: return "unsupported protocol version";
    case DecodeError::kBadValue: return "field out of range";
  }
  return "?";
}

const char* to_string(ErrorCode c) {
  switch (c) {
    case ErrorCode::kMalformed: return "malformed";
    case ErrorCode::kUnsupportedVersion: return "unsupported-version";
    case ErrorCode::kNotRegistered: return "not-registered";
    case ErrorCode::kUnknownFlow: return "unknown-flow";
    case ErrorCode::kBadValue: return "bad-value";
    case ErrorCode::kUnknownHost: return "unknown-host";
    case ErrorCode::kTooManyFlows: return "too-many-flows";
    case ErrorCode::kRateLimited: return "rate-limited";
    case ErrorCode::kStateMismatch: return "state-mismatch";
    case ErrorCode::kStandby: return "standby";
  }
  return "?";
}

ErrorCode error_code_for(DecodeError e) {
  switch (e) {
    case DecodeError::kUnsupportedVersion: return ErrorCode::kUnsupportedVersion;
    case DecodeError::kBadValue: return ErrorCode::kBadValue;
    default: return ErrorCode::kMalformed;
  }
}

std::vector<std::uint8_t> encode(const EndpointMessage& m) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<s::EndpointMessage>();
  root.setVersion(kProtocolVersion);
  root.setSeq(m.seq);
  if (m.digest) {
    auto d = root.initDigest();
    d.setFlows(m.digest->flows);
    d.setKeySum(m.digest->key_sum);
  }
  auto events = root.initEvents(static_cast<unsigned>(m.events.size()));
  for (unsigned i = 0; i < m.events.size(); ++i) {
    auto e = events[i];
    std::visit(Overloaded{[&](const Hello& h) {
                            auto o = e.initHello();
                            o.setEndpointId(as_text(h.endpoint_id));
                            o.setHostId(as_text(h.host_id));
                            o.setHostPacer(h.host_pacer);
                          },
                          [&](const FlowletStart& f) { fill(e.initStart(), f); },
                          [&](const FlowletEnd& f) { e.setEnd(f.flow_key); },
                          [&](const Heartbeat&) { e.setHeartbeat(); },
                          [&](const Resync& r) {
                            auto list = e.initResync(static_cast<unsigned>(r.flows.size()));
                            for (unsigned j = 0; j < r.flows.size(); ++j) fill(list[j], r.flows[j]);
                          },
                          [&](const RateRequest& r) {
                            auto list =
                                e.initRateRequest(static_cast<unsigned>(r.flow_keys.size()));
                            for (unsigned j = 0; j < r.flow_keys.size(); ++j) {
                              list.set(j, r.flow_keys[j]);
                            }
                          },
                          [&](const Progress& p) {
                            auto list = e.initProgress(static_cast<unsigned>(p.flows.size()));
                            for (unsigned j = 0; j < p.flows.size(); ++j) {
                              list[j].setFlowKey(p.flows[j].flow_key);
                              list[j].setBytes(p.flows[j].bytes);
                              list[j].setSent(p.flows[j].sent);
                            }
                          }},
               m.events[i]);
  }
  return flatten(b);
}

std::vector<std::uint8_t> encode(const AllocatorMessage& m) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<s::AllocatorMessage>();
  root.setVersion(kProtocolVersion);
  root.setEpoch(m.epoch);
  root.setLeaseRefreshUs(m.lease_refresh_us);
  root.setHelloAck(m.hello_ack);
  root.setAckSeq(m.ack_seq);
  root.setHostRate(m.host_rate);
  root.setHostFlows(m.host_flows);
  root.setProgressOk(m.progress_ok);
  if (m.rate_digest) {
    auto d = root.initRateDigest();
    d.setFlows(m.rate_digest->flows);
    d.setKeySum(m.rate_digest->key_sum);
  }
  auto rates = root.initRates(static_cast<unsigned>(m.rates.size()));
  for (unsigned i = 0; i < m.rates.size(); ++i) {
    rates[i].setFlowKey(m.rates[i].flow_key);
    rates[i].setBytesPerSec(m.rates[i].bytes_per_sec);
    rates[i].setLeaseUs(m.rates[i].lease_us);
  }
  auto errors = root.initErrors(static_cast<unsigned>(m.errors.size()));
  for (unsigned i = 0; i < m.errors.size(); ++i) {
    errors[i].setCode(static_cast<s::ErrorCode>(m.errors[i].code));
    errors[i].setText(as_text(m.errors[i].text));
    errors[i].setFlowKey(m.errors[i].flow_key);
  }
  return flatten(b);
}

std::size_t unpacked_bytes(std::span<const std::uint8_t> packed) {
  if (packed.size() > kMaxMessageBytes) return packed.size();  // refused unscanned
  return unpacked_words(packed, unpack_bound(packed.size()) / sizeof(capnp::word)) * sizeof(capnp::word);
}

DecodeStatus decode(std::span<const std::uint8_t> bytes, EndpointMessage* out) {
  return decode(bytes, SIZE_MAX, out);
}

DecodeStatus decode(std::span<const std::uint8_t> bytes, std::size_t scanned, EndpointMessage* out) {
  EndpointMessage m;
  DecodeStatus status = with_reader(bytes, scanned, [&](capnp::MessageReader& reader, DecodeStatus& st) {
    auto root = reader.getRoot<s::EndpointMessage>();
    check_version(root.getVersion(), st);
    auto events = root.getEvents();
    Budget budget;
    budget.take(events.size(), Where{nullptr, "events"});
    budget.items = 0;  // counted again per event below
    m.seq = root.getSeq();
    if (root.hasDigest()) {
      auto d = root.getDigest();
      m.digest = StateDigest{d.getFlows(), d.getKeySum()};
    }
    m.events.reserve(events.size());
    for (unsigned i = 0; i < events.size(); ++i) {
      m.events.push_back(
          read_event(events[i], Where{nullptr, "events", static_cast<long>(i)}, budget));
    }
  });
  // *out changes only for a message that passed every check.
  if (status.ok()) *out = std::move(m);
  return status;
}

DecodeStatus decode(std::span<const std::uint8_t> bytes, AllocatorMessage* out) {
  AllocatorMessage m;
  DecodeStatus status = with_reader(bytes, SIZE_MAX, [&](capnp::MessageReader& reader, DecodeStatus& st) {
    auto root = reader.getRoot<s::AllocatorMessage>();
    check_version(root.getVersion(), st);
    m.epoch = root.getEpoch();
    m.lease_refresh_us = root.getLeaseRefreshUs();
    m.hello_ack = root.getHelloAck();
    m.ack_seq = root.getAckSeq();
    m.host_rate = root.getHostRate();
    m.host_flows = root.getHostFlows();
    m.progress_ok = root.getProgressOk();
    if (root.hasRateDigest()) {
      auto d = root.getRateDigest();
      m.rate_digest = StateDigest{d.getFlows(), d.getKeySum()};
    }
    auto rates = root.getRates();
    require(rates.size() <= kMaxItemsPerMessage, DecodeError::kBadValue, Where{nullptr, "rates"},
            [] { return std::string(": too many"); });
    for (unsigned i = 0; i < rates.size(); ++i) {
      auto r = rates[i];
      require(r.getFlowKey() != 0 && r.getLeaseUs() != 0, DecodeError::kBadValue,
              Where{nullptr, "rates", static_cast<long>(i)},
              [] { return std::string(": flow key 0 or no lease"); });
      m.rates.push_back({r.getFlowKey(), r.getBytesPerSec(), r.getLeaseUs()});
    }
    auto errors = root.getErrors();
    require(errors.size() <= kMaxErrorsPerMessage, DecodeError::kBadValue,
            Where{nullptr, "errors"}, [] { return std::string(": too many"); });
    for (unsigned i = 0; i < errors.size(); ++i) {
      auto e = errors[i];
      auto code = static_cast<std::uint16_t>(e.getCode());
      const Where where{nullptr, "errors", static_cast<long>(i)};
      require(code <= static_cast<std::uint16_t>(ErrorCode::kStandby), DecodeError::kBadValue,
              where, [&] { return ".code = " + std::to_string(code) + " unknown"; });
      m.errors.push_back({static_cast<ErrorCode>(code), text(e.getText(), Where{&where, "text"}),
                          e.getFlowKey()});
    }
  });
  // *out changes only for a message that passed every check.
  if (status.ok()) *out = std::move(m);
  return status;
}

}  // namespace flowtune::wire
