#include "flowtune/witness/witness.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq_addon.hpp>

#include "flowtune/common/curve.h"
#include "flowtune/common/endpoint.h"
#include "flowtune/common/router.h"
#include "flowtune/common/signals.h"
#include "flowtune/common/zap.h"
#include "flowtune/wire/role.h"

namespace flowtune::witness {
namespace {

using wire::kControlTag;
constexpr int kMaxPerTurn = 1024;
// A request is a short line; anything longer is not one.
constexpr std::int64_t kMaxMessageBytes = 4096;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

wire::ClaimAnswer Lease::claim(const wire::ClaimRequest& c, std::uint64_t now_us) {
  if (holder_ != 0 && holder_ != c.id && now_us < expires_us_) {
    return {false, holder_, term_, (expires_us_ - now_us + 999) / 1000, c.nonce};
  }
  holder_ = c.id;
  term_ = c.term;
  expires_us_ = now_us + c.lease_ms * 1000;
  return {true, holder_, term_, c.lease_ms, c.nonce};
}

Witness::Witness(zmq::context_t& ctx, const Config& c)
    : config_(c), router_(ctx, zmq::socket_type::router), tokens_(c.claims_per_sec), start_ns_(steady_ns()) {
  if (const std::string why = endpoint_port_error(c.listen); !why.empty()) throw std::runtime_error(why);
  if (!(c.claims_per_sec > 0)) throw std::runtime_error("--claims-per-sec must be positive");
  if (!c.clients_dir.empty() && c.secret_file.empty()) {
    throw std::runtime_error("--curve-clients: an allow-list judges CURVE keys: give --curve-secret too");
  }
  set_endpoint_router_options(router_, kMaxMessageBytes);
  if (!c.secret_file.empty()) {
    if (zmq_has("curve") == 0) throw std::runtime_error("this libzmq was built without CURVE (libsodium)");
    const Result<curve::KeyPair> own = curve::load_key_file(c.secret_file, true);
    if (!own) throw std::runtime_error("--curve-secret: " + own.error().message);
    if (c.clients_dir.empty()) throw std::runtime_error("--curve-secret needs --curve-clients: the keys that may claim");
    if (const std::string why = reload(); !why.empty()) throw std::runtime_error(why);
    // The handler is bound before the listener: no connection is accepted unasked.
    zap_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
    zap_->set(zmq::sockopt::linger, 0);
    try {
      zap_->bind("inproc://zeromq.zap.01");
    } catch (const zmq::error_t& e) {
      throw std::runtime_error(std::string("cannot bind the ZAP handler: ") + e.what());
    }
    router_.set(zmq::sockopt::curve_server, 1);
    router_.set(zmq::sockopt::curve_secretkey, own->secret_key);
    router_.set(zmq::sockopt::zap_domain, "flowtune");
  }
  try {
    router_.bind(c.listen);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error("cannot listen on " + c.listen + ": " + e.what());
  }
  bound_ = router_.get(zmq::sockopt::last_endpoint);
}

Witness::~Witness() = default;

std::string Witness::reload() {
  if (config_.clients_dir.empty()) return {};
  daemon::AuthConfig a;
  a.ctl_dir = config_.clients_dir;
  try {
    ring_ = std::make_unique<daemon::KeyRing>(daemon::KeyRing::load(a));
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

std::uint64_t Witness::now_us() const { return static_cast<std::uint64_t>((steady_ns() - start_ns_) / 1000); }

int Witness::run(int signal_fd, std::uint64_t turns) {
  std::vector<zmq::pollitem_t> items = {{router_.handle(), 0, ZMQ_POLLIN, 0}};
  const std::size_t signal_item = items.size();
  if (signal_fd >= 0) items.push_back({nullptr, signal_fd, ZMQ_POLLIN, 0});
  const std::size_t zap_item = items.size();
  if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
  for (std::uint64_t t = 0; t < turns; ++t) {
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(turns != UINT64_MAX ? 10 : -1));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (signal_fd >= 0 && (items[signal_item].revents & ZMQ_POLLIN) != 0) {
      if (const int sig = take_signal(signal_fd); sig != 0) return sig;
    }
    if (zap_ && (items[zap_item].revents & ZMQ_POLLIN) != 0) {
      curve::ZapRequest r;
      for (int i = 0; i < kMaxPerTurn && curve::zap_receive(*zap_, &r); ++i) {
        const bool listed = !r.z85.empty() && ring_->find(r.z85) != nullptr;
        if (!listed && !r.z85.empty()) ++counters_.not_authorized;
        curve::zap_reply(*zap_, r, listed || r.z85.empty() ? nullptr : "key not in this witness's allow-list");
      }
    }
    drain();
  }
  return 0;
}

void Witness::drain() {
  for (int n = 0; n < kMaxPerTurn; ++n) {
    std::vector<zmq::message_t> frames;
    try {
      if (!zmq::recv_multipart(router_, std::back_inserter(frames), zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) return;
      throw;
    }
    if (frames.size() != 3 || frames[1].to_string_view() != kControlTag) {
      ++counters_.bad_requests;
      continue;  // not a request: nothing to answer
    }
    std::string reply;
    // A key a reload removed: heard no more on the connection it holds.
    if (ring_ != nullptr) {
      const char* key = zmq_msg_gets(frames[2].handle(), "User-Id");
      if (key == nullptr || ring_->find(key) == nullptr) {
        ++counters_.not_authorized;
        reply = R"({"error":"this connection's key is in no allow-list"})";
      }
    }
    if (reply.empty()) reply = answer(frames[2].to_string_view(), now_us());
    try {
      zmq::send_multipart(router_, std::vector<zmq::const_buffer>{zmq::buffer(frames[0].data(), frames[0].size()),
                                                                  zmq::buffer(kControlTag), zmq::buffer(reply)},
                          zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // The peer left: nothing to answer.
    }
  }
}

std::string Witness::answer(std::string_view request, std::uint64_t now) {
  if (request == "status") return status(now);
  // Claims share a token bucket: a flood cannot starve the loop, and a
  // claimant told to retry counts it as the witness's silence, not a refusal.
  tokens_ = std::min(config_.claims_per_sec,
                     tokens_ + static_cast<double>(now - tokens_at_us_) * 1e-6 * config_.claims_per_sec);
  tokens_at_us_ = now;
  if (tokens_ < 1) {
    ++counters_.rate_limited;
    return R"({"error":"too many claims; try again shortly","retry_ms":10})";
  }
  tokens_ -= 1;
  const auto c = wire::parse_claim_request(request);
  if (!c) {
    ++counters_.bad_requests;
    return R"({"error":"expected \"claim ID TERM LEASE_MS NONCE\" (ID > 0, LEASE_MS 1-3600000) or \"status\""})";
  }
  ++counters_.claims;
  const std::uint64_t before = lease_.holder();
  const bool live = lease_.left_us(now) > 0;
  const wire::ClaimAnswer a = lease_.claim(*c, now);
  if (!a.granted) {
    ++counters_.refusals;
  } else if (before == c->id && live) {
    ++counters_.renewals;
  } else {
    ++counters_.grants;
    if (before != c->id) ++counters_.holder_changes;
  }
  return wire::claim_answer(a);
}

std::string Witness::status(std::uint64_t now) const {
  const Counters& c = counters_;
  return nlohmann::json{{"witness", true},
                        {"listen", bound_},
                        {"curve", !config_.secret_file.empty()},
                        {"holder", lease_.holder()},
                        {"term", lease_.term()},
                        {"lease_left_ms", lease_.left_us(now) / 1000},
                        {"counters",
                         {{"claims", c.claims},
                          {"grants", c.grants},
                          {"renewals", c.renewals},
                          {"refusals", c.refusals},
                          {"holder_changes", c.holder_changes},
                          {"bad_requests", c.bad_requests},
                          {"not_authorized", c.not_authorized},
                          {"rate_limited", c.rate_limited}}}}
      .dump();
}

}  // namespace flowtune::witness
