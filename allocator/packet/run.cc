// One packet-level run: TCP flowlets on the network of network.cc under one
// scheme; under Flowtune, the allocator node's engine and the endpoints'
// pacing in the loop (docs/packet.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "control.h"
#include "network.h"
#include "ns3/core-module.h"
#include "packet.h"

namespace flowtune::packet {

using namespace ns3;

namespace {

constexpr std::uint16_t kDataPort = 5001;
constexpr std::uint16_t kControlPort = 7000;
// Per data packet on a link: IPv4 20 + TCP 20 + timestamps 12 + PPP 2.
constexpr std::uint32_t kHeaderBytes = 54;
constexpr std::uint32_t kSendBufferBytes = 4u << 20;
constexpr std::uint32_t kStreamAheadBytes = 32u << 10;
// Per control packet: IPv4 20 + UDP 8 + PPP 2.
constexpr std::uint32_t kControlHeaderBytes = 30;

// Paces a socket at the rate its endpoint was last told, whatever the ACKs
// say. ns-3.37 has no per-socket pacing setter, so this writes
// TcpSocketState::m_pacingRate, as TcpBbr does from CongControl(), and keeps
// the window large so that pacing, not the window, limits (docs/packet.md).
class FlowtunePacing : public TcpCongestionOps {
 public:
  static constexpr std::uint32_t kWindowSegments = 4096;
  static TypeId GetTypeId() {
    static TypeId tid = TypeId("flowtune::FlowtunePacing")
                            .SetParent<TcpCongestionOps>()
                            .AddConstructor<FlowtunePacing>();
    return tid;
  }
  std::string GetName() const override { return "FlowtunePacing"; }
  void Init(Ptr<TcpSocketState> tcb) override {
    tcb_ = PeekPointer(tcb);
    apply(tcb_);
  }
  std::uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, std::uint32_t) override {
    return kWindowSegments * tcb->m_segmentSize;
  }
  void IncreaseWindow(Ptr<TcpSocketState>, std::uint32_t) override {}
  bool HasCongControl() const override { return true; }
  void CongControl(Ptr<TcpSocketState> tcb, const TcpRateOps::TcpRateConnection&,
                   const TcpRateOps::TcpRateSample&) override {
    apply(PeekPointer(tcb));
  }
  Ptr<TcpCongestionOps> Fork() override { return CopyObject<FlowtunePacing>(this); }
  // The payload rate to pace at, bits/s; takes effect from the next packet.
  void set_rate(double bps) {
    rate_ = DataRate(static_cast<std::uint64_t>(std::max(bps, 1e3)));
    if (tcb_) apply(tcb_);
  }

 private:
  void apply(TcpSocketState* tcb) const {
    tcb->m_maxPacingRate = rate_;
    tcb->m_pacingRate = rate_;
    const std::uint32_t window = kWindowSegments * std::max<std::uint32_t>(tcb->m_segmentSize, 1);
    if (tcb->m_cWnd < window) tcb->m_cWnd = window;
    tcb->m_ssThresh = window;
  }
  TcpSocketState* tcb_ = nullptr;  // the socket's; the socket outlives its ops
  DataRate rate_{1000};
};

void set_defaults(const Config& c) {
  ns3::Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(c.mss));
  ns3::Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(kSendBufferBytes));
  ns3::Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(4u << 20));
  ns3::Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
  ns3::Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
  ns3::Config::SetDefault("ns3::TcpSocketBase::MinRto",
                          TimeValue(MicroSeconds(static_cast<std::int64_t>(c.min_rto_us))));
  ns3::Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(1)));
  ns3::Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
  ns3::Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));
  ns3::Config::SetDefault("ns3::RedQueueDisc::Gentle", BooleanValue(false));
  ns3::Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
  ns3::Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(c.mss + kHeaderBytes));
  const char* tcp = "ns3::TcpCubic";
  if (c.scheme == Scheme::kDctcp) tcp = "ns3::TcpDctcp";
  if (c.scheme == Scheme::kBbr) tcp = "ns3::TcpBbr";
  ns3::Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TypeId::LookupByName(tcp)));
  if (c.scheme == Scheme::kDctcp)
    ns3::Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
  ns3::Config::SetDefault("ns3::TcpSocketState::EnablePacing",
                          BooleanValue(c.scheme == Scheme::kBbr));
}

struct Sender {
  Ptr<Socket> socket;
  Ptr<FlowtunePacing> pacing;
  std::uint64_t written = 0;
  std::uint64_t key = 0;  // the flowlet key the allocator knows it by
  bool connected = false, has_rate = false, ended = false;
};

// What a control packet stands for: its payload carries the index.
struct ControlMessage {
  bool to_allocator = true;
  std::uint32_t host = 0;
  double sent_s = 0;
  std::vector<std::uint32_t> starts, ends;                     // flow indices
  std::vector<std::pair<std::uint32_t, std::uint64_t>> rates;  // flow, bytes/s
};

class Run {
 public:
  explicit Run(const Config& c) : c_(c), model_(c), codec_(num_hosts(c)) {}
  Result go();

 private:
  void start_flow(std::uint32_t i);
  void flush_starts(std::uint32_t host);
  void on_connected(Ptr<Socket> s);
  void on_send(Ptr<Socket> s, std::uint32_t);
  void pump(std::uint32_t i);
  void stop_flow(std::uint32_t i);
  void on_accept(Ptr<Socket> s, const Address&);
  void on_receive(Ptr<Socket> s);
  void finish(std::uint32_t i);
  void send_control(ControlMessage m, std::size_t encoded_bytes);
  void on_control(Ptr<Socket> s);
  void deliver(std::uint32_t id);
  void allocator_receive(const ControlMessage& m);
  void endpoint_receive(const ControlMessage& m);
  void turn();
  void sample_queue();
  void install_apps();
  double ideal_fct_s(const FlowSpec& f) const;
  void collect(Result* r) const;

  Config c_;
  AllocatorModel model_;
  EndpointCodec codec_;
  Network net_;
  std::vector<FlowResult> flows_;
  std::vector<Sender> senders_;
  std::vector<Ptr<Socket>> control_sockets_;                    // per host, then the allocator's
  std::unordered_map<std::uint64_t, std::uint32_t> by_peer_;    // (ip, port) -> flow
  std::unordered_map<const Socket*, std::uint32_t> by_socket_;  // receiving socket -> flow
  std::unordered_map<const Socket*, std::uint32_t> by_sender_;  // sending socket -> flow
  std::vector<ControlMessage> messages_;
  std::vector<std::uint32_t> pending_starts_, pending_ends_;  // at the allocator
  std::vector<std::vector<std::uint32_t>> batched_;           // per host, starts not yet sent
  std::uint32_t finished_ = 0;
  EventId turn_event_;
  Result r_;
};

std::uint64_t peer_key(Ipv4Address a, std::uint16_t port) {
  return std::uint64_t{a.Get()} << 16 | port;
}

void Run::start_flow(std::uint32_t i) {
  Sender& s = senders_[i];
  const FlowSpec& f = flows_[i].spec;
  Ptr<Node> node = net_.hosts.Get(f.src);
  s.socket = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
  auto tcp = DynamicCast<TcpSocketBase>(s.socket);
  if (c_.scheme == Scheme::kFlowtune) {
    s.pacing = CreateObject<FlowtunePacing>();
    tcp->SetAttribute("InitialCwnd", UintegerValue(FlowtunePacing::kWindowSegments));
    tcp->SetCongestionControlAlgorithm(s.pacing);
    tcp->SetPacingStatus(true);
    tcp->SetPaceInitialWindow(true);
  }
  s.socket->Bind();
  Address local;
  s.socket->GetSockName(local);
  const std::uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
  by_peer_[peer_key(net_.host_addr[f.src], port)] = i;
  flows_[i].ecmp_hash =
      flow_hash(net_.host_addr[f.src].Get(), net_.host_addr[f.dst].Get(), port, kDataPort, 6);
  s.socket->SetConnectCallback(MakeCallback(&Run::on_connected, this),
                               MakeNullCallback<void, Ptr<Socket>>());
  s.socket->SetSendCallback(MakeCallback(&Run::on_send, this));
  by_sender_[PeekPointer(s.socket)] = i;
  s.socket->Connect(InetSocketAddress(net_.host_addr[f.dst], kDataPort));
  if (c_.scheme != Scheme::kFlowtune) return;
  s.key = i + 1;
  if (c_.traffic == Traffic::kCoflowTrace) {
    // A coflow's flowlets from one host start at one instant: one message.
    if (batched_[f.src].empty()) Simulator::ScheduleNow(&Run::flush_starts, this, f.src);
    batched_[f.src].push_back(i);
    codec_.add(f.src, s.key, net_.host_addr[f.src].Get(), net_.host_addr[f.dst].Get(), port,
               kDataPort, f.bytes, f.coflow);
    return;
  }
  ControlMessage m;
  m.host = f.src;
  m.starts.push_back(i);
  const std::size_t size =
      codec_.start(f.src, s.key, net_.host_addr[f.src].Get(), net_.host_addr[f.dst].Get(), port,
                   kDataPort, f.stop_s > 0 ? 0 : f.bytes);
  send_control(std::move(m), size);
}

void Run::flush_starts(std::uint32_t host) {
  ControlMessage m;
  m.host = host;
  m.starts = std::move(batched_[host]);
  batched_[host].clear();
  send_control(std::move(m), codec_.flush(host));
}

void Run::on_connected(Ptr<Socket> s) {
  const std::uint32_t i = by_sender_.at(PeekPointer(s));
  senders_[i].connected = true;
  pump(i);
}

void Run::on_send(Ptr<Socket> s, std::uint32_t) {
  auto it = by_sender_.find(PeekPointer(s));
  if (it != by_sender_.end()) pump(it->second);
}

// Hands the socket what it has room for; under Flowtune only once a rate
// arrived. When everything written has been acknowledged, the flowlet ends
// (Flowtune: the endpoint tells the allocator) and the socket closes.
void Run::pump(std::uint32_t i) {
  Sender& s = senders_[i];
  const std::uint64_t bytes = flows_[i].spec.bytes;
  if (!s.connected || s.ended || (c_.scheme == Scheme::kFlowtune && !s.has_rate)) return;
  // A streaming sender (one that leaves at stop_s) keeps at most
  // kStreamAheadBytes in its socket, so its flowlet ends soon after it stops.
  const bool streaming = flows_[i].spec.stop_s > 0;
  while (s.written < bytes) {
    const std::uint32_t free = s.socket->GetTxAvailable();
    const std::uint32_t queued = kSendBufferBytes - free;
    std::uint32_t room = free;
    if (streaming)
      room = queued >= kStreamAheadBytes ? 0 : std::min(free, kStreamAheadBytes - queued);
    if (room == 0) break;
    const auto n =
        static_cast<std::uint32_t>(std::min<std::uint64_t>({room, bytes - s.written, 1u << 16}));
    const int sent = s.socket->Send(Create<Packet>(n));
    if (sent <= 0) break;
    s.written += static_cast<std::uint64_t>(sent);
  }
  auto tcp = DynamicCast<TcpSocketBase>(s.socket);
  if (s.written < bytes || tcp->GetTxBuffer()->Size() > 0) return;
  s.ended = true;
  s.socket->Close();
  if (c_.scheme != Scheme::kFlowtune) return;
  const std::uint32_t src = flows_[i].spec.src;
  ControlMessage m;
  m.host = src;
  m.ends.push_back(i);
  send_control(std::move(m), codec_.end(src, s.key));
}

// A leave: the sender writes no more; what it wrote is the flowlet.
void Run::stop_flow(std::uint32_t i) {
  Sender& s = senders_[i];
  flows_[i].spec.bytes = std::max<std::uint64_t>(s.written, 1);  // nothing yet: one byte goes
  pump(i);
  if (flows_[i].end_s < 0 && flows_[i].received >= flows_[i].spec.bytes) finish(i);
}

void Run::on_accept(Ptr<Socket> s, const Address& from) {
  const InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
  auto it = by_peer_.find(peer_key(a.GetIpv4(), a.GetPort()));
  if (it == by_peer_.end()) return;
  by_socket_[PeekPointer(s)] = it->second;
  by_peer_.erase(it);
  s->SetRecvCallback(MakeCallback(&Run::on_receive, this));
}

void Run::on_receive(Ptr<Socket> s) {
  auto it = by_socket_.find(PeekPointer(s));
  while (Ptr<Packet> p = s->Recv()) {
    if (it == by_socket_.end() || p->GetSize() == 0) continue;
    FlowResult& f = flows_[it->second];
    f.received += p->GetSize();
    if (c_.bin_us > 0) {
      const auto bin = static_cast<std::size_t>(Simulator::Now().GetSeconds() * 1e6 / c_.bin_us);
      if (f.bins.size() <= bin) f.bins.resize(bin + 1, 0);
      f.bins[bin] += p->GetSize();
    }
    if (f.end_s < 0 && f.received >= f.spec.bytes) finish(it->second);
  }
}

void Run::finish(std::uint32_t i) {
  flows_[i].end_s = Simulator::Now().GetSeconds();
  if (++finished_ == flows_.size()) Simulator::Stop();
}

// A control packet as large as the real codec's message in its ZeroMQ
// frame; its first 4 bytes index the side table that holds the content.
void Run::send_control(ControlMessage m, std::size_t encoded_bytes) {
  const std::size_t framed = framed_bytes(encoded_bytes);
  const auto id = static_cast<std::uint32_t>(messages_.size());
  std::vector<std::uint8_t> payload(std::max<std::size_t>(framed, 4), 0);
  std::memcpy(payload.data(), &id, 4);
  m.sent_s = Simulator::Now().GetSeconds();
  const bool up = m.to_allocator;
  const std::uint32_t host = m.host;
  messages_.push_back(std::move(m));
  const std::uint64_t wire_bytes = payload.size() + kControlHeaderBytes;
  (up ? r_.bytes_to_allocator : r_.bytes_from_allocator) += wire_bytes;
  ++(up ? r_.messages_to_allocator : r_.messages_from_allocator);
  if (c_.instant_control) {
    Simulator::ScheduleNow(&Run::deliver, this, id);
    return;
  }
  Ptr<Packet> p = Create<Packet>(payload.data(), static_cast<std::uint32_t>(payload.size()));
  if (up) {
    control_sockets_[host]->SendTo(p, 0, InetSocketAddress(net_.allocator_addr, kControlPort));
  } else {
    control_sockets_.back()->SendTo(p, 0, InetSocketAddress(net_.host_addr[host], kControlPort));
  }
}

void Run::on_control(Ptr<Socket> s) {
  while (Ptr<Packet> p = s->Recv()) {
    if (p->GetSize() < 4) continue;
    std::uint32_t id = 0;
    p->CopyData(reinterpret_cast<std::uint8_t*>(&id), 4);
    deliver(id);
  }
}

void Run::deliver(std::uint32_t id) {
  const ControlMessage& m = messages_.at(id);
  if (m.to_allocator) {
    allocator_receive(m);
  } else {
    endpoint_receive(m);
  }
}

void Run::allocator_receive(const ControlMessage& m) {
  if (!m.starts.empty())
    r_.control_delay_us.push_back((Simulator::Now().GetSeconds() - m.sent_s) * 1e6);
  pending_starts_.insert(pending_starts_.end(), m.starts.begin(), m.starts.end());
  pending_ends_.insert(pending_ends_.end(), m.ends.begin(), m.ends.end());
}

// The endpoint applies each rate as its socket's pacing rate. The engine's
// rates are bits on the wire; the socket paces payload, so it is told the
// payload share of the rate.
void Run::endpoint_receive(const ControlMessage& m) {
  const double payload_share = static_cast<double>(c_.mss) / (c_.mss + kHeaderBytes);
  for (const auto& [i, bytes_per_s] : m.rates) {
    Sender& s = senders_[i];
    if (s.ended || !s.pacing) continue;
    const double bps = static_cast<double>(bytes_per_s) * 8.0;
    s.pacing->set_rate(bps * payload_share);
    r_.rates.push_back({Simulator::Now().GetSeconds(), i, bps});
    const bool first = !s.has_rate;
    s.has_rate = true;
    if (first) pump(i);
  }
}

// One allocator turn: the starts and ends that arrived, and while the
// allocator is busy one engine iteration and the rates the update rule sends.
void Run::turn() {
  for (std::uint32_t i : pending_ends_) model_.end(i);
  for (std::uint32_t i : pending_starts_) {
    model_.start(i, senders_[i].key, flows_[i].spec, flows_[i].ecmp_hash,
                 Simulator::Now().GetSeconds());
  }
  pending_starts_.clear();
  pending_ends_.clear();
  if (model_.busy()) {
    AllocatorModel::Turn t = model_.turn(Simulator::Now().GetSeconds());
    for (std::uint32_t h = 0; h < t.rates.size(); ++h) {
      if (t.message_bytes[h] == 0) continue;
      ControlMessage m;
      m.to_allocator = false;
      m.host = h;
      m.rates = std::move(t.rates[h]);
      send_control(std::move(m), t.message_bytes[h]);
    }
  }
  turn_event_ =
      Simulator::Schedule(MicroSeconds(static_cast<std::int64_t>(c_.turn_us)), &Run::turn, this);
}

void Run::sample_queue() {
  r_.queue_samples.push_back(
      static_cast<double>(net_.into_host[static_cast<std::size_t>(c_.queue_host)]->GetNPackets()));
  Simulator::Schedule(NanoSeconds(static_cast<std::int64_t>(c_.queue_sample_us * 1e3)),
                      &Run::sample_queue, this);
}

void Run::install_apps() {
  for (std::uint32_t h = 0; h < net_.hosts.GetN(); ++h) {
    Ptr<Socket> l = Socket::CreateSocket(net_.hosts.Get(h), TcpSocketFactory::GetTypeId());
    l->Bind(InetSocketAddress(Ipv4Address::GetAny(), kDataPort));
    l->Listen();
    l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                         MakeCallback(&Run::on_accept, this));
  }
  if (c_.scheme != Scheme::kFlowtune) return;
  for (std::uint32_t n = 0; n <= net_.hosts.GetN(); ++n) {
    Ptr<Node> node = n < net_.hosts.GetN() ? net_.hosts.Get(n) : net_.allocator;
    Ptr<Socket> u = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
    u->Bind(InetSocketAddress(Ipv4Address::GetAny(), kControlPort));
    u->SetRecvCallback(MakeCallback(&Run::on_control, this));
    control_sockets_.push_back(u);
  }
  turn_event_ =
      Simulator::Schedule(MicroSeconds(static_cast<std::int64_t>(c_.turn_us)), &Run::turn, this);
}

// Alone on the empty network: the handshake's round trip, then the first
// packet stored and forwarded at every hop, the rest at the slowest link.
double Run::ideal_fct_s(const FlowSpec& f) const {
  const bool same_rack =
      c_.shape == Shape::kStar || f.src / c_.hosts_per_rack == f.dst / c_.hosts_per_rack;
  std::vector<double> gbps = {c_.host_gbps, c_.host_gbps};
  if (!same_rack) gbps = {c_.host_gbps, c_.core_gbps, c_.core_gbps, c_.host_gbps};
  const double d = c_.link_delay_us * 1e-6;
  const double first =
      static_cast<double>(std::min<std::uint64_t>(f.bytes, c_.mss) + kHeaderBytes) * 8;
  const double full = static_cast<double>(c_.mss + kHeaderBytes) * 8;
  const double packets = std::ceil(static_cast<double>(f.bytes) / c_.mss);
  double t = 0, slowest = 1e18;
  for (double g : gbps) {
    t += 3 * d + (2 * kHeaderBytes * 8 + first) / (g * 1e9);  // SYN, SYN-ACK, first data
    slowest = std::min(slowest, g * 1e9);
  }
  return t + (packets - 1) * full / slowest;
}

void Run::collect(Result* r) const {
  r->flows = flows_;
  for (int h = 0; h < kNumHops; ++h) {
    HopStats s;
    s.name = hop_name(h);
    s.queue_delay_us =
        summarize(std::vector<double>(net_.sojourn_us[h].begin(), net_.sojourn_us[h].end()));
    for (const auto& port : net_.ports) {
      if (port.hop != h) continue;
      const QueueDisc::Stats& st = port.qdisc->GetStats();
      s.dropped_bytes += st.nTotalDroppedBytes;
      s.dropped_packets += st.nTotalDroppedPackets;
      s.marked_packets += st.nTotalMarkedPackets;
    }
    r->hops.push_back(s);
  }
}

Result Run::go() {
  const auto wall0 = std::chrono::steady_clock::now();
  set_defaults(c_);
  RngSeedManager::SetSeed(static_cast<std::uint32_t>(c_.seed % 0xffffffffu) + 1);
  build_network(c_, &net_);
  for (const FlowSpec& f : make_flows(c_)) {
    FlowResult fr;
    fr.spec = f;
    fr.ideal_s = ideal_fct_s(f);
    flows_.push_back(fr);
  }
  senders_.resize(flows_.size());
  batched_.resize(num_hosts(c_));
  install_apps();
  for (std::uint32_t i = 0; i < flows_.size(); ++i) {
    Simulator::Schedule(Seconds(flows_[i].spec.start_s), &Run::start_flow, this, i);
    if (flows_[i].spec.stop_s > 0)
      Simulator::Schedule(Seconds(flows_[i].spec.stop_s), &Run::stop_flow, this, i);
  }
  if (c_.queue_host >= 0) Simulator::Schedule(Seconds(0), &Run::sample_queue, this);
  // Arrivals and leaves happen by then; the drain is on top.
  double last = c_.duration_ms * 1e-3;
  for (const auto& f : flows_) last = std::max({last, f.spec.start_s, f.spec.stop_s});
  Simulator::Stop(Seconds(last + c_.drain_ms * 1e-3));
  if (!flows_.empty()) Simulator::Run();
  r_.simulated_s = Simulator::Now().GetSeconds();
  r_.engine_iterations = model_.iterations();
  collect(&r_);
  Simulator::Destroy();
  r_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(r_);
}

}  // namespace

Result run(const Config& c) {
  validate(c);
  Run r(c);
  return r.go();
}

}  // namespace flowtune::packet
