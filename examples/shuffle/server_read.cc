#include "server_internal.h"

// DataPath::kRead and kReadZc: each block read chunk by chunk into the
// connection's buffer, registered with the ring when the kernel takes it,
// and sent from there (kReadZc: zero-copy, IORING_OP_SEND_ZC, from two
// halves so a read fills one while the other waits for its notification).

namespace flowtune::shuffle {

void Server::Impl::post_buffered_read(Conn& c, int file, std::uint64_t at, std::size_t n) {
  if (cfg.data_path == DataPath::kReadZc) {
    const unsigned next = c.half ^ 1U;
    c.read_waits = c.zc_pending[next] > 0;
    if (c.read_waits) return;  // on_notif() posts it
    c.half = next;
  }
  io_uring_sqe* s = sqe();
  if (c.buf_slot >= 0) {
    io_uring_prep_read_fixed(s, file, chunk(c, c.half), static_cast<unsigned>(n), at, c.buf_slot);
  } else {
    io_uring_prep_read(s, file, chunk(c, c.half), static_cast<unsigned>(n), at);
  }
  io_uring_sqe_set_data(s, &c.read_op);
  ++c.inflight;
}

void Server::Impl::post_buffered_send(Conn& c, std::size_t n) {
  const char* p = chunk(c, c.half) + c.buf_sent;
  if (cfg.data_path != DataPath::kReadZc || zero_copy == ZeroCopy::kOff || c.plain_sends) {
    post_send(c, p, n);
    return;
  }
  io_uring_sqe* s = sqe();
  const unsigned flags = zc_report ? kZcReportUsage : 0;
  if (c.buf_slot >= 0) {
    io_uring_prep_send_zc_fixed(s, c.fd, p, n, MSG_NOSIGNAL, flags,
                                static_cast<unsigned>(c.buf_slot));
  } else {
    io_uring_prep_send_zc(s, c.fd, p, n, MSG_NOSIGNAL, flags);
  }
  io_uring_sqe_set_data(s, &c.zc_op[c.half]);
  c.zc_with_report = zc_report;
  ++c.zc_pending[c.half];
  ++c.inflight;
}

void Server::Impl::prepare_buffers() {
  if (buffered(cfg.data_path)) {
    // A sparse table pins nothing: each connection's buffer is registered
    // (and counted against RLIMIT_MEMLOCK) when it first needs it.
    if (const int r = io_uring_register_buffers_sparse(&ring, kBufferSlots); r < 0) {
      no_slot_why = register_error(-r);
    } else {
      for (unsigned k = kBufferSlots; k-- > 0;) free_slots.push_back(k);
    }
  }
  if (cfg.data_path == DataPath::kReadZc) {
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    if (probe == nullptr || !io_uring_opcode_supported(probe, IORING_OP_SEND_ZC)) {
      zero_copy = ZeroCopy::kOff;
      zero_copy_refused("no IORING_OP_SEND_ZC before kernel 6.0", "");
    }
    if (probe != nullptr) io_uring_free_probe(probe);
  }
}

void Server::Impl::buffers_refused(const std::string& why) {
  ++stats.buffers_refused;
  if (buffers_warned) return;
  buffers_warned = true;
  std::fprintf(stderr,
               "flowtune-shuffle: warning: registered buffers refused (%s): plain reads where "
               "refused\n",
               why.c_str());
}

void Server::Impl::zero_copy_refused(const std::string& why, const char* where) {
  if (zc_warned) return;
  zc_warned = true;
  std::fprintf(stderr, "flowtune-shuffle: warning: zero-copy send refused (%s): plain sends%s\n",
               why.c_str(), where);
}

std::string Server::Impl::register_error(int e) {
  return errno_text(e) + (e == ENOMEM ? ", RLIMIT_MEMLOCK: ulimit -l" : "");
}

void Server::Impl::attach_buffer(Conn& c) {
  const unsigned halves = cfg.data_path == DataPath::kReadZc ? 2 : 1;
  const std::size_t bytes =
      (std::size_t{cfg.chunk_bytes} * halves + kPageBytes - 1) / kPageBytes * kPageBytes;
  c.buf.reset(static_cast<char*>(std::aligned_alloc(kPageBytes, bytes)));
  if (c.buf == nullptr) throw std::bad_alloc();
  if (free_slots.empty()) {
    buffers_refused(no_slot_why);
    return;
  }
  if (pinned_bytes + bytes > kMaxPinnedBytes) {
    buffers_refused("more than " + std::to_string(kMaxPinnedBytes >> 20) + " MiB registered");
    return;
  }
  const iovec iov{c.buf.get(), bytes};
  const __u64 tag = 0;
  const int r = io_uring_register_buffers_update_tag(&ring, free_slots.back(), &iov, &tag, 1);
  if (r != 1) {
    buffers_refused(register_error(r < 0 ? -r : EINVAL));
    return;
  }
  c.buf_slot = static_cast<int>(free_slots.back());
  c.buf_pinned = bytes;
  pinned_bytes += bytes;
  free_slots.pop_back();
  ++stats.buffers_registered;
}

void Server::Impl::detach_buffer(Conn& c) {
  if (c.buf_slot < 0) return;
  const iovec none{nullptr, 0};
  const __u64 tag = 0;
  (void)io_uring_register_buffers_update_tag(&ring, static_cast<unsigned>(c.buf_slot), &none, &tag,
                                             1);
  free_slots.push_back(static_cast<unsigned>(c.buf_slot));
  c.buf_slot = -1;
  pinned_bytes -= c.buf_pinned;
  c.buf_pinned = 0;
}

void Server::Impl::on_send_zc(Conn& c, unsigned half, int res, bool more) {
  if (!more) {
    --c.zc_pending[half];
    --c.inflight;
  }
  if (c.dead) return;
  // A failed send sent nothing (TCP returns what it sent before an error).
  if ((res == -EINVAL || res == -EOPNOTSUPP) && zero_copy == ZeroCopy::kUntested) {
    if (c.zc_with_report && zc_report) {
      zc_report = false;  // a kernel before 6.2: zero-copy without the report
    } else if (!c.zc_with_report) {
      zero_copy = ZeroCopy::kOff;
      zero_copy_refused(errno_text(-res), "");
    }
    advance(c);  // the same bytes again, as the state now says
    return;
  }
  if (res == -ENOMEM) {
    // Pages of a buffer that is not registered count against
    // RLIMIT_MEMLOCK while the kernel holds them: this connection sends
    // plainly from now on.
    c.plain_sends = true;
    zero_copy_refused(register_error(-res), " where refused");
    advance(c);
    return;
  }
  if (res > 0) {
    if (zero_copy == ZeroCopy::kUntested) zero_copy = ZeroCopy::kWorks;
    ++stats.zc_sends;
  }
  on_send(c, res);
}

void Server::Impl::on_notif(Conn& c, unsigned half, int res) {
  --c.zc_pending[half];
  --c.inflight;
  if ((static_cast<std::uint32_t>(res) & kZcUsageCopied) != 0) ++stats.zc_copied;
  if (c.read_waits && !c.dead && c.zc_pending[half] == 0 && half != c.half) post_read(c);
}

}  // namespace flowtune::shuffle
