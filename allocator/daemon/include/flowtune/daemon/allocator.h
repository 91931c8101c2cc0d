// The allocator's protocol state machine: endpoints, their flowlets, the
// engine that rates them, and the messages it owes each endpoint. No sockets
// and no clock: the server (server.h) feeds it frames with the current time
// and sends what it emits; tests do the same with hand-built messages.
//
// Life of a flowlet: an endpoint's start adds a flow to the engine; iterate()
// runs one NED iteration and queues a rate update for every flow whose
// normalized rate moved by more than the threshold since the endpoint was last
// told (new flows always); an end removes it. One socket is one flow: a
// start whose (source host, 5-tuple) is already live joins that flow, every
// holder is told its rates, and it goes when its last holder ends it
// (allocator_internal.h). Rates are leases: each update
// and each periodic lease refresh lets the endpoint use its rates for
// lease_us; an endpoint silent for endpoint_timeout_us loses all its flows,
// so a vanished endpoint cannot hold capacity.
//
// Threading: one thread calls everything; the engine may use TBB inside
// iterate() when threads > 1.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "flowtune/alloc/engine.h"
#include "flowtune/alloc/engine_journal.h"
#include "flowtune/alloc/parallel.h"
#include "flowtune/alloc/policy.h"
#include "flowtune/common/id_free_list.h"
#include "flowtune/common/result.h"
#include "flowtune/common/rules.h"
#include "flowtune/common/token_bucket.h"
#include "flowtune/daemon/counters.h"
#include "flowtune/daemon/log.h"
#include "flowtune/daemon/network.h"
#include "flowtune/daemon/policy_file.h"
#include "flowtune/wire/messages.h"

namespace flowtune::daemon {

enum class UnknownHosts { kReject, kAdd };

struct AllocatorConfig {
  alloc::EngineConfig engine;  // gamma, normalizer, tolerance
  unsigned threads = 1;        // > 1: multi-core iterations (allocator/parallel)
  // FlowBlocks per side; 0: as many as threads need.
  std::uint32_t engine_blocks = 0;
  // When set, it runs each iteration in the engine's place, given the
  // engine and its journal of changes since the last one (flowtune-allocator
  // --mpi: alloc::MpiDriver::lead, the engine mirrored on other ranks).
  std::function<void(alloc::Engine&, std::vector<std::uint8_t>*)> iterate_elsewhere;
  alloc::Schedule schedule = alloc::Schedule::kPersistent;  // how, with threads > 1
  // Updates go out only when a rate moved by more than this fraction (paper
  // §5.3.2), and every link is scaled by (1 - threshold) so the stale rates it
  // leaves at endpoints cannot add up past capacity (flowtune/common/rules.h,
  // shared with the simulator).
  double threshold = rules::kThreshold;
  // Answer a start before the turn's iteration: a new flowlet is told the
  // rate the current prices give it (Engine::estimate_rate_bps), after the
  // policy (tenants' weights, deadline floors, the coflow plan) is applied,
  // and the iteration that follows corrects it only if it moved past the
  // threshold.
  bool early_rates = true;
  // Moved rates go out at most this often (µs): the iterations between
  // coalesce, so a flow is told where its rate went, not each step of the
  // way there. The iteration that ends a settle (converged, or the flow
  // set idle) always tells. 0: after every iteration.
  std::uint64_t update_interval_us = 0;
  // A further fraction of every link kept for unscheduled mice and external
  // traffic (paper §6).
  double headroom = rules::kHeadroom;
  // How far, relative, the rates this process holds may be from the
  // computed ones (flowtune-allocator --mpi-gather-threshold: rank 0 holds
  // other ranks' rates within it). Scheduled capacities shrink by (1 -
  // view_slack) too, so rates told from that view still fit every link.
  double view_slack = 0;
  std::uint32_t lease_us = rules::kLeaseUs;
  std::uint64_t lease_refresh_us = rules::kLeaseRefreshUs;  // how often live leases are renewed
  std::uint64_t endpoint_timeout_us = rules::kEndpointTimeoutUs;
  // The flows (and endpoints) one on_timer call visits at most, whole
  // endpoints at a time (at least one): a tick's refreshes and timeouts are
  // spread over as many turns as it takes, so that no turn carries a pass
  // over every flow (66,000 flows under a flood: 2.2 ms).
  std::uint32_t timer_slice = 8192;
  // Iterations after the last flow change before giving up on convergence (a
  // flow set whose prices keep oscillating must not burn a core forever).
  std::uint64_t max_settle_iterations = 2000;
  // At most wire::kMaxResyncFlows: an endpoint's whole state must fit one
  // resync message.
  std::uint32_t max_flows_per_endpoint = 16000;
  std::uint32_t max_endpoints = 1u << 16;
  // Flows in all, over every endpoint (memory: a few hundred bytes each).
  std::uint32_t max_flows = 1u << 21;
  // Per source: the endpoints of one host, and the connections from one
  // peer address (whatever hosts they name), may hold at most this many
  // flows and endpoints together, so that one peer cannot fill the global
  // tables through many endpoints. 0 = no limit. The flows one source holds
  // are iterated in every loop turn, which everyone else's start waits
  // behind: under a flood over 300 endpoints of one address the others'
  // start->rate p99 was 0.3-1.2x idle at 8,192 and 3-13x at 65,536 (RT
  // throttle off; docs/reliability.md). A flowlet refused runs on TCP,
  // unpaced.
  std::uint32_t max_flows_per_source = 1u << 13;
  std::uint32_t max_endpoints_per_source = 4096;
  // Per source (its address and key for a hello's host, the endpoint's
  // sources for a flow's destination): spare host slots it added and that
  // are still held (UnknownHosts::kAdd), so that no one peer takes them all
  // (1,024 by default). A host or destination past it is refused, its
  // flowlets run on TCP, unpaced. 0 = no limit.
  std::uint32_t max_hosts_per_source = 64;
  // Per-endpoint message rate: a token bucket of this many messages/s with a
  // burst of a tenth of a second; a message costs one more for every
  // kBytesPerToken of its decode_cost(). 0 = unlimited.
  double max_messages_per_sec = 100'000;
  // Per source (as above), bytes of input a second, charged before
  // decoding what decoding costs (decode_cost()), with a burst of a tenth
  // of a second: the loop's time goes to
  // sources in proportion to what they are allowed, however many endpoints
  // one of them opens. 0 = unlimited.
  double max_source_bytes_per_sec = 1e6;
  // Its burst: at least the largest resync (16,382 flowlets with 5-tuples,
  // sizes and tenants pack to about 1 MB), so an endpoint that resyncs is
  // not then refused for the debt it left.
  double source_burst_bytes = 2 << 20;
  UnknownHosts unknown_hosts = UnknownHosts::kReject;
  // Strict priority classes (docs/policy.md): the class of a flowlet that
  // names none, and the highest class (lowest number) an endpoint may ask
  // for; a start asking higher is lowered to it and counted.
  std::uint8_t default_class = alloc::kDefaultClass;
  std::uint8_t top_class = 0;
  // Deadline floors are (remaining ÷ time left) × (1 + margin): rates are
  // paced a little below what they allow, and progress is estimated from
  // them, not reported.
  double deadline_margin = 0.05;
  // Coflow order (docs/coflows.md): kNone leaves every flowlet to the
  // engine's fair share; stf / sebf / bssi add each flowlet's rate in coflow order
  // to its floor, within coflow_share of every link (and --max-reserved).
  alloc::CoflowPolicy coflow_policy = alloc::CoflowPolicy::kNone;
  // 0.7, not the simulator's 0.9: on the testbed's trace replay 0.9 left
  // the unordered flows too little to keep moving (mean CCT 3.7 s against
  // 0.98 s with 0.7; the fluid simulator, which has no such cost, loses
  // 2.61x -> 2.39x of its gain; docs/coflows.md).
  double coflow_share = 0.7;
  // Aging, the second starvation guard: a coflow's weight grows as 1 +
  // waited / coflow_aging_s (waited from its oldest live flowlet's start)
  // and divides its key; 0 = off.
  double coflow_aging_s = 0;
  // Tenants, rules and the file's default and top class (--policy); its
  // classes, where it sets them, replace default_class and top_class.
  OperatorPolicy policy;
};

// Throws ConfigError when a field is out of range.
void validate(const AllocatorConfig& c);

// The key a message was authenticated with (CURVE on; docs/security.md).
// An endpoint is bound to the key of its hello: its later messages must
// carry the same key, and it may speak only for the key's hosts (its hello's
// host and every flow's source).
struct Principal {
  std::string key;                 // Z85 public key
  std::string name;                // the key file's name, for logs
  std::vector<std::string> hosts;  // host names or IPv4 addresses, as in a hello
  bool any_host = false;           // hosts = ["*"]
  // `relay = true`: a relay's key, which may vouch for the endpoint keys
  // behind it (keyed batches, wire/relay.h).
  bool relay = false;
  // Set only on a vouched endpoint key: the relays that passed its message
  // up. The host must be allowed by each of them too.
  std::vector<const Principal*> via;
};

// `key` as heard through `relays` (innermost first, the one that sent the
// batch last): a copy whose `via` holds them. Refused where one of them is
// not a relay's key (`relay = true`).
Result<Principal> vouched_for(const Principal& key, const std::vector<const Principal*>& relays);

struct Outgoing {
  std::string peer;  // ZeroMQ routing id
  wire::AllocatorMessage message;
};

// A snapshot of one flow, for flowtune-ctl.
struct FlowView {
  std::string endpoint_id;
  std::uint64_t flow_key;
  alloc::HostId src, dst;
  alloc::Path path;
  double weight;
  std::uint64_t bytes;
  std::uint64_t coflow_id;
  std::uint8_t priority_class;
  std::string tenant;            // empty: none
  std::int64_t deadline_left_us;  // 0: none; negative: overdue
  alloc::DeadlineState deadline_state;
  double floor_bps;  // reserved for it (guarantee share and deadline)
  double rate_bps;       // current normalized rate
  double sent_rate_bps;  // what the endpoint was last told
  std::uint64_t age_us;
  // Endpoint keys holding this one flow (a socket written by several
  // processes is one flow); endpoint_id and flow_key name the first.
  std::uint32_t holders;
};

// Sums over every live flow: by class, by tenant and by link. One pass
// over the flow table (Allocator::totals), so the replies that show them
// share one (ControlCache, control.h).
struct FlowTotals {
  struct Sum {
    std::uint64_t flows = 0;
    double rate_bps = 0;
  };
  std::array<Sum, alloc::kNumClasses> by_class{};
  // By TenantId; [0]: flows in no tenant, those whose name came after the
  // table was full (kMaxTenants) among them.
  std::vector<Sum> by_tenant;
  std::vector<std::uint32_t> link_flows;   // by LinkId
  std::vector<double> link_allocated_bps;  // by LinkId: Σ rates told (floors included)
};

struct EndpointView {
  std::string endpoint_id;
  std::string peer;
  alloc::HostId host;
  std::size_t flows;
  std::uint64_t idle_us;  // since the endpoint was last heard
  std::uint64_t messages;
  std::uint64_t errors;
  std::string key_name;  // its CURVE key's name; empty: none
  std::size_t vouched_by = 0;  // relays that vouched for that key
};

class Allocator {
 public:
  // Throws ConfigError for a bad config or a network the engine rejects.
  Allocator(Network network, const AllocatorConfig& config, std::uint64_t epoch, Log* log);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // A message owed to `peer` could not be sent (its queue is full or it left):
  // its rates may be stale, so the next lease refresh carries them all again.
  void on_send_failed(std::string_view peer);

  // One endpoint message (one ZeroMQ frame) from `peer`. Never throws on bad
  // input: it is counted, logged (rate-limited) and answered with an error.
  // With authentication on, `sender` is the key the message came with;
  // `address` is the peer's IP address where the transport has one (TCP),
  // for the per-source quotas.
  void on_message(std::string_view peer, std::span<const std::uint8_t> frame, std::uint64_t now_us,
                  const Principal* sender = nullptr, std::string_view address = {});
  // What on_message charges a frame before decoding it (its source's byte
  // budget, and its weight against the endpoint's message rate).
  static std::size_t decode_cost(std::span<const std::uint8_t> frame);
  // The same from the frame's size and wire::unpacked_bytes().
  static std::size_t decode_cost(std::size_t packed, std::size_t unpacked);
  // A message the server refused before decoding it (its key is not
  // allowed to send endpoint messages): counted, logged and answered.
  void on_unauthorized(std::string_view peer, std::string why, std::uint64_t now_us);
  // A frame that cannot be an endpoint message (wrong frame count): counted
  // and answered.
  void on_bad_frames(std::string_view peer, std::size_t frames, std::uint64_t now_us);

  // After the key lists changed (a reload): an endpoint whose key is in no
  // endpoint list now (lookup gives null), or whose host its key no longer
  // names, is dropped with its flows; the others take their key's current
  // name (policy rules match it). Returns how many were dropped.
  std::size_t revalidate_keys(const std::function<const Principal*(std::string_view key)>& lookup);

  // True while iterations are due: the flow set changed, or prices have not
  // settled since the last change. When false the server may block.
  bool busy() const;
  // One engine iteration, then rate updates for flows that moved.
  void iterate(std::uint64_t now_us);
  // The flowlets started since the last call (config early_rates), told
  // their rate at the current prices; the server sends them before it
  // iterates. Returns how many were told.
  std::size_t tell_early_rates(std::uint64_t now_us);
  // Lease refreshes and endpoint timeouts, on a global tick every
  // lease_refresh_us: one scan of the endpoints per tick, taken
  // config.timer_slice flows at a time (next_timer_us() is now until the
  // scan is done, so the server calls again on its next turn).
  void on_timer(std::uint64_t now_us);
  // When on_timer() next has work (a tick, or a planned deadline passing);
  // UINT64_MAX when nothing is scheduled.
  std::uint64_t next_timer_us() const {
    return std::min(next_timer_us_, policy_.next_due_us());
  }
  // Replaces the operator's policy (SIGHUP): tenants' specs apply at the next
  // iteration, to live flows too; classes and rules to flowlets that start
  // from now on. Throws ConfigError (and keeps the old one) if invalid.
  void set_policy(const OperatorPolicy& p);
  // Replaces the count limits (SIGHUP with --config): max_endpoints,
  // max_flows, max_flows_per_endpoint and the per-source caps on flows,
  // endpoints and hosts, read at each check, so they bind the next start
  // or hello; what is above a lowered limit stays until it ends. Throws
  // ConfigError (and keeps the old ones) if invalid.
  void set_limits(const AllocatorConfig& limits);

  // Moves out the messages owed to endpoints, at most one per endpoint and
  // wire limit (large batches are split).
  std::vector<Outgoing> take_outbox();

  // Hot standby (standby.h). A standby holds nothing and answers every
  // endpoint message with a `standby` error (within the strangers' budget),
  // so endpoints that list several allocators move on.
  bool active() const { return active_; }
  // Tells every endpoint (`standby`, with `why`; at most as many as the
  // reply table for strangers holds, the rest learn from their next
  // message) and drops it with its flows.
  void stand_by(const std::string& why, std::uint64_t now_us);
  // Serves endpoints again, under a new epoch: endpoints that knew this
  // allocator before it stood by resync.
  void activate(std::uint64_t epoch);

  std::uint64_t epoch() const { return epoch_; }
  Counters& counters() { return counters_; }
  const Counters& counters() const { return counters_; }
  const Network& network() const { return network_; }
  const alloc::Engine& engine() const { return *engine_; }
  // For a process that mirrors another's engine (flowtune-allocator --mpi,
  // ranks other than 0): the engine to replay its journal on.
  alloc::Engine& mirror_engine() { return *engine_; }
  const AllocatorConfig& config() const { return config_; }
  std::size_t num_flows() const { return engine_->num_flows(); }
  // After a burst has gone (a flood's flows and endpoints expired): when
  // the tables hold under a quarter of what they have room for (and the
  // room is at least min_room), those indexed by id shrink to the ids
  // still live (live ones keep theirs) and the hash tables to their
  // contents. True when it compacted. O(state): for the server's periodic
  // memory check, not every turn.
  static constexpr std::size_t kMinCompactRoom = 4096;
  bool compact_if_sparse(std::size_t min_room = kMinCompactRoom);
  std::size_t num_endpoints() const { return by_endpoint_id_.size(); }
  // Link capacities as the engine sees them (after threshold and headroom).
  double scheduled_capacity_bps(alloc::LinkId l) const { return engine_->capacity_bps(l); }

  // At most `limit` endpoints, from slot `from` on, in slot order; *next is
  // where the next page starts (UINT32_MAX: none is left).
  std::vector<EndpointView> endpoints(std::uint64_t now_us, std::size_t limit = SIZE_MAX,
                                      std::uint32_t from = 0, std::uint32_t* next = nullptr) const;
  // At most `limit` live flows, from engine id `from` on, in id order; *next
  // is where the next page starts (UINT32_MAX: no flow is left).
  std::vector<FlowView> flows(std::uint64_t now_us, std::size_t limit, alloc::FlowId from = 0,
                              alloc::FlowId* next = nullptr) const;
  // O(flows): for replies that show them, not for every turn.
  FlowTotals totals() const;
  // Added host slots charged to sources (max_hosts_per_source), counted
  // two ways, which must agree: from the slots, and from the sources.
  std::size_t host_charges_by_slot() const;
  std::size_t host_charges_by_source() const;
  // Moves with every change to the flow set (a start, an end, a resync's
  // entry): with the iterations counter, whether totals() may differ.
  std::uint64_t flow_changes() const { return flow_changes_; }
  // Tenants' names and specs, the policy's counters.
  const alloc::PolicyBook& policy() const { return policy_; }

 private:
  struct Endpoint;
  struct Flow;
  struct Source;
  using EndpointIdx = std::uint32_t;
  // One endpoint key holding a flow.
  struct Holder {
    EndpointIdx endpoint;
    std::uint64_t key;
    bool operator==(const Holder&) const = default;
  };
  // (source host, 5-tuple): a socket's identity.
  struct SocketId {
    alloc::HostId src_host = 0;
    wire::FiveTuple tuple;
    bool operator==(const SocketId&) const = default;
  };
  struct SocketIdHash {
    std::size_t operator()(const SocketId& s) const {
      std::uint64_t x = (std::uint64_t{s.src_host} << 32) ^ s.tuple.src_ip;
      x = x * 0x9e3779b97f4a7c15ULL ^ s.tuple.dst_ip;
      x = x * 0x9e3779b97f4a7c15ULL ^
          (std::uint64_t{s.tuple.src_port} << 24 | std::uint64_t{s.tuple.dst_port} << 8 |
           s.tuple.protocol);
      return static_cast<std::size_t>(x ^ (x >> 29));
    }
  };

  // Tenants' weights, deadline floors and the coflow plan into the engine,
  // when changed or due.
  void apply_policy(std::uint64_t now_us);

  // Protocol events (allocator_events.cc).
  void on_hello(std::string_view peer, const wire::Hello& h, std::uint64_t now_us);
  bool rejoin(Endpoint& e, const std::string& peer, const wire::Hello& h, alloc::HostId host,
              std::uint64_t now_us);
  void on_start(Endpoint& e, const wire::FlowletStart& s, std::uint64_t now_us);
  void on_end(Endpoint& e, std::uint64_t key, std::uint64_t now_us);
  void on_resync(Endpoint& e, const std::vector<wire::FlowletStart>& flows, std::uint64_t now_us);
  void on_rate_request(Endpoint& e, const std::vector<std::uint64_t>& keys, std::uint64_t now_us);
  void on_progress(Endpoint& e, const std::vector<wire::FlowProgress>& flows, std::uint64_t now_us);
  void refuse(std::string_view peer, Endpoint* e, Cause c, std::string detail,
              std::uint64_t flow_key, std::uint64_t now_us);
  // Whether a frame is within its source's and its endpoint's budgets,
  // charged decode_cost(); *unpacked: the frame's wire::unpacked_bytes()
  // (left alone when refused).
  bool admit_message(Endpoint* e, std::string_view peer, std::span<const std::uint8_t> frame,
                     std::size_t* unpacked, std::uint64_t now_us);

  // Flow table.
  // Where a flowlet runs: its engine spec, its hosts, and the operator's rule
  // for it (null if none matched).
  struct Resolved {
    alloc::FlowSpec spec;
    alloc::HostId src = 0;
    alloc::HostId dst = 0;
    const PolicyRule* rule = nullptr;
  };
  // Why a flowlet cannot be scheduled: the counter it is charged to and a
  // message for the log.
  struct Refusal {
    Cause cause;
    std::string why;
  };
  std::variant<Resolved, Refusal> resolve(const Endpoint& e, const wire::FlowletStart& s);
  // The host a hello speaks for, and the host a flowlet's destination
  // address names: found, or added with --unknown-hosts add, or why not.
  std::variant<alloc::HostId, Refusal> hello_host(std::string_view peer, const wire::Hello& h);
  std::variant<alloc::HostId, Refusal> destination_host(const Endpoint& e, std::uint32_t ip);
  // True when s names a socket that already has a live flow (joining it adds
  // no engine flow).
  bool joins_live_socket(const Endpoint& e, const wire::FlowletStart& s) const;
  // Joins the live flow of the same socket, or adds an engine flow.
  // rule: the operator's rule resolve() matched (its tenant applies), or null.
  void hold(Endpoint& e, const wire::FlowletStart& s, const alloc::FlowSpec& spec,
            alloc::HostId src, alloc::HostId dst, const PolicyRule* rule, std::uint64_t now_us);
  void add_flow(Endpoint& e, const wire::FlowletStart& s, const alloc::FlowSpec& spec,
                alloc::HostId src, alloc::HostId dst, const PolicyRule* rule,
                std::uint64_t now_us);
  // Drops e's hold on `key`; the engine flow goes with its last holder.
  void release(Endpoint& e, std::uint64_t key);
  void detach(EndpointIdx endpoint, std::uint64_t key, alloc::FlowId id);
  void drop_endpoint(EndpointIdx idx);

  // Host slots (Network::add_host): each endpoint and each flow end holds a
  // reference to its host. A host added while handling an event, or left
  // without references, is released once the event is handled (not at
  // once: the handler may still hold its id), if nothing took it meanwhile.
  // The sources a host slot is charged to (max_hosts_per_source) until it
  // is released; null: none.
  using SourceRef = std::pair<const std::string, Source>*;
  using Chargers = std::array<SourceRef, 3>;
  // A new host in a spare slot, charged to `by`; an Error when a source in
  // `by` is at its quota (kRefused) or no slot is left (kUnavailable).
  Result<alloc::HostId> add_host(std::string_view name, const Chargers& by);
  void ref_host(alloc::HostId h);
  void unref_host(alloc::HostId h);
  void release_unused_hosts();
  void handle_message(std::string_view peer, std::span<const std::uint8_t> frame,
                      std::uint64_t now_us);
  // handle_message()'s steps. The endpoint the connection `peer` speaks
  // for (null: none yet); *taken false, and null, when its routing id
  // names another key's endpoint (the message is dropped).
  Endpoint* sender_endpoint(std::string_view peer, std::uint64_t now_us, bool* taken);
  // One event from *sender (a hello may set it); false when the rest of
  // the message must be dropped.
  bool handle_event(std::string_view peer, const wire::EndpointEvent& ev, Endpoint** sender,
                    std::uint64_t now_us);
  // After a message's events: the endpoint's sequence, and its digest
  // checked unless a flow was refused since flow_refusals.
  void heard_message(std::string_view peer, Endpoint& e, const wire::EndpointMessage& m,
                     std::uint64_t flow_refusals, std::uint64_t now_us);
  // Whether key `who` (null: authentication off) may speak for `host`
  // (named `name` in a hello; empty: by id only).
  bool may_speak_for(const Principal* who, std::optional<alloc::HostId> host,
                     std::string_view name) const;
  // Per-source quotas: a new endpoint on `host` from `peer` (its address_
  // and key, sender_) (empty if within quota, else why not), and one more
  // flow held by e.
  std::string source_full_for_endpoint(alloc::HostId host, std::string_view peer) const;
  std::string source_full_for_flow(const Endpoint& e) const;
  void join_sources(Endpoint& e);
  void leave_sources(Endpoint& e);
  void count_holds(Endpoint& e, std::int64_t delta);
  // The source name of the key a message from `peer` came with: "k:KEY"
  // for sender_ heard directly, empty without CURVE or through a relay
  // (whose key speaks for every endpoint behind it).
  std::string key_source_name(std::string_view peer) const;
  void mark_flows_changed() {
    flows_changed_ = true;
    ++flow_changes_;
  }
  // A source's name for a refusal: "address A", "host H", "key \"NAME\"".
  std::string source_label(std::string_view source) const;
  // The source named `key`, made (with a full budget) if there is none.
  std::pair<const std::string, Source>* source_of(std::string key);
  // Sources without endpoints go once their budget has refilled: before,
  // a peer could get a fresh budget by leaving and saying hello again.
  void sweep_sources(std::uint64_t now_us);
  // on_timer's work for one endpoint: its timeout or its lease refresh.
  void tick_endpoint(EndpointIdx idx, std::uint64_t now_us);

  // raises false: only cuts past the threshold and first rates (a pass
  // that update_interval_us defers).
  void queue_moved_rates(bool raises);
  // Records `rate` as what flow `id`'s holders were told, and keeps its
  // source host's sum (host pacers are told it).
  void set_sent(alloc::FlowId id, std::uint64_t rate);
  // Queues each changed host sum to that host's pacers.
  void tell_pacers();
  // Queues `rate` (bytes/s) for every holder of flow `id`.
  void tell_holders(alloc::FlowId id, std::uint64_t rate);
  // Queues flow `id`'s current rate for e's `key`; when it differs from what
  // was last told, every holder gets it (they must agree within the threshold).
  void retell(Endpoint& e, std::uint64_t key, alloc::FlowId id);
  std::uint32_t holders(alloc::FlowId id) const;

  // Outbox.
  wire::AllocatorMessage& pending(Endpoint& e);
  void schedule_timer(std::uint64_t at_us);
  // The operator's first rule matching a flowlet, or null.
  const PolicyRule* match_rule(const Endpoint& e, alloc::HostId src, alloc::HostId dst,
                               const wire::FlowletStart& s) const;

  AllocatorConfig config_;
  Network network_;
  std::uint64_t epoch_;
  bool active_ = true;
  std::string standby_text_;
  Log* log_;
  // Its changes (every call to a mutator made here and in the policy) go
  // to journal_ with iterate_elsewhere, for the mirrors to replay.
  std::unique_ptr<alloc::JournaledEngine<double>> engine_;
  std::vector<std::uint8_t> journal_;  // the engine's changes, with iterate_elsewhere
  std::unique_ptr<alloc::ParallelDriver> driver_;

  std::vector<std::unique_ptr<Endpoint>> endpoints_;  // by EndpointIdx; null = free
  IdFreeList<EndpointIdx> endpoint_ids_;
  std::unordered_map<std::string, EndpointIdx> by_peer_;
  std::unordered_map<std::string, EndpointIdx> by_endpoint_id_;
  std::vector<Flow> flows_;  // by engine FlowId
  // Bytes/s each flow was last told (0 = nothing yet), by engine FlowId: kept
  // apart from Flow so the per-iteration update check streams 8 bytes a flow.
  std::vector<std::uint64_t> sent_;
  // Holders of shared flows beyond the first, by engine FlowId (a side table:
  // most flows have one holder and never look here).
  std::unordered_map<alloc::FlowId, std::vector<Holder>> co_holders_;
  // Live socket flows by identity, so a second holder finds the first.
  std::unordered_map<SocketId, alloc::FlowId, SocketIdHash> by_socket_;

  // Host pacers: per host (HostId), the sum of sent_ over flows it sources
  // and the pacers registered for it; hosts whose sum moved while they have
  // a pacer wait in pacer_dirty_ for the end of the iteration.
  std::vector<std::uint64_t> host_sent_;
  std::vector<std::uint32_t> host_rated_;  // per host: flows with a rate > 0
  std::unordered_map<alloc::HostId, std::vector<EndpointIdx>> pacers_;
  std::vector<alloc::HostId> pacer_dirty_;
  std::vector<char> pacer_marked_;  // by HostId: already in pacer_dirty_

  std::vector<std::uint32_t> host_refs_;  // by HostId: endpoints and flow ends on it
  std::vector<Chargers> host_chargers_;    // by HostId: who added it, while it is held
  std::vector<alloc::HostId> maybe_unused_;  // added or unreferenced since the last release

  // Replies to peers that are not (or no longer) registered endpoints.
  std::unordered_map<std::string, wire::AllocatorMessage> stray_;
  std::vector<EndpointIdx> dirty_;  // endpoints with a pending message

  // Token bucket shared by peers that are not registered endpoints.
  TokenBucket strangers_;

  std::uint64_t flow_refusals_ = 0;  // refusals naming a flow key, ever
  // The key of the message being handled (on_message's sender), for the
  // event handlers; null with authentication off and between messages.
  const Principal* sender_ = nullptr;
  std::string_view address_;  // its peer address, likewise
  // Flows held (keys in endpoints' tables) and endpoints per source: "h:ID"
  // for a host, "a:ADDRESS" for a peer address, "k:KEY" for a CURVE key.
  // Endpoints point at theirs.
  struct Source {
    std::uint32_t endpoints = 0;
    std::uint32_t holds = 0;
    std::uint32_t hosts = 0;  // spare host slots it added, still held
    // Bytes of input a second (AllocatorConfig::max_source_bytes_per_sec).
    TokenBucket bytes;
  };
  std::unordered_map<std::string, Source> sources_;
  bool flows_changed_ = false;
  std::uint64_t flow_changes_ = 0;  // every flow set change, for flow_changes()
  std::vector<alloc::FlowId> fresh_;  // started this turn, not yet rated (early_rates)
  // Told early, with the rate told, until the next iteration has checked them.
  std::vector<std::pair<alloc::FlowId, std::uint64_t>> told_early_;
  std::uint64_t settle_iterations_ = 0;
  // The first iteration (now_us_) whose moved rates go out (update_interval_us).
  std::uint64_t next_update_us_ = 0;
  std::uint64_t next_timer_us_ = UINT64_MAX;
  // The tick's scan under way (on_timer): the next endpoint (0: none under
  // way), and when it began.
  EndpointIdx timer_cursor_ = 0;
  std::uint64_t timer_scan_start_us_ = 0;
  std::uint64_t now_us_ = 0;  // the latest time the server gave us
  alloc::PolicyBook policy_;
  std::array<std::uint8_t, 2> flag_classes_;  // default and top class before any file
  Counters counters_;
};

}  // namespace flowtune::daemon
