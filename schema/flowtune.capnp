@0xac17459ba277593f;
# Flowtune's wire protocol: endpoints (libflowtune, the preload shim) talk to
# flowtune-allocator over ZeroMQ (DEALER -> ROUTER), one Cap'n Proto message
# per ZeroMQ frame. Units on the wire: bytes, bytes/s, microseconds.
#
# Paper §5.1: a lost or reordered message must never leave state wrong. The
# endpoint sends state, not history: after a reconnect, or when a reply
# carries a new allocator epoch, it sends `resync` with every live flowlet.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("flowtune::wire::schema");

# Bumped on any incompatible change; a mismatch is answered with an error.
const protocolVersion :UInt16 = 1;

struct FiveTuple {
  srcIp @0 :UInt32;      # IPv4, host byte order
  dstIp @1 :UInt32;
  srcPort @2 :UInt16;
  dstPort @3 :UInt16;
  protocol @4 :UInt8 = 6;
}

struct HostPair {
  src @0 :UInt32;        # host index in the allocator's topology
  dst @1 :UInt32;
}

struct FlowletStart {
  flowKey @0 :UInt64;    # chosen by the endpoint, unique among its live flows
  endpoints :union {
    tuple @1 :FiveTuple;
    hosts @2 :HostPair;
  }
  bytes @3 :UInt64;      # bytes in the flowlet, 0 = not known
  weight @4 :Float32 = 1.0;
  coflowId @5 :UInt64;   # 0 = none
  # Policy (docs/policy.md). Added in protocol version 1 without a bump:
  # an allocator that predates them reads none of them (every flowlet in the
  # default class, no tenant, no deadline), and one that knows them reads an
  # older endpoint's starts as "not set".
  priorityClass @6 :UInt8 = 255;  # strict priority, 0 (highest) .. 7;
                                  # 255 = not set: the operator's default
  tenant @7 :Text;       # empty = not set: the operator's rule for the endpoint
  deadlineUs @8 :UInt64; # 0 = none; else the time left to the flowlet's
                         # deadline when the message was built, relative so
                         # that no clocks need agree
}

struct Hello {
  endpointId @0 :Text;   # unique per process incarnation
  hostId @1 :Text;       # the host's identity in the topology (name or address)
  hostPacer @2 :Bool;    # the host's aggregate pacer (flowtune-pacer): it holds
                         # no flows and is told the host's rate (hostRate below)
}

# How far a reported flowlet has got, as its endpoint knows it: the shim
# learns a flowlet's size as it is written, so a start carries the first
# write and later writes grow it; and the allocator's estimate of what it
# has sent (from its rates) runs ahead of a flowlet that sends less than
# its rate. Sent only to allocators that said they read it (progressOk).
struct FlowProgress {
  flowKey @0 :UInt64;
  bytes @1 :UInt64;      # the flowlet's size now: all bytes declared or written
  sent @2 :UInt64;       # of those, bytes handed to the kernel so far (<= bytes)
}

struct EndpointEvent {
  union {
    hello @0 :Hello;
    start @1 :FlowletStart;
    end @2 :UInt64;                  # flow key of a flowlet that ended
    heartbeat @3 :Void;
    resync @4 :List(FlowletStart);   # the endpoint's complete live state
    rateRequest @5 :List(UInt64);    # live flows whose rate the endpoint does not
                                     # apply (none received, or its lease lapsed):
                                     # the allocator sends their current rates
    progress @6 :List(FlowProgress); # only after a helloAck with progressOk
  }
}

# What the endpoint's live reported flows add up to once the message's events
# are applied: their number and the sum of a 64-bit mix of their keys. Order
# does not matter and it is kept incrementally on both sides, so the allocator
# checks every message in O(1) and a lost start or end shows at once.
struct StateDigest {
  flows @0 :UInt32;
  keySum @1 :UInt64;
}

struct EndpointMessage {
  version @0 :UInt16;
  seq @1 :UInt64;        # per-endpoint message counter, for diagnostics
  events @2 :List(EndpointEvent);
  digest @3 :StateDigest;  # absent: not checked
}

struct RateUpdate {
  flowKey @0 :UInt64;
  bytesPerSec @1 :UInt64;  # the pacing rate (SO_MAX_PACING_RATE units)
  leaseUs @2 :UInt32;      # the rate lapses this long after receipt
}

enum ErrorCode {
  malformed @0;
  unsupportedVersion @1;
  notRegistered @2;      # events before hello
  unknownFlow @3;
  badValue @4;
  unknownHost @5;
  tooManyFlows @6;
  rateLimited @7;
  stateMismatch @8;      # the message's digest differs from the allocator's view: resync
  standby @9;            # this allocator is a hot standby (docs/scale.md): endpoints
                         # that list several allocators move to the next one
}

struct ErrorReport {
  code @0 :ErrorCode;
  text @1 :Text;
  flowKey @2 :UInt64;    # the flow concerned, 0 = none
}

struct AllocatorMessage {
  version @0 :UInt16;
  epoch @1 :UInt64;        # new on every allocator start: the endpoint resyncs
  rates @2 :List(RateUpdate);
  leaseRefreshUs @3 :UInt32;  # non-zero: every live rate of the endpoint lasts this long again
  errors @4 :List(ErrorReport);
  # With a lease refresh: what the allocator last told the endpoint, as a
  # digest of (flow key, rate) over its rated flows, and the seq of the
  # endpoint's last message it had handled. An endpoint whose own digest
  # differs, when ackSeq is its latest message (nothing in flight), lost an
  # update: it asks for its rates again.
  rateDigest @6 :StateDigest;
  ackSeq @7 :UInt64;
  helloAck @5 :Bool;       # a hello in the message answered was accepted: the
                           # endpoint is registered (a refused one gets errors only)
  # To a host pacer, in every message: bytes/s, the sum of the rates last
  # told to every flow whose source is its host (0: none rated). The host
  # never needs to emit more; the pacer shapes its egress to it.
  hostRate @8 :UInt64;
  # With hostRate: how many of those flows have a rate (> 0). The pacer
  # sizes the host's packets by its flows' mean rate (docs/pacer.md).
  hostFlows @9 :UInt32;
  # With helloAck: this allocator reads progress events. Older allocators
  # refuse a message holding an event they do not know, so an endpoint sends
  # progress only when its hello was answered with this set.
  progressOk @10 :Bool;
}
