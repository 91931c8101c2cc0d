// Authentication (docs/security.md): the allow-lists as files, and the real
// daemon with CURVE on, talked to by endpoints and flowtune-ctl clients that
// hold allowed keys, unknown keys, or none.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "daemon_harness.h"
#include "flowtune/daemon/auth.h"

namespace flowtune::daemon::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kWaitMs = 3000;
constexpr int kSilenceMs = 300;  // long enough for a refused handshake to have answered

// ---- the allow-lists as files ----

class KeyRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"clients", "ctl", "admin"}) fs::create_directory(dir_.path() + "/" + d);
    config_.secret_file = dir_.path() + "/unused";
    config_.clients_dir = dir_.path() + "/clients";
    config_.ctl_dir = dir_.path() + "/ctl";
    config_.admin_dir = dir_.path() + "/admin";
  }
  std::string clients() const { return config_.clients_dir; }
  // Loads the lists expecting a ConfigError that mentions `words`.
  void expect_refused(const std::string& words) {
    try {
      (void)KeyRing::load(config_);
      ADD_FAILURE() << "loaded; expected an error about " << words;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
  TempDir dir_;
  AuthConfig config_;
};

TEST_F(KeyRingTest, RolesComeFromTheListsAKeyIsIn) {
  // Given: an endpoint key, a reader, an admin, and a key both endpoint and admin.
  const auto h1 = make_key(dir_.path(), "h1", {clients()}, R"(["h1", "10.0.0.2"])", "");
  const auto reader = make_key(dir_.path(), "reader", {config_.ctl_dir}, "", "");
  const auto admin = make_key(dir_.path(), "admin", {config_.admin_dir}, "", "");
  const auto both = make_key(dir_.path(), "both", {clients(), config_.admin_dir}, R"(["*"])", "");
  write_file(clients() + "/README", "not a key: ignored");
  // When
  const KeyRing ring = KeyRing::load(config_);
  // Expect
  EXPECT_EQ(ring.size(), 4u);
  const KeyEntry* e = ring.find(h1.own.public_key);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->roles, kRoleEndpoint);
  EXPECT_EQ(e->principal.name, "h1");
  EXPECT_EQ(e->principal.hosts, (std::vector<std::string>{"h1", "10.0.0.2"}));
  EXPECT_FALSE(e->principal.any_host);
  EXPECT_EQ(ring.find(reader.own.public_key)->roles, kRoleRead);
  EXPECT_EQ(ring.find(admin.own.public_key)->roles, kRoleRead | kRoleAdmin);
  const KeyEntry* b = ring.find(both.own.public_key);
  EXPECT_EQ(b->roles, kRoleEndpoint | kRoleRead | kRoleAdmin);
  EXPECT_TRUE(b->principal.any_host);
  EXPECT_EQ(ring.count(kRoleEndpoint), 2u);
  EXPECT_EQ(ring.count(kRoleRead), 3u);
  EXPECT_EQ(ring.count(kRoleAdmin), 2u);
  EXPECT_EQ(ring.find(curve::generate().public_key), nullptr);
  EXPECT_FALSE(e->principal.relay);
}

TEST_F(KeyRingTest, OnlyAnEndpointKeyMayBeARelaysAndSaysSoWithABoolean) {
  const auto r = make_key(dir_.path(), "rack", {clients()}, "[\"h1\"]\nrelay = true", "");
  EXPECT_TRUE(KeyRing::load(config_).find(r.own.public_key)->principal.relay);
  write_file(clients() + "/rack.pub", "public-key = \"" + r.own.public_key + "\"\nhosts = [\"h1\"]\nrelay = 1\n");
  expect_refused("rack.pub:3: relay: expected true or false");
  fs::remove(clients() + "/rack.pub");
  make_key(dir_.path(), "reader", {config_.ctl_dir}, "", "");
  write_file(config_.ctl_dir + "/reader.pub", "public-key = \"" + r.own.public_key + "\"\nrelay = true\n");
  expect_refused("relay: only an endpoint key (--curve-clients) can be a relay's");
}

TEST_F(KeyRingTest, MistakesAreRefusedWithTheFileAndTheReason) {
  const auto h1 = make_key(dir_.path(), "h1", {clients()}, "", "");
  expect_refused("h1.pub: hosts: an endpoint key must name the hosts");
  write_file(clients() + "/h1.pub", "public-key = \"" + h1.own.public_key + "\"\nhosts = []\n");
  expect_refused("hosts: expected a list of 1 to 4096");
  write_file(clients() + "/h1.pub", "public-key = \"short\"\nhosts = [\"h1\"]\n");
  expect_refused("h1.pub:1: public-key: a key is 40 Z85 characters");
  write_file(clients() + "/h1.pub", "public-key = \"" + h1.own.public_key +
                                        "\"\nsecret-key = \"" + h1.own.secret_key + "\"\nhosts = [\"h1\"]\n");
  expect_refused("an allow-list holds public keys only");
  write_file(clients() + "/h1.pub", "public-key = \"" + h1.own.public_key + "\"\nhost = [\"h1\"]\n");
  expect_refused("unknown key");
  write_file(clients() + "/h1.pub", "public-key = \"" + h1.own.public_key + "\"\nhosts = [\"h1\"]\n");
  write_file(clients() + "/copy.pub", "public-key = \"" + h1.own.public_key + "\"\nhosts = [\"h2\"]\n");
  expect_refused("the same key as copy.pub");
  fs::remove(clients() + "/copy.pub");
  EXPECT_EQ(KeyRing::load(config_).size(), 1u);
  config_.ctl_dir = dir_.path() + "/missing";
  expect_refused("cannot open the key directory");
}

TEST(CurveKeys, SecretFilesArePrivateAndConsistent) {
  TempDir dir;
  const curve::KeyPair k = curve::generate();
  const curve::KeyPair other = curve::generate();
  const std::string path = dir.path() + "/k.key";
  // Why a key file does not load ("" where it does).
  const auto why = [](const std::string& p, bool need_secret) {
    const Result<curve::KeyPair> r = curve::load_key_file(p, need_secret);
    return r ? std::string() : r.error().message;
  };
  write_file(path, "public-key = \"" + k.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n", 0644);
  EXPECT_NE(why(path, true).find("private to its owner"), std::string::npos);
  ::chmod(path.c_str(), 0600);
  EXPECT_EQ(why(path, true), "");
  const curve::KeyPair out = curve::load_key_file(path, true).value();
  EXPECT_EQ(out.public_key, k.public_key);
  EXPECT_EQ(out.secret_key, k.secret_key);
  write_file(path, "public-key = \"" + other.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n", 0600);
  EXPECT_NE(why(path, true).find("not the secret key's public half"), std::string::npos);
  write_file(path, "# only a comment\n", 0600);
  EXPECT_NE(why(path, false).find("holds no public-key"), std::string::npos);
  EXPECT_NE(why(dir.path(), false).find("not a regular file"), std::string::npos);
  std::string pub;
  EXPECT_EQ(curve::read_public_key(k.public_key, &pub), "");  // the key itself
  EXPECT_EQ(pub, k.public_key);
  // A key file whose path is 40 characters of valid Z85 is read as a file.
  std::string path40;
  for (char c = 'a'; c <= 'z' && path40.empty(); ++c) {
    std::string p = dir.path() + "/";
    p += std::string(curve::kZ85KeyChars - p.size(), c);
    if (p.size() == curve::kZ85KeyChars && curve::key_error(p).empty()) path40 = p;
  }
  ASSERT_FALSE(path40.empty()) << "no 40-character path in " << dir.path() << " decodes as Z85";
  write_file(path40, "public-key = \"" + other.public_key + "\"\n");
  EXPECT_EQ(curve::read_public_key(path40, &pub), "");
  EXPECT_EQ(pub, other.public_key);
}

template <class Pred>
bool eventually(Pred p, int ms = kWaitMs) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < deadline) {
    if (p()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return p();
}

// ---- the daemon with CURVE on ----

class CurveDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* d : {"clients", "ctl", "admin"}) fs::create_directory(dir_.path() + "/" + d);
    const curve::KeyPair server = curve::generate();
    server_ = server.public_key;
    write_file(dir_.path() + "/server.key", "public-key = \"" + server.public_key +
                                                "\"\nsecret-key = \"" + server.secret_key + "\"\n",
               0600);
    h1_ = key("h1", {list("clients")}, R"(["h1"])");
    any_ = key("any", {list("clients")}, R"(["*"])");
    reader_ = key("reader", {list("ctl")});
    admin_ = key("admin", {list("admin")});
    daemon_.set_control_keys(admin_);
    daemon_.start(listen_, {"--hosts", "8", "--host-gbps", "1", "--log-level", "debug",
                            "--curve-secret", dir_.path() + "/server.key", "--curve-clients",
                            list("clients"), "--curve-ctl", list("ctl"), "--curve-admin",
                            list("admin")});
  }
  std::string list(const std::string& name) const { return dir_.path() + "/" + name; }
  curve::ClientKeys key(const std::string& name, const std::vector<std::string>& lists,
                        const std::string& hosts = "") {
    return make_key(dir_.path(), name, lists, hosts, server_);
  }
  json auth() { return daemon_.status()["auth"]; }
  std::uint64_t refused(const std::string& cause) {
    return daemon_.status()["counters"]["errors"].value(cause, std::uint64_t{0});
  }
  // A control request with `keys`; nullopt when no reply came.
  std::optional<json> control_as(const curve::ClientKeys& keys, const std::string& request) {
    zmq::context_t ctx(1);
    return control_request(ctx, listen_, &keys, request);
  }
  // The first error an endpoint is told within the wait, or "".
  static std::string first_error(Endpoint& e) {
    std::string text;
    e.wait_for([&](const wire::AllocatorMessage& m) {
      if (!m.errors.empty()) text = m.errors[0].text;
      return !m.errors.empty();
    }, kWaitMs);
    return text;
  }

  TempDir dir_;
  std::string server_;
  curve::ClientKeys h1_, any_, reader_, admin_;
  std::string listen_ = unique_endpoint();
  DaemonProcess daemon_;
};

TEST_F(CurveDaemonTest, OnlyAllowedKeysAreHeardAndRefusalsAreCounted) {
  // Given: a peer without CURVE, one with a key in no list, one allowed.
  Endpoint plain(listen_);
  const curve::ClientKeys stranger{server_, curve::generate(), {}};
  Endpoint unknown(listen_, &stranger);
  Endpoint allowed(listen_, &h1_);
  // When: each says hello and starts a flow from h1.
  for (Endpoint* e : {&plain, &unknown, &allowed}) {
    e->send({wire::Hello{"ep-" + std::to_string(reinterpret_cast<std::uintptr_t>(e)), "h1"},
             host_flow(1, 1, 2)});
  }
  // Expect: only the allowed key gets a rate; the unknown key is told why,
  // the peer without CURVE gets nothing at all.
  EXPECT_TRUE(allowed.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs)) << daemon_.log();
  EXPECT_FALSE(plain.receive(kSilenceMs));
  EXPECT_NE(first_error(unknown).find("in no allow-list"), std::string::npos);
  EXPECT_FALSE(unknown.rate(1));
  const json a = auth();
  EXPECT_EQ(a["mode"], "curve");
  // A peer without CURVE is seen as such, or as a failed handshake when it
  // hung up first (it notices the mismatch too).
  EXPECT_GE(a["unauthenticated"].get<int>() + a["bad_handshakes"].get<int>(), 1) << a;
  EXPECT_GE(a["unknown_keys"].get<int>(), 1) << a;
  EXPECT_GE(a["accepted"].get<int>(), 2) << a;  // the endpoint and this status request
  EXPECT_EQ(daemon_.status()["endpoints"], 1);
  EXPECT_NE(daemon_.log().find("is in no allow-list"), std::string::npos) << daemon_.log();
}

TEST_F(CurveDaemonTest, AKeyForOneHostCannotSpeakForAnother) {
  Endpoint e(listen_, &h1_);
  // A hello for h2 with h1's key is refused whole.
  e.send({wire::Hello{"ep-1", "h2"}});
  EXPECT_NE(first_error(e).find("may not speak for host \"h2\""), std::string::npos);
  EXPECT_EQ(daemon_.status()["endpoints"], 0);
  // Registered as h1, a flow from h2 is refused and one from h1 is rated.
  e.clear_history();
  e.send({wire::Hello{"ep-1", "h1"}, host_flow(5, 2, 3), host_flow(6, 1, 3)});
  EXPECT_TRUE(e.wait_for_rate(6, [](auto r) { return r > 0; }, kWaitMs));
  auto names_5 = [](const wire::AllocatorMessage& m) {
    return std::any_of(m.errors.begin(), m.errors.end(), [](const auto& err) {
      return err.flow_key == 5 && err.text.find("may not speak for host h2") != std::string::npos;
    });
  };
  const bool refused_5 = std::any_of(e.history().begin(), e.history().end(), names_5) ||
                         e.wait_for(names_5, kWaitMs);
  EXPECT_TRUE(refused_5);
  EXPECT_FALSE(e.rate(5));
  EXPECT_EQ(daemon_.status()["flows"], 1);
  EXPECT_EQ(refused("not_authorized"), 2u);
  // A key bound to any host may speak for h2.
  Endpoint wide(listen_, &any_);
  wide.send({wire::Hello{"ep-2", "h2"}, host_flow(7, 2, 3)});
  EXPECT_TRUE(wide.wait_for_rate(7, [](auto r) { return r > 0; }, kWaitMs));
}

TEST_F(CurveDaemonTest, AnEndpointIsBoundToTheKeyThatRegisteredIt) {
  Endpoint owner(listen_, &any_);
  owner.send({wire::Hello{"ep-x", "h1"}, host_flow(1, 1, 2)});
  ASSERT_TRUE(owner.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs));
  // Another allowed key may not take over (or replace) the endpoint id.
  Endpoint other(listen_, &h1_);
  other.send({wire::Hello{"ep-x", "h1"}});
  EXPECT_NE(first_error(other).find("registered under another key"), std::string::npos);
  const json s = daemon_.status();
  EXPECT_EQ(s["endpoints"], 1);
  EXPECT_EQ(s["flows"], 1);
}

TEST_F(CurveDaemonTest, KeysRotateWithoutARestart) {
  Endpoint old_key(listen_, &h1_);
  old_key.send({wire::Hello{"ep-old", "h1"}, host_flow(1, 1, 2)});
  ASSERT_TRUE(old_key.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs));
  // Given: a new key for h1, not yet in the list the daemon read; an
  // endpoint holding it connects and is refused.
  const curve::ClientKeys next = key("h1-next", {});
  Endpoint early(listen_, &next);
  early.send({wire::Hello{"ep-new", "h1"}});
  EXPECT_NE(first_error(early).find("in no allow-list"), std::string::npos);
  // When: the key is added and the daemon reloads (SIGHUP).
  write_file(list("clients") + "/h1-next.pub",
             "public-key = \"" + next.own.public_key + "\"\nhosts = [\"h1\"]\n");
  ::kill(daemon_.pid(), SIGHUP);
  // Expect: the same connection is heard from then on (libzmq 4.3 would
  // never reconnect a connection refused at its handshake).
  ASSERT_TRUE(eventually([&] { return auth()["reloads"] == 1; }));
  early.send({wire::Hello{"ep-new", "h1"}, host_flow(2, 1, 3)});
  EXPECT_TRUE(early.wait_for_rate(2, [](auto r) { return r > 0; }, kWaitMs)) << daemon_.log();
  // When: the old key is removed and flowtune-ctl (admin) reloads.
  fs::remove(list("clients") + "/h1.pub");
  const auto r = daemon_.control("reload");
  ASSERT_TRUE(r);
  EXPECT_NE((*r)["reload"].get<std::string>().find("keys: 2 endpoint"), std::string::npos) << *r;
  EXPECT_NE((*r)["reload"].get<std::string>().find("1 endpoints dropped"), std::string::npos) << *r;
  // Expect: the old key's endpoint and flow are gone, and its live
  // connection is no longer heard.
  const json s = daemon_.status();
  EXPECT_EQ(s["endpoints"], 1);
  EXPECT_EQ(s["flows"], 1);
  old_key.clear_history();
  old_key.send({wire::Hello{"ep-old", "h1"}, host_flow(1, 1, 2)});
  EXPECT_NE(first_error(old_key).find("in no allow-list"), std::string::npos);
  EXPECT_EQ(daemon_.status()["flows"], 1);
  EXPECT_EQ(auth()["reloads"], 2);
}

TEST_F(CurveDaemonTest, AReloadThatNarrowsAKeysHostsDropsItsEndpointsElsewhere) {
  Endpoint e(listen_, &any_);
  e.send({wire::Hello{"ep-any", "h4"}, host_flow(1, 4, 5)});
  ASSERT_TRUE(e.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs));
  write_file(list("clients") + "/any.pub",
             "public-key = \"" + any_.own.public_key + "\"\nhosts = [\"h1\"]\n");
  const auto r = daemon_.control("reload");
  ASSERT_TRUE(r);
  EXPECT_NE((*r)["reload"].get<std::string>().find("1 endpoints dropped"), std::string::npos) << *r;
  EXPECT_EQ(daemon_.status()["flows"], 0);
  e.clear_history();
  e.send({wire::Hello{"ep-any", "h4"}});
  EXPECT_NE(first_error(e).find("may not speak for host \"h4\""), std::string::npos);
}

TEST_F(CurveDaemonTest, ASocketsFlowIsJoinedOnlyUnderItsHoldersKey) {
  // Given: a socket's flow held by an endpoint under key "any".
  wire::FlowletStart sock;
  sock.flow_key = 1;
  sock.endpoints = wire::FiveTuple{0x0a000001, 0x0a000002, 40000, 80, 6};
  sock.bytes = 10 << 20;
  Endpoint holder(listen_, &any_);
  holder.send({wire::Hello{"ep-a", "h1"}, sock});
  ASSERT_TRUE(holder.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs)) << daemon_.log();
  // When: an endpoint on the same host under another key names the socket.
  Endpoint other(listen_, &h1_);
  sock.flow_key = 7;
  other.send({wire::Hello{"ep-b", "h1"}, sock});
  // Expect: refused (it would take the holder's class and rates); under the
  // holder's key (a forked child) it joins.
  EXPECT_NE(first_error(other).find("held under another key"), std::string::npos);
  Endpoint child(listen_, &any_);
  sock.flow_key = 9;
  child.send({wire::Hello{"ep-c", "h1"}, sock});
  EXPECT_TRUE(child.wait_for_rate(9, [](auto r) { return r > 0; }, kWaitMs));
  EXPECT_EQ(daemon_.status()["counters"]["flows_joined"], 1);
}

TEST_F(CurveDaemonTest, ReadersReadAdminsReloadEndpointsDoNeither) {
  auto status = control_as(reader_, "status");
  ASSERT_TRUE(status);
  EXPECT_EQ((*status)["auth"]["keys"]["ctl"], 2) << *status;  // reader and admin
  auto reload = control_as(reader_, "reload");
  ASSERT_TRUE(reload);
  EXPECT_NE((*reload)["error"].get<std::string>().find("admin key"), std::string::npos);
  auto as_endpoint = control_as(h1_, "status");
  ASSERT_TRUE(as_endpoint);
  EXPECT_NE((*as_endpoint)["error"].get<std::string>().find("not a flowtune-ctl key"),
            std::string::npos);
  // An admin's reload that meets a broken list keeps the old lists.
  write_file(list("clients") + "/broken.pub", "public-key = \"nope\"\nhosts = [\"h3\"]\n");
  auto bad = control_as(admin_, "reload");
  ASSERT_TRUE(bad);
  EXPECT_NE((*bad)["reload"].get<std::string>().find("keys refused, the old ones stay"),
            std::string::npos) << *bad;
  const json a = auth();
  EXPECT_EQ(a["reload_failures"], 1);
  EXPECT_NE(a["last_reload_error"].get<std::string>().find("broken.pub"), std::string::npos);
  Endpoint still(listen_, &h1_);
  still.send({wire::Hello{"ep-1", "h1"}, host_flow(1, 1, 2)});
  EXPECT_TRUE(still.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs));
  EXPECT_EQ(refused("not_authorized"), 2u);  // the reader's reload, the endpoint key's status
}

TEST(CurvePolicy, ARuleBindsAClassCeilingAndATenantToAKey) {
  // Given: a rule for flowlets of endpoints registered with key "h1".
  TempDir dir;
  fs::create_directory(dir.path() + "/clients");
  const curve::KeyPair server = curve::generate();
  write_file(dir.path() + "/server.key", "public-key = \"" + server.public_key +
                                             "\"\nsecret-key = \"" + server.secret_key + "\"\n",
             0600);
  const auto h1 = make_key(dir.path(), "h1", {dir.path() + "/clients"}, R"(["*"])", server.public_key);
  const auto h2 = make_key(dir.path(), "h2", {dir.path() + "/clients"}, R"(["*"])", server.public_key);
  write_file(dir.path() + "/policy.toml",
             "[[rule]]\nkeys = [\"h1\"]\ntop_class = 3\ntenant = \"batch\"\n");
  const std::string listen = unique_endpoint();
  DaemonProcess daemon;
  daemon.set_control_keys(h1);
  daemon.start(listen, {"--hosts", "8", "--curve-secret", dir.path() + "/server.key",
                        "--curve-clients", dir.path() + "/clients", "--curve-admin",
                        dir.path() + "/clients", "--policy", dir.path() + "/policy.toml"});
  // When: both keys ask for class 0, from the same host.
  Endpoint a(listen, &h1), b(listen, &h2);
  wire::FlowletStart fa = host_flow(1, 1, 2), fb = host_flow(2, 1, 3);
  fa.priority_class = fb.priority_class = 0;
  a.send({wire::Hello{"ep-a", "h1"}, fa});
  b.send({wire::Hello{"ep-b", "h1"}, fb});
  ASSERT_TRUE(a.wait_for_rate(1, [](auto r) { return r > 0; }, kWaitMs)) << daemon.log();
  ASSERT_TRUE(b.wait_for_rate(2, [](auto r) { return r > 0; }, kWaitMs));
  // Expect: h1's flowlet is lowered to class 3 and counted against "batch";
  // h2's is not (the rule names a key, not the host both speak for).
  const auto flows = daemon.control("flows");
  ASSERT_TRUE(flows);
  ASSERT_EQ((*flows)["flows"].size(), 2u) << *flows;
  for (const json& f : (*flows)["flows"]) {
    const bool of_a = f["endpoint"] == "ep-a";
    EXPECT_EQ(f["class"], of_a ? 3 : 0) << f;
    EXPECT_EQ(f["tenant"], of_a ? "batch" : "") << f;
  }
}

TEST(CurveCli, KeyMistakesStopTheStart) {
  TempDir dir;
  fs::create_directory(dir.path() + "/clients");
  const curve::KeyPair k = curve::generate();
  const std::string secret = dir.path() + "/server.key";
  write_file(secret, "public-key = \"" + k.public_key + "\"\nsecret-key = \"" + k.secret_key + "\"\n", 0640);
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string(FT_ALLOCATOR_BINARY) + " --check-config " + args + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    const int status = ::pclose(p);
    return std::make_pair(WEXITSTATUS(status), out);
  };
  auto [rc, out] = run("--curve-clients " + dir.path() + "/clients");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("need --curve-secret"), std::string::npos) << out;
  std::tie(rc, out) = run("--curve-secret " + secret);
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("needs --curve-clients"), std::string::npos) << out;
  std::tie(rc, out) = run("--curve-secret " + secret + " --curve-clients " + dir.path() + "/clients");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("private to its owner"), std::string::npos) << out;
  ::chmod(secret.c_str(), 0600);
  std::tie(rc, out) = run("--curve-secret " + secret + " --curve-clients " + dir.path() + "/clients");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("CURVE: 0 endpoint keys"), std::string::npos) << out;
}

}  // namespace
}  // namespace flowtune::daemon::testing
