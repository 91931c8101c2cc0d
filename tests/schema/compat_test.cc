// Compatible evolution of the wire format: endpoints and allocators built
// before the policy fields (the frozen flowtune_v1_0.capnp) and after them
// understand each other, both ways, on every message they exchange.
#include <gtest/gtest.h>

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <kj/io.h>

#include "flowtune.capnp.h"
#include "flowtune/wire/codec.h"
#include "flowtune_v1_0.capnp.h"

namespace flowtune::wire {
namespace {

namespace old = schema_v1_0;

std::vector<std::uint8_t> pack(capnp::MallocMessageBuilder& b) {
  kj::VectorOutputStream os;
  capnp::writePackedMessage(os, b);
  return {os.getArray().begin(), os.getArray().end()};
}

template <typename Root>
struct OldReader {
  explicit OldReader(const std::vector<std::uint8_t>& bytes)
      : in(kj::ArrayPtr<const kj::byte>(bytes.data(), bytes.size())), reader(in) {}
  typename Root::Reader root() { return reader.getRoot<Root>(); }
  kj::ArrayInputStream in;
  capnp::PackedMessageReader reader;
};

void fill_old_start(old::FlowletStart::Builder s, std::uint64_t key) {
  s.setFlowKey(key);
  auto t = s.getEndpoints().initTuple();
  t.setSrcIp(0x0a000001);
  t.setDstIp(0x0a000002);
  t.setSrcPort(40000);
  t.setDstPort(5201);
  s.setBytes(1 << 20);
  s.setWeight(2.5f);
  s.setCoflowId(9);
}

FlowletStart with_policy(std::uint64_t key) {
  FlowletStart f;
  f.flow_key = key;
  f.endpoints = FiveTuple{0x0a000001, 0x0a000002, 40000, 5201, 6};
  f.bytes = 1 << 20;
  f.weight = 2.5f;
  f.coflow_id = 9;
  f.priority_class = 0;
  f.tenant = "tenant-a";
  f.deadline_us = 250'000;
  return f;
}

void expect_old_fields(old::FlowletStart::Reader s, std::uint64_t key) {
  EXPECT_EQ(s.getFlowKey(), key);
  ASSERT_EQ(s.getEndpoints().which(), old::FlowletStart::Endpoints::TUPLE);
  EXPECT_EQ(s.getEndpoints().getTuple().getDstPort(), 5201);
  EXPECT_EQ(s.getBytes(), 1u << 20);
  EXPECT_EQ(s.getWeight(), 2.5f);
  EXPECT_EQ(s.getCoflowId(), 9u);
}

TEST(WireCompat, AnOldEndpointsStartsReadAsPolicyNotSet) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<old::EndpointMessage>();
  root.setVersion(kProtocolVersion);
  auto events = root.initEvents(2);
  fill_old_start(events[0].initStart(), 1);
  fill_old_start(events[1].initResync(1)[0], 2);
  EndpointMessage m;
  DecodeStatus st = decode(pack(b), &m);
  ASSERT_TRUE(st.ok()) << to_string(st.error) << ": " << st.detail;
  ASSERT_EQ(m.events.size(), 2u);
  const auto& s = std::get<FlowletStart>(m.events[0]);
  const auto& r = std::get<Resync>(m.events[1]).flows.at(0);
  for (const FlowletStart* f : {&s, &r}) {
    EXPECT_EQ(f->weight, 2.5f);
    EXPECT_EQ(f->coflow_id, 9u);
    EXPECT_EQ(f->priority_class, kClassUnset);
    EXPECT_TRUE(f->tenant.empty());
    EXPECT_EQ(f->deadline_us, 0u);
  }
  EXPECT_EQ(s.flow_key, 1u);
  EXPECT_EQ(r.flow_key, 2u);
}

TEST(WireCompat, AnOldAllocatorReadsANewEndpointsStartsWhole) {
  EndpointMessage m;
  m.events.push_back(Hello{"ep-1", "10.0.0.1"});
  m.events.push_back(with_policy(1));
  m.events.push_back(Resync{{with_policy(2), with_policy(3)}});
  m.digest = StateDigest{2, 77};
  const auto bytes = encode(m);
  OldReader<old::EndpointMessage> r(bytes);
  auto root = r.root();
  EXPECT_EQ(root.getVersion(), kProtocolVersion);
  ASSERT_EQ(root.getEvents().size(), 3u);
  EXPECT_EQ(root.getEvents()[0].getHello().getEndpointId(), "ep-1");
  expect_old_fields(root.getEvents()[1].getStart(), 1);
  auto resync = root.getEvents()[2].getResync();
  ASSERT_EQ(resync.size(), 2u);
  expect_old_fields(resync[0], 2);
  expect_old_fields(resync[1], 3);
  EXPECT_EQ(root.getDigest().getKeySum(), 77u);
}

TEST(WireCompat, NewStartsRoundTripTheirPolicy) {
  EndpointMessage m;
  m.events.push_back(with_policy(1));
  FlowletStart unset = with_policy(2);
  unset.priority_class = kClassUnset;
  unset.tenant.clear();
  unset.deadline_us = 0;
  m.events.push_back(unset);
  EndpointMessage out;
  DecodeStatus st = decode(encode(m), &out);
  ASSERT_TRUE(st.ok()) << st.detail;
  EXPECT_EQ(out, m);
}

TEST(WireCompat, AllocatorMessagesAreUnchangedBothWays) {
  AllocatorMessage in;
  in.epoch = 5;
  in.rates = {{1, 125'000'000, 50'000}};
  in.hello_ack = true;
  const auto bytes = encode(in);
  OldReader<old::AllocatorMessage> r(bytes);
  ASSERT_EQ(r.root().getRates().size(), 1u);
  EXPECT_EQ(r.root().getRates()[0].getBytesPerSec(), 125'000'000u);
  EXPECT_TRUE(r.root().getHelloAck());

  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<old::AllocatorMessage>();
  root.setVersion(kProtocolVersion);
  root.setEpoch(5);
  auto rate = root.initRates(1)[0];
  rate.setFlowKey(1);
  rate.setBytesPerSec(125'000'000);
  rate.setLeaseUs(50'000);
  root.setHelloAck(true);
  AllocatorMessage out;
  DecodeStatus st = decode(pack(b), &out);
  ASSERT_TRUE(st.ok()) << st.detail;
  EXPECT_EQ(out, in);
}

// Progress events are new: an allocator from before them reads the event as
// a union member it does not know (our own old decoder refused the whole
// message), which is why endpoints send them only after a helloAck that set
// progressOk. An old allocator's helloAck reads as progressOk false; an old
// endpoint skips the flag.
TEST(WireCompat, ProgressGoesOnlyToAllocatorsThatSaidTheyReadIt) {
  EndpointMessage m;
  m.events.push_back(Progress{{{4, 1 << 20, 1 << 10}}});
  const auto bytes = encode(m);
  OldReader<old::EndpointMessage> r(bytes);
  ASSERT_EQ(r.root().getEvents().size(), 1u);
  EXPECT_GT(static_cast<int>(r.root().getEvents()[0].which()),
            static_cast<int>(old::EndpointEvent::RATE_REQUEST));  // past what the old schema names

  AllocatorMessage ack;
  ack.hello_ack = true;
  ack.progress_ok = true;
  OldReader<old::AllocatorMessage> o(encode(ack));
  EXPECT_TRUE(o.root().getHelloAck());
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<old::AllocatorMessage>();
  root.setVersion(kProtocolVersion);
  root.setHelloAck(true);
  AllocatorMessage out;
  ASSERT_TRUE(decode(pack(b), &out).ok());
  EXPECT_TRUE(out.hello_ack);
  EXPECT_FALSE(out.progress_ok);
}

TEST(WireCompat, OutOfRangePolicyIsABadValueNamingTheField) {
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<schema::EndpointMessage>();
  root.setVersion(kProtocolVersion);
  auto s = root.initEvents(1)[0].initStart();
  s.setFlowKey(1);
  s.getEndpoints().initHosts();
  s.setPriorityClass(8);
  EndpointMessage out;
  DecodeStatus st = decode(pack(b), &out);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("events[0].start.priorityClass"), std::string::npos) << st.detail;

  s.setPriorityClass(kClassUnset);
  s.setDeadlineUs(kMaxDeadlineUs + 1);
  st = decode(pack(b), &out);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("deadlineUs"), std::string::npos) << st.detail;

  s.setDeadlineUs(kMaxDeadlineUs);
  s.setTenant(std::string(kMaxTextBytes + 1, 't'));
  st = decode(pack(b), &out);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("start.tenant"), std::string::npos) << st.detail;
}

}  // namespace
}  // namespace flowtune::wire
