// C++ RAII wrapper over flowtune.h: a Client owns an ft_client and closes it;
// a Registration registers a socket and unregisters it before it goes away.
// Calls return the C API's codes (0 or FT_E*); only construction throws.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "flowtune/flowtune.h"

namespace flowtune {

class Client {
 public:
  // Defaults from the FLOWTUNE_* environment; throws std::runtime_error.
  Client() : Client(default_config()) {}
  explicit Client(const ft_config& cfg) {
    if (const int rc = ft_client_open(&cfg, &c_); rc != FT_OK) {
      throw std::runtime_error(std::string("flowtune: ") + ft_strerror(rc));
    }
  }
  ~Client() {
    if (c_ != nullptr) ft_client_close(c_);
  }
  Client(Client&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Client& operator=(Client&& o) noexcept {
    if (this != &o) {
      if (c_ != nullptr) ft_client_close(c_);
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  int register_socket(int fd) { return ft_socket_register(c_, fd); }
  // defaults: for the socket's flowlets that bring no options (see options()).
  int register_socket(int fd, const ft_flowlet_opts& defaults) {
    return ft_socket_register_opts(c_, fd, &defaults);
  }
  int unregister_socket(int fd) { return ft_socket_unregister(c_, fd); }
  int begin(int fd, std::uint64_t bytes, float weight = 1, std::uint64_t coflow_id = 0) {
    ft_flowlet_opts opts = options();
    opts.weight = weight;
    opts.coflow_id = coflow_id;
    return ft_flowlet_begin(c_, fd, bytes, &opts);
  }
  int begin(int fd, std::uint64_t bytes, const ft_flowlet_opts& opts) {
    return ft_flowlet_begin(c_, fd, bytes, &opts);
  }
  // Default options to change: o = Client::options(); o.priority_class = 0; ...
  static ft_flowlet_opts options() {
    ft_flowlet_opts o;
    ft_flowlet_opts_init(&o);
    return o;
  }
  int sent(int fd, std::uint64_t bytes) { return ft_flowlet_sent(c_, fd, bytes); }
  int end(int fd) { return ft_flowlet_end(c_, fd); }
  ft_stats stats() const {
    ft_stats s{};
    ft_client_stats(c_, &s);
    return s;
  }
  ft_client* get() const { return c_; }

  static ft_config default_config() {
    ft_config cfg;
    ft_config_init(&cfg);
    return cfg;
  }

 private:
  ft_client* c_ = nullptr;
};

// Registers fd for its lifetime: destroy it before closing the socket.
class Registration {
 public:
  Registration(Client& c, int fd) : c_(&c), fd_(fd), rc_(c.register_socket(fd)) {}
  ~Registration() {
    if (rc_ == FT_OK) c_->unregister_socket(fd_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  // FT_OK, or why the socket is not managed (it still works, unpaced).
  int status() const { return rc_; }

 private:
  Client* c_;
  int fd_;
  int rc_;
};

}  // namespace flowtune
