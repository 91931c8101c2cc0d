// flowtune-witness: the third voice of a hot standby pair (docs/scale.md,
// "The witness"). Two allocators that cannot hear each other cannot tell a
// dead peer from a partition; with a witness, one may take over from a
// silent peer only while it holds the pair's lease here, and an active one
// that hears neither the witness nor its peer stands down before its lease
// runs out. So at most one side of any partition serves.
//
// The witness holds one lease (wire/witness.h): granted to its holder again
// on each renewal, or to anyone once the holder's lease ran out; refused
// otherwise. It keeps nothing else: restarted, it grants the next claim,
// and the pair's term rule (a higher term wins when two actives meet) ends
// whatever overlap that allows. One thread, one loop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "flowtune/daemon/auth.h"
#include "flowtune/wire/witness.h"

namespace flowtune::witness {

// The rule, as a pure state machine (no sockets, no clock).
class Lease {
 public:
  wire::ClaimAnswer claim(const wire::ClaimRequest& c, std::uint64_t now_us);
  std::uint64_t holder() const { return holder_; }
  std::uint64_t term() const { return term_; }
  // What the holder's lease has left at now_us (0: none, or run out).
  std::uint64_t left_us(std::uint64_t now_us) const { return expires_us_ > now_us ? expires_us_ - now_us : 0; }

 private:
  std::uint64_t holder_ = 0;
  std::uint64_t term_ = 0;  // the holder's, as its last granted claim named it
  std::uint64_t expires_us_ = 0;
};

struct Config {
  std::string listen = "tcp://0.0.0.0:5557";
  // CURVE: the witness's key pair (the pair's own: they speak to it as to
  // each other) and the keys that may claim (NAME.pub files without hosts,
  // as flowtune-ctl's lists). Empty: plain, any peer may claim.
  std::string secret_file, clients_dir;
  double claims_per_sec = 1000;  // claims answered a second; past it and a second's burst, told to retry
};

struct Counters {
  std::uint64_t claims = 0, grants = 0, renewals = 0, refusals = 0, holder_changes = 0;
  std::uint64_t bad_requests = 0, not_authorized = 0, rate_limited = 0;
};

class Witness {
 public:
  // Binds; throws std::runtime_error naming what is wrong.
  Witness(zmq::context_t& ctx, const Config& c);
  ~Witness();
  // Runs until a signal arrives on signal_fd (its number is returned), or
  // for `turns` turns (tests; -1 as signal_fd).
  int run(int signal_fd, std::uint64_t turns = UINT64_MAX);
  // Reads the allow-list again (SIGHUP): "" on success, else why (the old
  // one stays).
  std::string reload();
  const std::string& bound_endpoint() const { return bound_; }
  const Counters& counters() const { return counters_; }

 private:
  void drain();
  std::string answer(std::string_view request, std::uint64_t now_us);
  std::string status(std::uint64_t now_us) const;
  std::uint64_t now_us() const;

  Config config_;
  zmq::socket_t router_;
  std::unique_ptr<zmq::socket_t> zap_;
  std::unique_ptr<daemon::KeyRing> ring_;
  std::string bound_;
  Lease lease_;
  Counters counters_;
  double tokens_;
  std::uint64_t tokens_at_us_ = 0;
  std::int64_t start_ns_;
};

}  // namespace flowtune::witness
