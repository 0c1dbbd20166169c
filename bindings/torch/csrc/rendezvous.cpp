// rendezvous.cpp — how the ranks of a torch process group find each other's
// spmd store: group rank 0 starts an spmd store server on a free port and
// publishes "host:port" in torch's store (whatever torch uses: TCPStore,
// FileStore, a PrefixStore over the agent's store); every rank connects to it
// and spmd_group_init does the rest.  This works for every init_method torch
// supports, and for subgroups (each gets its own prefix store from torch).
//
// spmd's store and mesh connections prove a job secret (spmd/auth.h).  Under
// spmdrun (or with SPMD_AUTH_TOKEN / SPMD_AUTH_FILE / SPMD_AUTH=off set for
// every rank) the environment has it; otherwise rank 0 makes one and hands
// it to the others through torch's store, which every rank already trusts
// for the rendezvous (torch's own store is unauthenticated: whoever can reach
// it can join the torch job anyway).
//
// The default group under spmdrun is the exception: it forms on the agent's
// store, which outlives every worker, so that a shrink needs no particular
// rank and a replacement can join (onLauncherStore below).
#include "process_group.hpp"

#include <c10/util/Exception.h>
#include <spmd/auth.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

namespace spmd_torch {

namespace {

// The address other ranks use to reach this host: SPMD_TORCH_ADDR, else
// MASTER_ADDR (set by torchrun, spmdrun, and most mp.spawn programs), else
// the host name.
std::string publicHost() {
  for (const char* var : {"SPMD_TORCH_ADDR", "MASTER_ADDR"}) {
    const char* v = std::getenv(var);
    if (v && *v) return v;
  }
  char name[256] = "";
  if (gethostname(name, sizeof name - 1) == 0 && name[0]) return name;
  return "127.0.0.1";
}

std::string storeKey(const char* what) {
  // torchrun's elastic restarts reuse the agent's store: a fresh key per attempt.
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return std::string("spmd_torch/") + what + "/" + (restart ? restart : "0");
}

// Does the environment already say how this job authenticates?
bool secretFromEnvironment() {
  for (const char* var : {"SPMD_AUTH_TOKEN", "SPMD_AUTH_FILE", "SPMD_AUTH"}) {
    const char* v = std::getenv(var);
    if (v && *v) return true;
  }
  return false;
}

// Rank 0: the token to hand out ("" when the environment decides).  Others:
// adopt rank 0's token unless the environment decides.
void shareSecret(c10d::Store& torchStore, int rank) {
  const std::string key = storeKey("secret");
  if (rank == 0) {
    std::string token;
    if (!secretFromEnvironment()) {
      char t[SPMD_AUTH_TOKEN_CHARS + 1];
      TORCH_CHECK(spmd_auth_new_token(t) == SPMD_OK, "spmd: cannot make a job secret");
      token = t;
      setenv("SPMD_AUTH_TOKEN", t, 1);
    }
    torchStore.set(key, std::vector<uint8_t>(token.begin(), token.end()));
    return;
  }
  std::vector<uint8_t> v = torchStore.get(key);
  if (!v.empty() && !secretFromEnvironment()) setenv("SPMD_AUTH_TOKEN", std::string(v.begin(), v.end()).c_str(), 1);
}

int timeoutMs(std::chrono::milliseconds timeout) {
  return timeout.count() > 0 && timeout.count() < INT_MAX ? (int)timeout.count() : 0;
}

// The key under which the default group's spmd name is published in the
// agent's store.
std::string defaultNameKey() { return storeKey("default_group"); }

// A connection of this rank's own to the agent's store (MASTER_ADDR/PORT).
spmd_store* agentStore(std::chrono::milliseconds timeout) {
  char err[256] = "";
  spmd_store* s = nullptr;
  const char* host = std::getenv("MASTER_ADDR");
  int port = std::atoi(std::getenv("MASTER_PORT"));
  spmd_status st = spmd_store_connect(host, port, timeoutMs(timeout), &s, err, sizeof err);
  TORCH_CHECK(st == SPMD_OK, "spmd: cannot reach spmdrun's store at ", host, ":", port, ": ", err);
  return s;
}

}  // namespace

bool onLauncherStore() {
  const char* run = std::getenv("SPMD_RUN_ID");
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  return run && *run && agent && std::strcmp(agent, "True") == 0 && addr && *addr && port &&
         std::atoi(port) > 0;
}

std::string launcherGroupName(std::chrono::milliseconds timeout) {
  static int made = 0;  // default groups this process made (init, destroy, init again)
  std::string name = made ? "torch." + std::to_string(made) : "torch";
  made++;
  // Every rank publishes it (the same value): none is needed for joiners to find it.
  spmd_store* s = agentStore(timeout);
  spmd_status st = spmd_store_set(s, defaultNameKey().c_str(), name.data(), name.size());
  std::string why = st == SPMD_OK ? "" : spmd_store_errmsg(s);
  spmd_store_close(s);
  TORCH_CHECK(st == SPMD_OK, "spmd: cannot publish the default group's name in spmdrun's store: ", why);
  return name;
}

c10::intrusive_ptr<BackendBase> joinDefaultGroup(std::chrono::milliseconds timeout) {
  TORCH_CHECK(onLauncherStore(),
              "spmd_torch.elastic: a process joins a running group under spmdrun only (its agent's "
              "store: SPMD_RUN_ID, MASTER_ADDR/MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True)");
  spmd_store* s = agentStore(timeout);
  void* v = nullptr;
  size_t vl = 0;
  spmd_status st = spmd_store_get(s, defaultNameKey().c_str(), &v, &vl);
  std::string why = st == SPMD_OK ? "" : spmd_store_errmsg(s);
  spmd_store_close(s);
  TORCH_CHECK(st == SPMD_OK, "spmd_torch.elastic: no running default group to join: ", why);
  std::string name(static_cast<const char*>(v), vl);
  std::free(v);
  spmd_group_opts opts = SPMD_GROUP_OPTS_DEFAULT;
  opts.name = name.c_str();
  opts.timeout_ms = timeoutMs(timeout);
  auto state = std::make_shared<GroupState>();
  char err[512] = "";
  st = spmd_group_join(&opts, &state->group, err, sizeof err);
  TORCH_CHECK(st == SPMD_OK, "spmd_torch.elastic: cannot join the running group: ", err);
  return c10::make_intrusive<ProcessGroupSpmd>(state, timeout);
}

Rendezvous rendezvous(c10d::Store& torchStore, int rank, int size,
                      std::chrono::milliseconds timeout) {
  Rendezvous r;
  char err[256] = "";
  const std::string key = storeKey("store");
  std::string host;
  int port = 0;
  shareSecret(torchStore, rank);
  if (rank == 0) {
    spmd_status st = spmd_store_server_start(nullptr, 0, &r.server, err, sizeof err);
    TORCH_CHECK(st == SPMD_OK, "spmd: rank 0 could not start its store: ", err);
    host = publicHost();
    port = spmd_store_server_port(r.server);
    std::string addr = host + ":" + std::to_string(port);
    torchStore.set(key, std::vector<uint8_t>(addr.begin(), addr.end()));
    host = "127.0.0.1";  // rank 0 talks to its own server over loopback
  } else {
    std::vector<uint8_t> v = torchStore.get(key);
    std::string addr(v.begin(), v.end());
    size_t colon = addr.rfind(':');
    TORCH_CHECK(colon != std::string::npos, "spmd: malformed store address '", addr,
                "' under key ", key);
    host = addr.substr(0, colon);
    port = std::atoi(addr.c_str() + colon + 1);
  }
  (void)size;
  spmd_status st = spmd_store_connect(host.c_str(), port, timeoutMs(timeout), &r.store, err, sizeof err);
  if (st != SPMD_OK) {
    spmd_store_server_stop(r.server);
    TORCH_CHECK(false, "spmd: rank ", rank, " could not reach the group's store at ", host, ":",
                port, ": ", err);
  }
  return r;
}

}  // namespace spmd_torch
