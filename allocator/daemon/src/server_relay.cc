// The Server's side of relays (wire/relay.h): batches heard from a relay,
// the key chains it vouches for, and the outbox sent as one batch per relay.
#include "flowtune/daemon/server.h"

#include <algorithm>
#include <vector>

#include "allocator_internal.h"
#include "flowtune/common/curve.h"
#include "flowtune/common/zmq_recv.h"
#include "flowtune/wire/codec.h"
#include "flowtune/wire/relay.h"
#include "server_internal.h"

namespace flowtune::daemon {

std::string Server::relay_refusal(const zmq::message_t& tag, bool keyed,
                                  const KeyEntry** sender_out) const {
  // Relays are trusted with the address quotas of every endpoint behind
  // them: only those the operator named (--relay-from) may send batches.
  // With CURVE on, the relay's key must also be an endpoint key, and its
  // hosts are the ones the endpoints behind it may speak for.
  std::string why;
  const KeyEntry* sender = nullptr;
  if (zap_) {
    const char* key = zmq_msg_gets(tag.handle(), "User-Id");
    sender = key != nullptr ? keys_.find(key) : nullptr;
    if (sender == nullptr) {
      why = "this relay's key is in no allow-list";
    } else if ((sender->roles & kRoleEndpoint) == 0) {
      why = "key \"" + sender->principal.name +
            "\" is a flowtune-ctl key, not a relay's (--curve-clients)";
    }
  }
  *sender_out = sender;
  if (why.empty() && tcp_) {
    const char* address = zmq_msg_gets(tag.handle(), "Peer-Address");
    if (address == nullptr || !relay_allowed(address)) {
      why = std::string("relay batches from ") + (address != nullptr ? address : "?") +
            " are refused: not in --relay-from";
    }
  }
  // A keyed batch's chains mean something only when the relay sending it
  // was authenticated, and is a relay's key.
  if (why.empty() && keyed && !zap_) {
    why = "keyed relay batches need CURVE on the allocator (--curve-secret)";
  } else if (why.empty() && keyed && !sender->principal.relay) {
    why = "key \"" + sender->principal.name +
          "\" may not vouch for the keys behind it (relay = true)";
  }
  return why;
}

// A relay's batch: each (route, message) is one endpoint's message, heard
// from the peer named by the relay and the route. The relay's key (CURVE)
// speaks for each, so it must be allowed the hosts behind it. Source quotas
// by address do not apply (every endpoint behind it shares the relay's);
// quotas by host do.
int Server::relay_batch(std::string_view relay, const zmq::message_t& tag, bool more,
                        std::uint64_t now) {
  const bool keyed = tag.to_string_view() == wire::kKeyedRelayTag;
  const KeyEntry* sender = nullptr;
  std::string why = relay_refusal(tag, keyed, &sender);
  if (!why.empty()) {
    drain_rest(router_, more);
    allocator_.on_unauthorized(relay, why, now);
    return 1;
  }
  ++allocator_.counters().relay_batches;
  const std::size_t frames = keyed ? 3 : 2;
  int pairs = 0;
  while (more) {
    zmq::message_t route, keys, body;
    recv_part(router_, route);
    more = route.more();
    if (more && keyed) {
      recv_part(router_, keys);
      more = keys.more();
    }
    if (!more || static_cast<std::size_t>(++pairs) > wire::kMaxRelayBatch) {
      drain_rest(router_, more);
      allocator_.on_bad_frames(relay, frames * static_cast<std::size_t>(pairs) + 1,
                               now);  // a route without its message, or too many
      return pairs;
    }
    recv_part(router_, body);
    more = body.more();
    const std::string peer = wire::valid_route(route.to_string_view())
                                 ? wire::relayed_peer(relay, route.to_string_view())
                                 : std::string();
    if (!wire::is_relayed_peer(peer) || (keyed && !wire::valid_key_chain(keys.to_string_view()))) {
      allocator_.on_bad_frames(relay, frames * static_cast<std::size_t>(pairs) + 1, now);
      continue;
    }
    const Principal* speaker = sender != nullptr ? &sender->principal : nullptr;
    if (keyed) {
      const Result<const Principal*> v = vouched(keys.to_string_view(), *sender);
      if (!v) {
        allocator_.on_unauthorized(peer, v.error().message, now);
        continue;
      }
      speaker = *v;
    }
    allocator_.on_message(peer, {body.data<std::uint8_t>(), body.size()}, now, speaker, {});
  }
  return pairs;
}

// The endpoint key a chain vouches for (wire/relay.h: innermost first),
// with every relay that passed it up, the top one included, in its `via`.
// Refused when a key is in no endpoint list or a relay's key lacks
// `relay = true`. Kept until the lists are read again.
Result<const Principal*> Server::vouched(std::string_view chain, const KeyEntry& top) {
  std::string id(chain);
  id.append(top.principal.key);
  if (const auto it = vouched_.find(id); it != vouched_.end()) return &it->second;
  std::vector<const Principal*> chain_keys;
  for (std::size_t i = 0; i < chain.size(); i += wire::kCurveKeyBytes) {
    char z85[curve::kZ85KeyChars + 1] = {};
    zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(chain.data() + i),
                   wire::kCurveKeyBytes);
    const KeyEntry* k = keys_.find(z85);
    if (k == nullptr || (k->roles & kRoleEndpoint) == 0) {
      return fail(ErrorCause::kRefused,
                  std::string(i == 0 ? "the endpoint's key " : "a relay's key ") + z85 +
                      " is in no endpoint list (--curve-clients)");
    }
    chain_keys.push_back(&k->principal);
  }
  chain_keys.push_back(&top.principal);
  const std::vector<const Principal*> relays(chain_keys.begin() + 1, chain_keys.end());
  Result<Principal> p = vouched_for(*chain_keys.front(), relays);
  if (!p) return std::move(p).error();
  // Chains are few (one per endpoint key and path of relays); a flood of
  // made-up ones is refused above, as every key must be listed.
  if (vouched_.size() >= kMaxVouched) vouched_.clear();
  return &vouched_.emplace(std::move(id), std::move(*p)).first->second;
}

bool Server::relay_allowed(std::string_view address) const {
  for (const Cidr& c : relay_from_) {
    if (c.contains(address)) return true;
  }
  return false;
}

void Server::flush() {
  for (Outgoing& o : allocator_.take_outbox()) {
    std::vector<std::uint8_t> bytes = wire::encode(o.message);
    std::string_view relay, route;
    if (wire::split_relayed_peer(o.peer, &relay, &route)) {
      // Batched per relay, sent below: one ZeroMQ message for many endpoints.
      RelayOut& out = relay_out_[std::string(relay)];
      out.peers.push_back(std::move(o.peer));
      out.bytes.push_back(std::move(bytes));
      continue;
    }
    if (!send(o.peer, bytes.data(), bytes.size(), nullptr)) allocator_.on_send_failed(o.peer);
  }
  for (auto& [relay, out] : relay_out_) {
    for (std::size_t at = 0; at < out.peers.size(); at += wire::kMaxRelayBatch) {
      const std::size_t end = std::min(out.peers.size(), at + wire::kMaxRelayBatch);
      if (!send_relay_batch(relay, out, at, end)) {
        for (std::size_t i = at; i < end; ++i) allocator_.on_send_failed(out.peers[i]);
      }
    }
  }
  relay_out_.clear();
}

bool Server::send_relay_batch(const std::string& relay, const RelayOut& out, std::size_t at,
                              std::size_t end) {
  Counters& c = allocator_.counters();
  try {
    if (!router_.send(zmq::buffer(relay), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      c.send_failures += end - at;
      return false;
    }
    router_.send(zmq::buffer(wire::kRelayTag), zmq::send_flags::sndmore);
    for (std::size_t i = at; i < end; ++i) {
      std::string_view relay_id, route;
      (void)wire::split_relayed_peer(out.peers[i], &relay_id, &route);
      router_.send(zmq::buffer(route), zmq::send_flags::sndmore);
      router_.send(zmq::buffer(out.bytes[i]),
                   i + 1 < end ? zmq::send_flags::sndmore : zmq::send_flags::none);
      ++c.messages_out;
      c.bytes_out += out.bytes[i].size();
    }
    return true;
  } catch (const zmq::error_t&) {
    c.send_failures += end - at;
    return false;
  }
}

}  // namespace flowtune::daemon
