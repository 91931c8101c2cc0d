#include "flowtune/relay/relay.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "flowtune/common/endpoint.h"
#include "flowtune/common/router.h"
#include "flowtune/common/signals.h"
#include "flowtune/common/zap.h"
#include "flowtune/common/zmq_recv.h"
#include "flowtune/wire/messages.h"
#include "flowtune/wire/relay.h"
#include "flowtune/wire/role.h"

namespace flowtune::relay {
namespace {

using wire::kControlTag;
// Messages taken from each side per turn, so neither starves the other.
constexpr int kMaxPerTurn = 4096;
// A batch goes up once it holds this many bytes (each message is at most
// kMaxMessageBytes): a batch of resyncs stays a few MB, not a GB.
constexpr std::size_t kMaxBatchBytes = 4u << 20;

// A non-blocking receive; false when nothing waits (or a signal came).
bool try_recv(zmq::socket_t& s, zmq::message_t& m) {
  try {
    return s.recv(m, zmq::recv_flags::dontwait).has_value();
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
}

// The raw 32-byte CURVE key a message's connection holds (its "User-Id",
// which the ZAP handler set to the key in Z85); empty if none.
std::string connection_key(const zmq::message_t& m) {
  const char* z85 = zmq_msg_gets(m.handle(), "User-Id");
  if (z85 == nullptr || std::strlen(z85) != curve::kZ85KeyChars) return {};
  std::string raw(wire::kCurveKeyBytes, '\0');
  if (zmq_z85_decode(reinterpret_cast<std::uint8_t*>(raw.data()), z85) == nullptr) return {};
  return raw;
}

// {"error": ..., "retry_ms": N}: refused for now, not for good.
bool is_retry_later(std::string_view answer) {
  const auto j = nlohmann::json::parse(answer, nullptr, false);
  return j.is_object() && j.contains("retry_ms");
}

}  // namespace

Relay::Relay(zmq::context_t& ctx, const Config& c)
    : config_(c), down_(ctx, zmq::socket_type::router), chosen_(c.upstream.size() == 1), roles_(c.upstream.size()) {
  if (c.upstream.empty()) throw std::runtime_error("no --upstream");
  if (const std::string why = endpoint_port_error(c.listen); !why.empty()) throw std::runtime_error(why);
  for (const std::string& ep : c.upstream) {
    if (const std::string why = endpoint_port_error(ep); !why.empty()) throw std::runtime_error(why);
  }
  if (c.probe_ms == 0) throw std::runtime_error("--probe-ms must be at least 1");
  if (c.max_batch == 0 || c.max_batch > wire::kMaxRelayBatch) {
    throw std::runtime_error("--max-batch must be 1.." + std::to_string(wire::kMaxRelayBatch));
  }
  set_endpoint_router_options(down_, static_cast<std::int64_t>(wire::kMaxMessageBytes));
  const int hb = static_cast<int>(std::max<std::uint32_t>(c.heartbeat_ms, 100));
  for (std::size_t i = 0; i < c.upstream.size(); ++i) {
    zmq::socket_t& up = ups_.emplace_back(ctx, zmq::socket_type::dealer);
    up.set(zmq::sockopt::linger, 0);
    // Batches go only to a live upstream, and few wait: what an absent
    // allocator would be told late is stale, and the endpoints repair what
    // is dropped (their digests, resyncs).
    up.set(zmq::sockopt::immediate, 1);
    up.set(zmq::sockopt::sndhwm, 1000);
    up.set(zmq::sockopt::rcvhwm, 100000);
    up.set(zmq::sockopt::heartbeat_ivl, hb / 2);
    up.set(zmq::sockopt::heartbeat_timeout, hb);
    if (c.curve && curve::apply_client(up.handle(), *c.curve) != 0) {
      throw std::runtime_error(std::string("cannot set the CURVE keys: ") + zmq_strerror(zmq_errno()));
    }
  }
  if (!c.clients_dir.empty() || !c.ctl_dir.empty()) {
    if (!c.listen_key) throw std::runtime_error("an allow-list (--curve-clients, --curve-ctl) needs --curve-secret");
    if (const std::string why = reload(); !why.empty()) throw std::runtime_error(why);
  }
  if (c.listen_key) enable_curve_down(ctx);
  try {
    down_.bind(c.listen);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot listen on " + c.listen + ": " + e.what());
  }
  bound_ = down_.get(zmq::sockopt::last_endpoint);
  for (std::size_t i = 0; i < ups_.size(); ++i) {
    try {
      ups_[i].connect(c.upstream[i]);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("cannot use upstream " + c.upstream[i] + ": " + e.what());
    }
  }
}

// Endpoints below speak CURVE to listen_key. Without an allow-list every
// key gets its connection, and the allocator judges each message by the key
// chain it comes with; with one, only the keys it lists. The handler is
// bound before the listener, so no connection is accepted unasked.
void Relay::enable_curve_down(zmq::context_t& ctx) {
  if (zmq_has("curve") == 0) throw std::runtime_error("this libzmq was built without CURVE (libsodium)");
  zap_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
  zap_->set(zmq::sockopt::linger, 0);
  try {
    zap_->bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  down_.set(zmq::sockopt::curve_server, 1);
  down_.set(zmq::sockopt::curve_secretkey, config_.listen_key->secret_key);
  down_.set(zmq::sockopt::zap_domain, "flowtune");
}

// ZAP (common/zap.h): a CURVE key is let in (with an allow-list, a listed
// one), and travels with its connection's messages as "User-Id".
void Relay::answer_zap() {
  curve::ZapRequest r;
  for (int i = 0; i < kMaxPerTurn && curve::zap_receive(*zap_, &r); ++i) {
    if (ring_ && !r.z85.empty() && ring_->find(r.z85) == nullptr) {
      ++counters_.refused;
      curve::zap_reply(*zap_, r, "key not in this relay's allow-list");
      continue;
    }
    curve::zap_reply(*zap_, r);
  }
}

std::string Relay::reload() {
  if (config_.clients_dir.empty() && config_.ctl_dir.empty()) return {};
  daemon::AuthConfig a;
  a.clients_dir = config_.clients_dir;
  a.ctl_dir = config_.ctl_dir;
  const bool again = ring_ != nullptr;  // the first read is not a reload
  try {
    ring_ = std::make_unique<daemon::KeyRing>(daemon::KeyRing::load(a));
  } catch (const std::exception& e) {
    return e.what();
  }
  if (again) ++counters_.reloads;
  return {};
}

std::size_t Relay::listed_keys() const { return ring_ ? ring_->size() : 0; }

const daemon::KeyEntry* Relay::listed(const zmq::message_t& m) const {
  const char* z85 = zmq_msg_gets(m.handle(), "User-Id");
  return z85 == nullptr ? nullptr : ring_->find(z85);
}

// A key chain from below (raw keys, innermost first): the endpoint's key,
// then the relays' below the one that sent it; each listed as an endpoint
// key, each relay's with `relay = true`.
bool Relay::chain_listed(std::string_view chain) const {
  for (std::size_t i = 0; i * wire::kCurveKeyBytes < chain.size(); ++i) {
    char z85[curve::kZ85KeyChars + 1] = {};
    zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(chain.data()) + i * wire::kCurveKeyBytes,
                   wire::kCurveKeyBytes);
    const daemon::KeyEntry* e = ring_->find(z85);
    if (e == nullptr || (e->roles & daemon::kRoleEndpoint) == 0 || (i > 0 && !e->principal.relay)) return false;
  }
  return true;
}

int Relay::run(int signal_fd, std::uint64_t turns) {
  // A batch's deadline wakes the loop through a timerfd: zmq_poll counts in
  // milliseconds, a batch in microseconds.
  const int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer < 0) throw std::runtime_error("timerfd_create failed");
  std::vector<zmq::pollitem_t> items = {{down_.handle(), 0, ZMQ_POLLIN, 0}};
  for (auto& up : ups_) items.push_back({up.handle(), 0, ZMQ_POLLIN, 0});
  const std::size_t timer_item = items.size();
  items.push_back({nullptr, timer, ZMQ_POLLIN, 0});
  if (signal_fd >= 0) items.push_back({nullptr, signal_fd, ZMQ_POLLIN, 0});
  const std::size_t zap_item = items.size();
  if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
  const bool pair = ups_.size() > 1;
  const bool key_file = config_.curve && !config_.curve->server_file.empty();
  using std::chrono::steady_clock;
  up_heard_ = steady_clock::now();
  for (std::uint64_t t = 0; t < turns; ++t) {
    // Asleep until a message, or until the batch waiting is due.
    itimerspec spec{};
    if (!routes_.empty() && chosen_) {
      const auto due = first_at_ + std::chrono::microseconds(config_.batch_us);
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(due - steady_clock::now()).count();
      spec.it_value.tv_sec = left > 0 ? left / 1'000'000'000 : 0;
      spec.it_value.tv_nsec = left > 0 ? left % 1'000'000'000 : 1;
      if (spec.it_value.tv_sec == 0 && spec.it_value.tv_nsec == 0) spec.it_value.tv_nsec = 1;
    }
    (void)timerfd_settime(timer, 0, &spec, nullptr);
    // Several upstreams: awake for the next probe.
    long wait_ms = turns != UINT64_MAX ? 10 : -1;
    if (pair && turns == UINT64_MAX) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_probe_ - steady_clock::now());
      wait_ms = std::max<long>(1, static_cast<long>(left.count()) + 1);
    }
    // The allocator's key file is read again while upstream is silent.
    if (key_file && (wait_ms < 0 || wait_ms > kKeyCheckMs)) wait_ms = kKeyCheckMs;
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if ((items[timer_item].revents & ZMQ_POLLIN) != 0) {
      std::uint64_t expirations;
      (void)!::read(timer, &expirations, sizeof expirations);
    }
    if (signal_fd >= 0 && (items[timer_item + 1].revents & ZMQ_POLLIN) != 0) {
      if (const int sig = take_signal(signal_fd); sig != 0) {
        ::close(timer);
        return sig;
      }
    }
    if (zap_ && (items[zap_item].revents & ZMQ_POLLIN) != 0) answer_zap();
    drain_down();
    if (!routes_.empty() && chosen_ &&
        steady_clock::now() - first_at_ >= std::chrono::microseconds(config_.batch_us)) {
      flush_up();
    }
    for (std::size_t i = 0; i < ups_.size(); ++i) drain_up(i);
    if (pair) probe(steady_clock::now());
    if (key_file) follow_server_key(steady_clock::now());
  }
  ::close(timer);
  return 0;
}

void Relay::probe(std::chrono::steady_clock::time_point now) {
  if (now >= next_probe_) {
    next_probe_ = now + std::chrono::milliseconds(config_.probe_ms);
    for (auto& up : ups_) {
      try {
        // Refused at once while it is unreachable (ZMQ_IMMEDIATE): silence.
        if (up.send(zmq::buffer(kControlTag), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          up.send(zmq::buffer(std::string_view("role")), zmq::send_flags::none);
        }
      } catch (const zmq::error_t&) {
      }
    }
  }
}

// {"role": "active" | "standby", "term": N, "id": N} (wire/role.h). A
// refusal to be asked again shortly (a rate limit) says it lives, its role
// as last heard; anything else (a relay's status, an error) says it lives
// but serves no one.
void Relay::read_role(std::size_t i, std::string_view answer, std::chrono::steady_clock::time_point now) {
  Upstream& u = roles_[i];
  u.heard = now;
  const auto peer = wire::parse_role_answer(answer);
  if (!peer && is_retry_later(answer)) {
    choose_upstream(now);
    return;
  }
  u.active = peer && peer->role == wire::PairRole::kActive;
  u.term = peer ? peer->term : 0;
  u.id = peer ? peer->id : 0;
  choose_upstream(now);
}

// The active one heard within three probes, by the pair's own rule when
// two say so (a split healing): the higher term, then the lower id. None:
// stay (a takeover is under way, or all are silent). Answers come every
// probe period, so one that went silent is passed over at the next answer
// from the other.
void Relay::choose_upstream(std::chrono::steady_clock::time_point now) {
  const auto stale = std::chrono::milliseconds(3 * config_.probe_ms);
  std::size_t best = ups_.size();
  for (std::size_t i = 0; i < roles_.size(); ++i) {
    if (!roles_[i].active || now - roles_[i].heard > stale) continue;
    const Upstream& b = roles_[best < ups_.size() ? best : i];
    if (best == ups_.size() || roles_[i].term > b.term || (roles_[i].term == b.term && roles_[i].id < b.id)) {
      best = i;
    }
  }
  if (best == ups_.size() || (chosen_ && best == active_)) return;
  chosen_ = true;
  if (best != active_) ++counters_.upstream_switches;
  active_ = best;
  flush_up();  // what was gathered goes to the one now active
}

// The allocator rotated its key (docs/security.md): a relay that names the
// key by its file and has heard nothing from upstream for kKeyCheckMs reads
// the file again (at most that often) and, if it names another key,
// connects again with it.
void Relay::follow_server_key(std::chrono::steady_clock::time_point now) {
  const auto period = std::chrono::milliseconds(kKeyCheckMs);
  if (now - up_heard_ < period || now < next_key_check_) return;
  next_key_check_ = now + period;
  const Result<bool> changed = curve::follow_server_key(&*config_.curve);
  if (!changed) {
    const std::string& why = changed.error().message;
    if (why != key_error_) std::cerr << "flowtune-relay: " << why << "; the key in use stays\n";
    key_error_ = why;
    return;
  }
  key_error_.clear();
  if (!*changed) return;
  for (std::size_t i = 0; i < ups_.size(); ++i) {
    if (int e = curve::reconnect(ups_[i].handle(), *config_.curve, config_.upstream[i]); e != 0) {
      std::cerr << "flowtune-relay: reconnecting to " << config_.upstream[i] << ": " << zmq_strerror(e) << "\n";
    }
  }
  ++counters_.key_changes;
  std::cerr << "flowtune-relay: the allocator's key changed (" << config_.curve->server_file
            << "); reconnected upstream\n";
}

// What endpoints (one frame) and relays below (a batch) sent; flowtune-ctl
// requests are answered here, about the relay.
void Relay::drain_down() {
  for (int n = 0; n < kMaxPerTurn; ++n) {
    zmq::message_t hop;
    if (!try_recv(down_, hop)) return;
    if (!hop.more()) {
      ++counters_.bad_frames;
      continue;
    }
    zmq::message_t first;
    recv_part(down_, first);
    // Under CURVE downstream each message goes up with the key it came
    // with; a keyed batch only from a relay that was authenticated here.
    const std::string key = zap_ ? connection_key(first) : std::string();
    const bool keyed = first.to_string_view() == wire::kKeyedRelayTag;
    if ((zap_ && key.empty()) || (keyed && !zap_)) {
      drain_rest(down_, first.more());
      ++counters_.unkeyed;
      continue;
    }
    // With an allow-list, each message is judged by the list in force now
    // (a reload may have removed a key whose connection lives on).
    const daemon::KeyEntry* entry = ring_ ? listed(first) : nullptr;
    const bool endpoint_key = entry != nullptr && (entry->roles & daemon::kRoleEndpoint) != 0;
    if (keyed || first.to_string_view() == wire::kRelayTag) {
      if (ring_ && !(endpoint_key && entry->principal.relay)) {
        drain_rest(down_, first.more());
        ++counters_.not_listed;
        continue;
      }
      take_batch(hop.to_string_view(), first.more(), keyed, key);
      continue;
    }
    if (!first.more()) {
      if (ring_ && !endpoint_key) {
        ++counters_.not_listed;
        continue;
      }
      add_up(wire::route_push(hop.to_string_view(), {}), key, std::move(first));
      continue;
    }
    if (ring_ && entry == nullptr) {
      drain_rest(down_, first.more());
      ++counters_.not_listed;
      continue;
    }
    zmq::message_t second;
    recv_part(down_, second);
    if (first.to_string_view() != kControlTag || second.more()) {
      drain_rest(down_, second.more());
      ++counters_.bad_frames;
      continue;
    }
    const std::string reply = status();
    try {
      if (down_.send(zmq::buffer(hop.to_string_view()), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        down_.send(zmq::buffer(kControlTag), zmq::send_flags::sndmore);
        down_.send(zmq::buffer(reply), zmq::send_flags::none);
      }
    } catch (const zmq::error_t&) {
      ++counters_.dropped;
    }
  }
}

void Relay::take_batch(std::string_view hop, bool more, bool keyed, std::string_view below_key) {
  std::size_t pairs = 0;
  while (more) {
    zmq::message_t route, keys, body;
    recv_part(down_, route);
    more = route.more();
    if (more && keyed) {
      recv_part(down_, keys);
      more = keys.more();
    }
    if (!more || ++pairs > wire::kMaxRelayBatch) {
      drain_rest(down_, more);
      ++counters_.bad_frames;
      return;
    }
    recv_part(down_, body);
    more = body.more();
    std::string r = wire::route_push(hop, route.to_string_view());
    // The relay below vouched for keys_i; this relay vouches for it.
    std::string chain(keys.to_string_view());
    chain.append(below_key);
    if (r.empty() || (keyed && !wire::valid_key_chain(keys.to_string_view())) ||
        (zap_ && !wire::valid_key_chain(chain))) {
      ++counters_.dropped;
      continue;
    }
    if (ring_ && !chain_listed(keys.to_string_view())) {
      ++counters_.not_listed;
      continue;
    }
    add_up(std::move(r), std::move(chain), std::move(body));
  }
}

void Relay::add_up(std::string route, std::string keys, zmq::message_t&& body) {
  // Until an upstream of a pair has said it is active, one batch is held
  // (a standby would turn the endpoints away); what comes beyond it is lost
  // and repaired by the endpoints' retries.
  const bool full = routes_.size() >= config_.max_batch || batch_bytes_ >= kMaxBatchBytes;
  if (route.empty() || (!chosen_ && full)) {
    ++counters_.dropped;
    return;
  }
  if (routes_.empty()) first_at_ = std::chrono::steady_clock::now();
  batch_bytes_ += route.size() + keys.size() + body.size();
  routes_.push_back(std::move(route));
  keys_.push_back(std::move(keys));
  bodies_.push_back(std::move(body));
  if (routes_.size() >= config_.max_batch || batch_bytes_ >= kMaxBatchBytes) flush_up();
}

void Relay::flush_up() {
  if (routes_.empty() || !chosen_) return;
  zmq::socket_t& up = ups_[active_];
  try {
    const std::string_view tag = zap_ ? wire::kKeyedRelayTag : wire::kRelayTag;
    if (up.send(zmq::buffer(tag), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      for (std::size_t i = 0; i < routes_.size(); ++i) {
        up.send(zmq::buffer(routes_[i]), zmq::send_flags::sndmore);
        if (zap_) up.send(zmq::buffer(keys_[i]), zmq::send_flags::sndmore);
        up.send(bodies_[i], i + 1 < routes_.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
      counters_.messages_up += routes_.size();
      ++counters_.batches_up;
    } else {
      // Upstream's queue is full (or it was never reached): the endpoints'
      // digests and retries repair what is lost.
      counters_.dropped += routes_.size();
    }
  } catch (const zmq::error_t&) {
    counters_.dropped += routes_.size();
  }
  routes_.clear();
  keys_.clear();
  bodies_.clear();
  batch_bytes_ = 0;
}

// Answers from upstream i: each goes to the endpoint its route names, or,
// with hops left, into one batch for the relay below. Every upstream's
// answers are delivered, the active one's or not: an endpoint's epochs keep
// a stale one out.
void Relay::drain_up(std::size_t i) {
  zmq::socket_t& up = ups_[i];
  std::map<std::string, std::vector<std::pair<std::string, zmq::message_t>>> below;
  for (int n = 0; n < kMaxPerTurn; ++n) {
    zmq::message_t tag;
    if (!try_recv(up, tag)) break;
    if (n == 0) up_heard_ = std::chrono::steady_clock::now();
    bool more = tag.more();
    if (tag.to_string_view() == kControlTag && more) {  // a role probe's answer
      zmq::message_t answer;
      recv_part(up, answer);
      drain_rest(up, answer.more());
      read_role(i, answer.to_string_view(), std::chrono::steady_clock::now());
      continue;
    }
    if (tag.to_string_view() != wire::kRelayTag) {
      drain_rest(up, more);
      ++counters_.bad_frames;  // the allocator refused a frame of ours: a bug, not traffic
      continue;
    }
    while (more) {
      zmq::message_t route, body;
      recv_part(up, route);
      if (!route.more()) {
        ++counters_.bad_frames;
        break;
      }
      recv_part(up, body);
      more = body.more();
      std::string_view hop, rest;
      if (!wire::route_pop(route.to_string_view(), &hop, &rest)) {
        ++counters_.dropped;
        continue;
      }
      if (!rest.empty()) {
        below[std::string(hop)].emplace_back(std::string(rest), std::move(body));
        continue;
      }
      try {
        if (down_.send(zmq::buffer(hop), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          down_.send(body, zmq::send_flags::none);
          ++counters_.messages_down;
        } else {
          ++counters_.dropped;
        }
      } catch (const zmq::error_t&) {
        ++counters_.dropped;  // EHOSTUNREACH: the endpoint left
      }
    }
  }
  for (auto& [hop, list] : below) {
    try {
      if (!down_.send(zmq::buffer(hop), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        counters_.dropped += list.size();
        continue;
      }
      down_.send(zmq::buffer(wire::kRelayTag), zmq::send_flags::sndmore);
      for (std::size_t k = 0; k < list.size(); ++k) {
        down_.send(zmq::buffer(list[k].first), zmq::send_flags::sndmore);
        down_.send(list[k].second, k + 1 < list.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
      counters_.messages_down += list.size();
      ++counters_.batches_down;
    } catch (const zmq::error_t&) {
      counters_.dropped += list.size();
    }
  }
}

std::string Relay::status() const {
  const Counters& c = counters_;
  return nlohmann::json{{"relay", true},
                        {"listen", bound_},
                        {"upstream", config_.upstream[active_]},
                        {"upstreams", config_.upstream},
                        {"curve", config_.curve.has_value()},
                        {"curve_downstream", config_.listen_key.has_value()},
                        {"allow_list", ring_ ? nlohmann::json{{"keys", ring_->size()},
                                                              {"clients_dir", config_.clients_dir},
                                                              {"ctl_dir", config_.ctl_dir}}
                                             : nlohmann::json(nullptr)},
                        {"counters",
                         {{"messages_up", c.messages_up},
                          {"batches_up", c.batches_up},
                          {"messages_down", c.messages_down},
                          {"batches_down", c.batches_down},
                          {"dropped", c.dropped},
                          {"bad_frames", c.bad_frames},
                          {"upstream_switches", c.upstream_switches},
                          {"key_changes", c.key_changes},
                          {"unkeyed", c.unkeyed},
                          {"refused", c.refused},
                          {"not_listed", c.not_listed},
                          {"reloads", c.reloads}}}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace flowtune::relay
