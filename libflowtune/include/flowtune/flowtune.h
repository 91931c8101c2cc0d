/* libflowtune: the Flowtune endpoint library (C API).
 *
 * A service that knows its transfers declares them as flowlets on its TCP
 * sockets; the library tells flowtune-allocator when each flowlet starts and
 * ends, and paces the socket with SO_MAX_PACING_RATE at the rate the
 * allocator sends back. Nothing here waits on the network: calls queue an
 * event for the client's runtime thread and return. When the allocator is
 * absent, slow or dead, sockets simply stay (or go back to) unpaced TCP: the
 * application's bytes are never delayed, failed or lost by Flowtune.
 *
 * Units: bytes, bytes per second (as SO_MAX_PACING_RATE), milliseconds.
 * Errors: every fallible call returns 0 or a negative FT_E* code;
 * ft_strerror() names it.
 * Threads: one ft_client may be used from any number of threads at once,
 * except ft_client_close(), which must not race other calls on the client.
 * Fork: a child process inherits no working client (its runtime thread does
 * not exist there); calls on the parent's client return FT_EFORKED in the
 * child, which opens a client of its own if it needs one.
 */
#ifndef FLOWTUNE_FLOWTUNE_H
#define FLOWTUNE_FLOWTUNE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FT_EXPORT __attribute__((visibility("default")))
#else
#define FT_EXPORT
#endif

enum {
  FT_OK = 0,
  FT_EINVAL = -1,      /* NULL pointer, bad value or config */
  FT_EBADF = -2,       /* not an open socket */
  FT_ENOTTCP = -3,     /* a socket, but not TCP */
  FT_ENOTREG = -4,     /* the fd is not registered with this client */
  FT_EEXIST = -5,      /* the fd is already registered */
  FT_ENOFLOWLET = -6,  /* end or sent without a flowlet in progress */
  FT_ENOMEM = -7,      /* out of memory, or the event queue is full */
  FT_ECONNECT = -8,    /* the allocator endpoint is malformed */
  FT_EFORKED = -9,     /* the client belongs to the parent process */
  FT_ERUNTIME = -10    /* the runtime thread could not start */
};

/* Opaque client: one per process is usual; each owns a runtime thread and a
 * ZeroMQ socket to the allocator. */
typedef struct ft_client ft_client;

typedef struct ft_config {
  /* Set by ft_config_init(); lets newer libraries read older structs. */
  uint32_t struct_size;
  /* ZeroMQ endpoint of flowtune-allocator. Default: $FLOWTUNE_ALLOCATOR,
   * else "tcp://127.0.0.1:5555". Copied by ft_client_open(). A hot standby
   * pair is listed comma-separated ("tcp://a:5555,tcp://b:5555"): the
   * client talks to one at a time and moves to the next when it is gone,
   * stands by, or leaves requests unanswered for two heartbeats
   * (docs/scale.md). Every endpoint listed must be valid (FT_ECONNECT). */
  const char* allocator;
  /* This host's identity in the allocator's topology (a name or an IPv4
   * address). Default: $FLOWTUNE_HOST, else the local address of the first
   * registered socket. Copied. */
  const char* host;
  /* Unique per process incarnation. Default: "<hostname>-<pid>-<random>". */
  const char* endpoint_id;
  /* Flowlets smaller than this are not scheduled (mice, paper §6): they are
   * sent unpaced and the allocator's headroom covers them. Default:
   * $FLOWTUNE_MIN_FLOWLET_BYTES, else 65536. */
  uint64_t min_flowlet_bytes;
  /* No rate above this (bytes/s): the host link. 0 = no cap but the
   * allocator's. */
  uint64_t max_rate_bytes_per_sec;
  /* How often the runtime heartbeats (ms, default 1000); the allocator's
   * endpoint timeout must be longer. The connection to the allocator is
   * pinged every half of it, and remade when silent this long after a
   * ping, so a healed partition is noticed within about a heartbeat. */
  uint32_t heartbeat_ms;
  /* 0 quiet, 1 errors, 2 warnings (default; $FLOWTUNE_LOG), 3 info, 4 debug;
   * to stderr. */
  int log_level;
} ft_config;

/* Strict priority classes (docs/policy.md): 0 is served first, 7 last. */
#define FT_NUM_CLASSES 8
/* "Not set": the allocator applies the operator's default class (4 unless
 * the operator's policy says otherwise). */
#define FT_CLASS_DEFAULT (-1)

/* Per-flowlet options (ft_flowlet_begin) or a socket's defaults for its
 * flowlets (ft_socket_register_opts). Fill with ft_flowlet_opts_init() and
 * set what differs; NULL means defaults.
 *
 * ABI: struct_size lets a newer library read an older caller's struct
 * (fields past struct_size take their defaults). Callers built against the
 * first version of this struct, {float weight; uint64_t coflow_id;} without
 * struct_size, still work: a valid weight's bits read as a size far above
 * any struct's, which the library recognises. */
typedef struct ft_flowlet_opts {
  uint32_t struct_size;   /* sizeof(ft_flowlet_opts), by ft_flowlet_opts_init() */
  float weight;           /* share under contention, default 1; 1e-6..1e6 */
  uint64_t coflow_id;     /* 0 = none */
  int32_t priority_class; /* 0 (highest) .. FT_NUM_CLASSES-1, or FT_CLASS_DEFAULT */
  uint32_t deadline_ms;   /* the flowlet should end this long after its begin; 0 = none */
  const char* tenant;     /* NULL or "" = none (the operator's rule for the
                             endpoint); copied; at most 256 bytes, and at most
                             255 different names per client */
} ft_flowlet_opts;

/* The client's counters, one list: X(name, owner, what it counts). The
 * owner is `session` (the protocol state machine) or `runtime` (the thread
 * that applies rates); the library generates every internal copy from this
 * list, so a counter cannot be added to one and forgotten in another. */
#define FT_STATS_COUNTERS(X)                                                     \
  X(flowlets_started, session, "reported to the allocator")                      \
  X(flowlets_ended, session, "their ends, sent")                                 \
  X(flowlets_coalesced, session, "begins merged into a live flowlet")            \
  X(mice, session, "begins below min_flowlet_bytes")                             \
  X(ends_in_advance, session, "ends sent before the socket drained")             \
  X(rates_applied, runtime, "setsockopt(SO_MAX_PACING_RATE) calls")              \
  X(rates_cleared, runtime, "pacing removed (lease lapsed, end, close)")         \
  X(pacing_failures, runtime, "setsockopt refused")                              \
  X(resyncs, session, "full-state resends (reconnect, new epoch, repairs)")      \
  X(allocator_errors, session, "error reports received")                         \
  X(queue_overflows, runtime, "events that found the queue full (none lost: "     \
                             "they go through the socket's slot instead)")      \
  X(leases_lapsed, session, "caps removed because the allocator fell silent")    \
  X(rate_requests, session, "flows asked for again (no rate applied)")           \
  X(rate_mismatches, session, "the allocator's rate digest differed from ours")  \
  X(flows_refused, session, "flowlets the allocator would not schedule")         \
  X(hellos_refused, session, "hellos answered without an acknowledgement")

/* What the client has done so far (for tests and operators). */
typedef struct ft_stats {
#define FT_STATS_FIELD_(name, owner, what) uint64_t name;
  FT_STATS_COUNTERS(FT_STATS_FIELD_)
#undef FT_STATS_FIELD_
  int connected; /* 1 once the allocator answered this epoch */
} ft_stats;

/* Fills *o with defaults: weight 1, no coflow, FT_CLASS_DEFAULT, no
 * deadline, no tenant. */
FT_EXPORT void ft_flowlet_opts_init(ft_flowlet_opts* o);

/* Fills *cfg with defaults, then the FLOWTUNE_* environment variables. */
FT_EXPORT void ft_config_init(ft_config* cfg);

/* Starts a client and its runtime thread. Returns immediately: the
 * allocator need not be reachable (the client connects in the background).
 * *out is set on success and must be closed with ft_client_close(). */
FT_EXPORT int ft_client_open(const ft_config* cfg, ft_client** out);

/* Removes every pacing cap the client set, tells the allocator its flowlets
 * ended, stops the runtime thread and frees the client. Any thread, once,
 * after all other calls on the client have returned. NULL is FT_EINVAL. */
FT_EXPORT int ft_client_close(ft_client* c);

/* Manages a connected TCP socket. The application keeps ownership of fd and
 * must call ft_socket_unregister() before closing it (or dup2-ing over it);
 * after unregister returns, the library never touches the fd again. */
FT_EXPORT int ft_socket_register(ft_client* c, int fd);
/* As ft_socket_register(), with the options of the socket's flowlets that
 * bring none of their own (ft_flowlet_begin with NULL, ft_flowlet_wrote):
 * how a wrapper puts one process's sockets in different classes or tenants.
 * NULL: defaults. A deadline here applies to each flowlet from its begin. */
FT_EXPORT int ft_socket_register_opts(ft_client* c, int fd, const ft_flowlet_opts* defaults);
/* Ends the socket's flowlet (if any), removes its pacing cap, and forgets it. */
FT_EXPORT int ft_socket_unregister(ft_client* c, int fd);

/* A flowlet of `bytes` bytes is about to be handed to the kernel on fd.
 * A begin while the previous flowlet on fd is still live extends it
 * (back-to-back transfers coalesce into one flowlet, which keeps the first
 * begin's options). opts NULL: the socket's defaults. */
FT_EXPORT int ft_flowlet_begin(ft_client* c, int fd, uint64_t bytes, const ft_flowlet_opts* opts);
/* `bytes` more bytes of the flowlet were handed to the kernel (what send()
 * returned). When all declared bytes are handed over, the client sends the
 * end by itself, in advance: as the kernel's queue will drain within about
 * one control round trip. */
FT_EXPORT int ft_flowlet_sent(ft_client* c, int fd, uint64_t bytes);
/* For callers that learn a flowlet's size only as it is written (the preload
 * shim): `bytes` were just handed to the kernel on fd. Begins a flowlet of
 * that size if none is in progress, else extends it; one event, as cheap as
 * ft_flowlet_sent(). The end follows by itself once the socket's queue
 * drains (advance end). */
FT_EXPORT int ft_flowlet_wrote(ft_client* c, int fd, uint64_t bytes);
/* Ends the flowlet now (e.g. the transfer was abandoned). FT_ENOFLOWLET when
 * no ft_flowlet_begin() on fd came since the last end (a double end); an end
 * the library already sent in advance makes this one a no-op. */
FT_EXPORT int ft_flowlet_end(ft_client* c, int fd);

/* 1 if a flowlet is in progress on fd (begun and not yet ended, by the
 * application or, in advance, by the library), 0 if not, or FT_E*. */
FT_EXPORT int ft_flowlet_active(ft_client* c, int fd);

/* For code that wraps an application's write calls (the preload shim): call
 * with in_call = 1 just before a write on fd and with 0 just after it (after
 * reporting the bytes with ft_flowlet_sent/ft_flowlet_wrote). A blocking
 * write reports its bytes only when it returns, so while one is in progress
 * the library does not end the flowlet, however far the socket's queue
 * drains. With in_call = 1 it returns what ft_flowlet_active would (one
 * lookup for both); with 0, FT_OK. Cheap: an atomic add on the socket. */
FT_EXPORT int ft_socket_writing(ft_client* c, int fd, int in_call);

/* The pacing rate in force on fd (bytes/s; 0 = unpaced). */
FT_EXPORT int ft_socket_rate(ft_client* c, int fd, uint64_t* bytes_per_sec);

FT_EXPORT int ft_client_stats(ft_client* c, ft_stats* out);

/* A static string naming an FT_E* code. */
FT_EXPORT const char* ft_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif /* FLOWTUNE_FLOWTUNE_H */
