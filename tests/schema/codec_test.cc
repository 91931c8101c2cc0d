// The wire codec: round trips, and every kind of bad input yields its own
// error (never an exception or a crash), checked on hand-built byte strings.
#include "flowtune/wire/codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>

#include <capnp/message.h>
#include <capnp/serialize-packed.h>
#include <kj/io.h>

#include "flowtune.capnp.h"

namespace flowtune::wire {
namespace {

FlowletStart start(std::uint64_t key) {
  FlowletStart f;
  f.flow_key = key;
  f.endpoints = FiveTuple{0x0a000001, 0x0a000002, 40000, 5201, 6};
  f.bytes = 1 << 20;
  f.weight = 2.0f;
  f.coflow_id = 7;
  return f;
}

EndpointMessage every_event() {
  EndpointMessage m;
  m.seq = 42;
  m.events.push_back(Hello{"host-a:1234:99", "10.0.0.1"});
  m.events.push_back(start(1));
  FlowletStart by_host = start(2);
  by_host.endpoints = HostPair{3, 9};
  m.events.push_back(by_host);
  m.events.push_back(FlowletEnd{1});
  m.events.push_back(Heartbeat{});
  m.events.push_back(Resync{{start(5), by_host}});
  m.events.push_back(RateRequest{{5, 2, 0xffffffffffffULL}});
  m.events.push_back(Progress{{{5, 3 << 20, 1 << 20}, {2, kMaxFlowletBytes, 0}}});
  m.digest = StateDigest{3, 0x1234567890abcdefULL};
  return m;
}

template <typename M>
DecodeStatus decode_bytes(const std::vector<std::uint8_t>& b, M* out) {
  return decode(std::span<const std::uint8_t>(b.data(), b.size()), out);
}

TEST(Codec, EndpointMessageRoundTripsEveryEvent) {
  EndpointMessage in = every_event();
  EndpointMessage out;
  DecodeStatus st = decode_bytes(encode(in), &out);
  ASSERT_TRUE(st.ok()) << to_string(st.error) << ": " << st.detail;
  EXPECT_EQ(st.version, kProtocolVersion);
  EXPECT_EQ(out, in);
}

TEST(Codec, AllocatorMessageRoundTrips) {
  AllocatorMessage in;
  in.epoch = 0xfeedface12345678ULL;
  in.rates = {{1, 125'000'000, 50'000}, {2, 1, 1}};
  in.lease_refresh_us = 200'000;
  in.errors = {{ErrorCode::kUnknownFlow, "flow 9 is not live", 9},
               {ErrorCode::kRateLimited, "slow down", 0}};
  in.hello_ack = true;
  in.rate_digest = StateDigest{2, 77};
  in.ack_seq = 12345;
  in.host_rate = 31'250'000;
  in.host_flows = 60;
  in.progress_ok = true;
  AllocatorMessage out;
  DecodeStatus st = decode_bytes(encode(in), &out);
  ASSERT_TRUE(st.ok()) << st.detail;
  EXPECT_EQ(out, in);
}

TEST(Codec, ReportsBytesPerEvent) {
  // Wire cost of the common messages (the paper's figures: 16 B start, 4 B
  // end, 6 B per rate update, before TCP/IP headers). Ours carry Cap'n
  // Proto's framing; printed for the record, bounded so growth is noticed.
  EndpointMessage one_start;
  one_start.events.push_back(start(1));
  EndpointMessage one_end;
  one_end.events.push_back(FlowletEnd{1});
  AllocatorMessage one_rate;
  one_rate.rates.push_back({1, 125'000'000, 50'000});
  EndpointMessage hundred_starts;
  for (int i = 0; i < 100; ++i) hundred_starts.events.push_back(start(i));
  // As endpoints send them: every message carries the state digest.
  for (EndpointMessage* m : {&one_start, &one_end, &hundred_starts}) {
    m->digest = StateDigest{37, 0x9e3779b97f4a7c15ULL};
  }
  const auto s1 = encode(one_start).size(), e1 = encode(one_end).size();
  const auto r1 = encode(one_rate).size(), s100 = encode(hundred_starts).size();
  std::cout << "wire bytes (packed): start " << s1 << ", end " << e1 << ", rate update " << r1
            << ", 100 starts batched " << s100 << " (" << static_cast<double>(s100) / 100
            << " per start)\n";
  EXPECT_LE(s1, 64u);
  EXPECT_LE(e1, 40u);
  EXPECT_LE(r1, 40u);
  EXPECT_LT(s100, 100 * s1);  // batching amortizes the framing
}

TEST(Codec, WrongVersionIsReportedWithTheSendersVersion) {
  // Build a message the way a future peer would: same layout, version 7.
  capnp::MallocMessageBuilder b;
  auto root = b.initRoot<schema::EndpointMessage>();
  root.setVersion(7);
  root.initEvents(1)[0].setHeartbeat();
  kj::VectorOutputStream os;
  capnp::writePackedMessage(os, b);
  std::vector<std::uint8_t> bytes(os.getArray().begin(), os.getArray().end());
  EndpointMessage out;
  DecodeStatus st = decode_bytes(bytes, &out);
  EXPECT_EQ(st.error, DecodeError::kUnsupportedVersion) << st.detail;
  EXPECT_EQ(st.version, 7);
  EXPECT_EQ(error_code_for(st.error), ErrorCode::kUnsupportedVersion);
}

TEST(Codec, TruncatedMessagesAreRejected) {
  std::vector<std::uint8_t> b = encode(every_event());
  EndpointMessage out;
  EXPECT_EQ(decode_bytes(std::vector<std::uint8_t>{}, &out).error, DecodeError::kTruncated);
  for (std::size_t n = 1; n < b.size(); ++n) {
    std::vector<std::uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    DecodeStatus st = decode_bytes(cut, &out);
    EXPECT_FALSE(st.ok()) << "a " << n << "-byte prefix of " << b.size() << " decoded";
  }
}

TEST(Codec, TrailingBytesAreRejected) {
  std::vector<std::uint8_t> b = encode(every_event());
  b.push_back(0);
  EndpointMessage out;
  EXPECT_EQ(decode_bytes(b, &out).error, DecodeError::kMalformed);
}

TEST(Codec, OversizedFramesAreRejectedBeforeParsing) {
  std::vector<std::uint8_t> b(kMaxMessageBytes + 8, 0);
  EndpointMessage out;
  EXPECT_EQ(decode_bytes(b, &out).error, DecodeError::kTooLarge);
}

// Packed bytes unpacking to far more than they hold are refused before
// anything is allocated: 4 KB of zero runs would unpack to 4 MiB.
TEST(Codec, DecompressionBombsAreRefusedUnpacked) {
  // A segment table word (one segment of 2^19 words), then zero runs: tag
  // 0 with 255 more zero words each.
  std::vector<std::uint8_t> bomb = {0x40, 0x08};  // byte 6 = 0x08: 2^19 words
  while (bomb.size() < 4096) {
    bomb.push_back(0x00);
    bomb.push_back(0xff);
  }
  EndpointMessage out;
  const DecodeStatus st = decode_bytes(bomb, &out);
  EXPECT_EQ(st.error, DecodeError::kTooLarge);
  // 64x 4096 bytes is 262144 (1 + 2047 runs of 1 + 255 zero words would be
  // 4192264): the scan stops past the bound.
  EXPECT_NE(st.detail.find("4096 bytes unpack to more than 262144"), std::string::npos)
      << st.detail;
  // A header claiming more words than the bytes hold is refused too.
  const std::vector<std::uint8_t> liar = {0x40, 0x08, 0x00, 0x00};
  EXPECT_FALSE(decode_bytes(liar, &out).ok());
}

// All-zero items are refused: keys start at 1 and a rate has a lease. A
// list of them packs to almost nothing (and Cap'n Proto reads one from a
// list of empty elements, no bytes at all), so it would pass the unpack
// bound as received and fail it once re-encoded (found by codec_fuzz).
TEST(Codec, ItemsThatAreAllZerosAreRefused) {
  AllocatorMessage rates;
  rates.rates.push_back({1, 0, 1000});
  rates.rates.push_back({0, 5, 1000});
  AllocatorMessage out;
  DecodeStatus st = decode_bytes(encode(rates), &out);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("rates[1]"), std::string::npos) << st.detail;
  rates.rates[1] = {2, 5, 0};
  EXPECT_EQ(decode_bytes(encode(rates), &out).error, DecodeError::kBadValue);
  EndpointMessage m;
  m.events.push_back(start(0));
  EndpointMessage back;
  st = decode_bytes(encode(m), &back);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("flowKey"), std::string::npos) << st.detail;
  m.events = {RateRequest{{3, 0}}};
  EXPECT_EQ(decode_bytes(encode(m), &back).error, DecodeError::kBadValue);
  m.events = {Progress{{{3, 10, 5}, {0, 0, 0}}}};
  st = decode_bytes(encode(m), &back);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("progress"), std::string::npos) << st.detail;
  // More sent than the flowlet holds, or a size past 2^60: refused too.
  for (const FlowProgress& bad : {FlowProgress{3, 10, 11}, FlowProgress{3, kMaxFlowletBytes + 1, 0}}) {
    m.events = {Progress{{bad}}};
    EXPECT_EQ(decode_bytes(encode(m), &back).error, DecodeError::kBadValue);
  }
  // The input codec_fuzz found: 44 bytes holding 8,160 empty rates.
  const std::vector<std::uint8_t> found = {
      0x10, 0x0f, 0x50, 0x02, 0x02, 0x11, 0x01, 0x01, 0x01, 0x09, 0x29, 0x11, 0x05, 0xff, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0xc3, 0x01, 0x0f, 0x40, 0x59, 0x73, 0x51, 0x04, 0x02,
      0x01, 0x01, 0x07, 0x03, 0x50, 0xc3, 0x51, 0x04, 0x02, 0x01, 0x01, 0x03, 0x01, 0x03};
  EXPECT_EQ(decode_bytes(found, &out).error, DecodeError::kBadValue);
}

// What Cap'n Proto unpacks a packed stream to, its segment table (a count
// and a size a segment, 4 bytes each, padded to a word) included.
std::size_t capnp_unpacked_bytes(const std::vector<std::uint8_t>& bytes) {
  kj::ArrayInputStream in(kj::arrayPtr(bytes.data(), bytes.size()));
  capnp::ReaderOptions o;
  o.traversalLimitInWords = 1u << 24;
  capnp::PackedMessageReader reader(in, o);
  std::size_t words = 0;
  capnp::uint segments = 0;
  for (; reader.getSegment(segments) != nullptr; ++segments) words += reader.getSegment(segments).size();
  return (words + segments / 2 + 1) * sizeof(capnp::word);
}

// The largest messages the protocol sends, as sparse as they get: a full
// resync of default starts, a full rate message.
EndpointMessage sparsest_resync() {
  EndpointMessage m;
  Resync r;
  for (std::uint64_t k = 0; k < kMaxResyncFlows; ++k) {
    FlowletStart f;
    f.flow_key = k + 1;
    f.endpoints = HostPair{0, 1};
    f.bytes = 1;
    r.flows.push_back(f);
  }
  m.events.push_back(r);
  return m;
}
AllocatorMessage full_rates() {
  AllocatorMessage m;
  for (std::uint64_t k = 0; k < kMaxItemsPerMessage; ++k) m.rates.push_back({k + 1, 1, 1});
  return m;
}

// The bound leaves room: the largest messages the protocol sends pack 2-4x,
// far inside 64x.
TEST(Codec, LegitimateMessagesPackWellInsideTheUnpackBound) {
  const EndpointMessage resync = sparsest_resync();
  const AllocatorMessage rates = full_rates();
  const std::vector<std::uint8_t> a = encode(resync), b = encode(rates);
  EndpointMessage ra;
  AllocatorMessage rb;
  ASSERT_TRUE(decode_bytes(a, &ra).ok());
  ASSERT_TRUE(decode_bytes(b, &rb).ok());
  EXPECT_EQ(ra, resync);
  EXPECT_EQ(rb, rates);
  for (const std::vector<std::uint8_t>* m : {&a, &b}) {
    EXPECT_LT(static_cast<double>(capnp_unpacked_bytes(*m)) / static_cast<double>(m->size()), 8.0);
  }
}

// unpacked_bytes() is what Cap'n Proto unpacks a frame to, and the
// allocator's price of decoding it; it stops past decode()'s bound.
// Legitimate messages unpack at most 4x (the allocator charges a frame
// that unpacks more for the excess): a resync of the sparsest starts, a
// full rate message, a message of ends alone, every event kind.
TEST(Codec, UnpackedBytesIsWhatAFrameUnpacksTo) {
  EndpointMessage ends;
  for (std::uint64_t k = 0; k < kMaxItemsPerMessage; ++k) ends.events.push_back(FlowletEnd{k + 1});
  for (const std::vector<std::uint8_t>& b :
       {encode(sparsest_resync()), encode(ends), encode(every_event()), encode(full_rates())}) {
    const std::size_t n = unpacked_bytes(b);
    EXPECT_EQ(n, capnp_unpacked_bytes(b));
    EXPECT_LE(n, 4 * b.size()) << static_cast<double>(n) / static_cast<double>(b.size()) << "x";
  }
  // A bomb: 4 KB of zero runs that would unpack to 4 MiB; the scan stops
  // one run past the bound (64 x 4 KB).
  std::vector<std::uint8_t> bomb = {0x40, 0x08};
  while (bomb.size() < 4096) bomb.insert(bomb.end(), {0x00, 0xff});
  EXPECT_GT(unpacked_bytes(bomb), 64u * 4096);
  EXPECT_LE(unpacked_bytes(bomb), 64u * 4096 + 2 * 256 * sizeof(capnp::word));
  // Decoding from the scan answers what decoding alone does.
  for (const std::vector<std::uint8_t>& b : {encode(every_event()), bomb}) {
    EndpointMessage x, y;
    const DecodeStatus a = decode(b, &x), c = decode(b, unpacked_bytes(b), &y);
    EXPECT_EQ(a.error, c.error);
    EXPECT_EQ(a.detail, c.detail);
    EXPECT_EQ(x, y);
  }
}

TEST(Codec, MisalignedBuffersDecode) {
  std::vector<std::uint8_t> b = encode(every_event());
  std::vector<std::uint8_t> shifted(b.size() + 1);
  std::memcpy(shifted.data() + 1, b.data(), b.size());
  EndpointMessage out;
  DecodeStatus st = decode(std::span<const std::uint8_t>(shifted.data() + 1, b.size()), &out);
  ASSERT_TRUE(st.ok()) << st.detail;
  EXPECT_EQ(out, every_event());
}

TEST(Codec, AbsurdFieldsAreBadValuesNamingTheField) {
  struct Case {
    const char* name;
    FlowletStart f;
    const char* field;
  };
  FlowletStart nan_weight = start(1);
  nan_weight.weight = std::numeric_limits<float>::quiet_NaN();
  FlowletStart zero_weight = start(1);
  zero_weight.weight = 0;
  FlowletStart neg_weight = start(1);
  neg_weight.weight = -1;
  FlowletStart huge_bytes = start(1);
  huge_bytes.bytes = ~std::uint64_t{0};  // "negative" bytes from a signed bug
  for (const Case& c : {Case{"nan weight", nan_weight, "events[0].start.weight"},
                        Case{"zero weight", zero_weight, "events[0].start.weight"},
                        Case{"negative weight", neg_weight, "events[0].start.weight"},
                        Case{"2^64-1 bytes", huge_bytes, "events[0].start.bytes"}}) {
    EndpointMessage m;
    m.events.push_back(c.f);
    EndpointMessage out;
    DecodeStatus st = decode_bytes(encode(m), &out);
    EXPECT_EQ(st.error, DecodeError::kBadValue) << c.name;
    EXPECT_NE(st.detail.find(c.field), std::string::npos) << c.name << ": " << st.detail;
  }
  EndpointMessage long_id;
  long_id.events.push_back(Hello{std::string(kMaxTextBytes + 1, 'x'), "h"});
  EndpointMessage out;
  DecodeStatus st = decode_bytes(encode(long_id), &out);
  EXPECT_EQ(st.error, DecodeError::kBadValue);
  EXPECT_NE(st.detail.find("endpointId"), std::string::npos) << st.detail;
}

TEST(Codec, CorruptedBytesNeverCrashAndNeverDecodeToGarbage) {
  // Valid encodings with 1-3 random bytes overwritten: most stay decodable
  // with different values, some become malformed; none may crash.
  std::mt19937_64 rng(1);
  AllocatorMessage reply;
  reply.epoch = 7;
  reply.rates = {{1, 2, 3}};
  reply.lease_refresh_us = 9;
  reply.errors = {{ErrorCode::kBadValue, "x", 1}};
  reply.rate_digest = StateDigest{1, 5};
  const std::vector<std::uint8_t> valid[] = {encode(every_event()), encode(reply)};
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> b = valid[i % 2];
    for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
      b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
    }
    EndpointMessage e;
    AllocatorMessage a;
    DecodeStatus se = decode_bytes(b, &e);
    DecodeStatus sa = decode_bytes(b, &a);
    // Whatever decodes must survive a re-encode unchanged.
    if (se.ok()) {
      ++ok;
      EndpointMessage again;
      DecodeStatus st2 = decode_bytes(encode(e), &again);
      ASSERT_TRUE(st2.ok()) << to_string(st2.error) << ": " << st2.detail << " events " << e.events.size() << " encoded " << encode(e).size() << " input " << b.size();
      EXPECT_EQ(again, e);
    }
    if (sa.ok()) {
      AllocatorMessage again;
      ASSERT_TRUE(decode_bytes(encode(a), &again).ok());
      EXPECT_EQ(again, a);
    }
  }
  std::cout << ok << " of 20000 corrupted byte strings decoded as endpoint messages\n";
  EXPECT_GT(ok, 0);  // the round-trip check above ran
}

}  // namespace
}  // namespace flowtune::wire
