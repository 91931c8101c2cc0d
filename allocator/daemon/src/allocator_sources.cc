// The per-source quotas (--max-endpoints-per-source, --max-flows-per-
// source, --max-hosts-per-source, --max-source-bytes-per-sec): the table of
// sources an endpoint is charged to (its host, address and key), the checks
// that refuse an endpoint or a flow when a source is full, and the hosts
// that sources add on the fly (--unknown-hosts add), counted and released
// when no flow uses them.
#include <algorithm>
#include <charconv>

#include "allocator_internal.h"
#include "flowtune/common/assert.h"
#include "flowtune/wire/relay.h"

namespace flowtune::daemon {

std::string Allocator::key_source_name(std::string_view peer) const {
  // Behind a relay the key is the endpoint's own only when vouched for.
  if (sender_ == nullptr || (wire::is_relayed_peer(peer) && sender_->via.empty())) return {};
  return "k:" + sender_->key;
}

std::string Allocator::source_full_for_endpoint(alloc::HostId host, std::string_view peer) const {
  const std::uint32_t cap = config_.max_endpoints_per_source;
  if (cap == 0) return {};
  auto full = [&](const std::string& key) {
    const auto it = sources_.find(key);
    return it != sources_.end() && it->second.endpoints >= cap;
  };
  const std::string limit = std::to_string(cap) + " endpoints (--max-endpoints-per-source)";
  if (full("h:" + std::to_string(host)))
    return "host " + network_.host_name(host) + " has " + limit;
  if (!address_.empty() && full("a:" + std::string(address_))) {
    return "address " + std::string(address_) + " has " + limit;
  }
  if (const std::string key = key_source_name(peer); !key.empty() && full(key)) {
    return "key \"" + sender_->name + "\" has " + limit;
  }
  return {};
}

std::string Allocator::source_full_for_flow(const Endpoint& e) const {
  const std::uint32_t cap = config_.max_flows_per_source;
  if (cap == 0) return {};
  const std::string limit = std::to_string(cap) + " flows (--max-flows-per-source)";
  if (e.host_source != nullptr && e.host_source->second.holds >= cap) {
    return "host " + network_.host_name(e.host) + " holds " + limit;
  }
  if (e.address_source != nullptr && e.address_source->second.holds >= cap) {
    return "address " + e.address_source->first.substr(2) + " holds " + limit;
  }
  if (e.key_source != nullptr && e.key_source->second.holds >= cap) {
    return "key \"" + e.key_name + "\" holds " + limit;
  }
  return {};
}

std::pair<const std::string, Allocator::Source>* Allocator::source_of(std::string key) {
  auto [it, fresh] = sources_.try_emplace(std::move(key));
  if (fresh) {
    it->second.bytes =
        TokenBucket(config_.max_source_bytes_per_sec, now_us_, config_.source_burst_bytes);
  }
  return &*it;
}

void Allocator::join_sources(Endpoint& e) {
  e.host_source = source_of("h:" + std::to_string(e.host));
  ++e.host_source->second.endpoints;
  if (!address_.empty()) {
    e.address_source = source_of("a:" + std::string(address_));
    ++e.address_source->second.endpoints;
  }
  if (std::string key = key_source_name(e.peer); !key.empty()) {
    e.key_source = source_of(std::move(key));
    ++e.key_source->second.endpoints;
  }
}

void Allocator::leave_sources(Endpoint& e) {
  count_holds(e, -static_cast<std::int64_t>(e.flows.size()));
  for (auto* s : {&e.host_source, &e.address_source, &e.key_source}) {
    if (*s == nullptr) continue;
    FT_ASSERT((*s)->second.endpoints > 0, (*s)->first);
    if (--(*s)->second.endpoints == 0)
      FT_ASSERT((*s)->second.holds == 0, (*s)->first, (*s)->second.holds);
    *s = nullptr;
  }
}

void Allocator::sweep_sources(std::uint64_t now_us) {
  // A source still charged for host slots stays: the slots point at it.
  std::erase_if(sources_, [now_us](const auto& kv) {
    return kv.second.endpoints == 0 && kv.second.hosts == 0 && kv.second.bytes.full_at(now_us);
  });
}

void Allocator::count_holds(Endpoint& e, std::int64_t delta) {
  for (auto* s : {e.host_source, e.address_source, e.key_source}) {
    if (s != nullptr)
      s->second.holds =
          static_cast<std::uint32_t>(static_cast<std::int64_t>(s->second.holds) + delta);
  }
}

// Called only once the name or address found no host: a host returned is new.
Result<alloc::HostId> Allocator::add_host(std::string_view name, const Chargers& by) {
  if (const std::uint32_t cap = config_.max_hosts_per_source; cap != 0) {
    for (const SourceRef s : by) {
      if (s == nullptr || s->second.hosts < cap) continue;
      return fail(ErrorCause::kRefused, source_label(s->first) + " holds " + std::to_string(cap) +
                                            " added hosts (--max-hosts-per-source)");
    }
  }
  std::optional<alloc::HostId> h = network_.add_host(name);
  if (!h) return fail(ErrorCause::kUnavailable, "no spare host slot is left");
  maybe_unused_.push_back(*h);
  if (host_chargers_.size() <= *h) host_chargers_.resize(std::size_t{*h} + 1, Chargers{});
  host_chargers_[*h] = by;
  for (const SourceRef s : by) {
    if (s != nullptr) ++s->second.hosts;
  }
  return *h;
}

std::size_t Allocator::host_charges_by_slot() const {
  std::size_t n = 0;
  for (const Chargers& by : host_chargers_) {
    for (const SourceRef s : by) n += s != nullptr ? 1 : 0;
  }
  return n;
}

std::size_t Allocator::host_charges_by_source() const {
  std::size_t n = 0;
  for (const auto& [name, s] : sources_) n += s.hosts;
  return n;
}

std::string Allocator::source_label(std::string_view source) const {
  const std::string_view rest = source.substr(std::min<std::size_t>(2, source.size()));
  if (source.starts_with("a:")) return "address " + std::string(rest);
  if (source.starts_with("h:")) {
    std::uint32_t id = 0;
    std::from_chars(rest.data(), rest.data() + rest.size(), id);
    return "host " + network_.host_name(id);
  }
  return sender_ != nullptr && source == "k:" + sender_->key ? "key \"" + sender_->name + "\""
                                                             : std::string("a key");
}

void Allocator::ref_host(alloc::HostId h) { ++host_refs_[h]; }

void Allocator::unref_host(alloc::HostId h) {
  FT_ASSERT(host_refs_[h] > 0, h);
  if (--host_refs_[h] == 0) maybe_unused_.push_back(h);
}

void Allocator::release_unused_hosts() {
  for (const alloc::HostId h : maybe_unused_) {
    if (host_refs_[h] != 0 || !network_.release_host(h)) continue;
    ++counters_.hosts_released;
    if (h < host_chargers_.size()) {
      for (SourceRef& s : host_chargers_[h]) {
        if (s == nullptr) continue;
        FT_ASSERT(s->second.hosts > 0, s->first, h);
        --s->second.hosts;
        s = nullptr;
      }
    }
    // A link without flows keeps its price: the next host in this slot
    // starts from the engine's initial price, not the last host's.
    const alloc::Topology& t = network_.topology();
    for (const alloc::LinkId l : {t.host_uplink(h), t.host_downlink(h)}) {
      for (std::uint8_t k = 0; k < alloc::kNumClasses; ++k)
        engine_->set_price(l, alloc::kInitialPrice, k);
    }
  }
  maybe_unused_.clear();
}

}  // namespace flowtune::daemon
