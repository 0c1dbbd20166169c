// spmd_store.cpp — see spmd_store.hpp.
#include "spmd_store.hpp"

#include <c10/util/Exception.h>

#include <climits>
#include <cstdlib>

namespace spmd_torch {

namespace {
int toMs(std::chrono::milliseconds t) {
  return t.count() > 0 && t.count() < INT_MAX ? (int)t.count() : 0;
}
std::vector<uint8_t> take(void* v, size_t len) {
  std::vector<uint8_t> out((uint8_t*)v, (uint8_t*)v + len);
  std::free(v);
  return out;
}
}  // namespace

SpmdStore::SpmdStore(const std::string& host, int port, std::chrono::milliseconds timeout)
    : c10d::Store(timeout) {
  char err[256] = "";
  spmd_status st = spmd_store_connect(host.c_str(), port, toMs(timeout), &s_, err, sizeof err);
  TORCH_CHECK(st == SPMD_OK, "spmd store at ", host, ":", port, ": ", err);
}

SpmdStore::~SpmdStore() { spmd_store_close(s_); }

void SpmdStore::ok(spmd_status st, const char* what, const std::string& key) {
  if (st == SPMD_OK) return;
  std::string msg = std::string("spmd store ") + what + " '" + key + "': " + spmd_store_errmsg(s_);
  if (st == SPMD_ERR_TIMEOUT) throw std::runtime_error(msg + " (timeout)");
  TORCH_CHECK(false, msg);
}

void SpmdStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  ok(spmd_store_set(s_, key.c_str(), value.data(), value.size()), "set", key);
}

std::vector<uint8_t> SpmdStore::compareSet(const std::string& key,
                                           const std::vector<uint8_t>& expected,
                                           const std::vector<uint8_t>& desired) {
  void* cur = nullptr;
  size_t len = 0;
  ok(spmd_store_compare_set(s_, key.c_str(), expected.empty() ? nullptr : expected.data(),
                            expected.size(), desired.data(), desired.size(), &cur, &len),
     "compare_set", key);
  return take(cur, len);
}

std::vector<uint8_t> SpmdStore::get(const std::string& key) {
  void* v = nullptr;
  size_t len = 0;
  ok(spmd_store_get(s_, key.c_str(), &v, &len), "get", key);
  return take(v, len);
}

int64_t SpmdStore::add(const std::string& key, int64_t value) {
  int64_t r = 0;
  ok(spmd_store_add(s_, key.c_str(), value, &r), "add", key);
  return r;
}

bool SpmdStore::deleteKey(const std::string& key) {
  int deleted = 0;
  ok(spmd_store_delete(s_, key.c_str(), &deleted), "delete", key);
  return deleted != 0;
}

bool SpmdStore::check(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) {
    void* v = nullptr;
    size_t len = 0;
    spmd_status st = spmd_store_try_get(s_, k.c_str(), &v, &len);
    if (st == SPMD_ERR_NOTFOUND) return false;
    ok(st, "check", k);
    std::free(v);
  }
  return true;
}

int64_t SpmdStore::getNumKeys() {
  int64_t n = 0;
  ok(spmd_store_num_keys(s_, &n), "num_keys", "");
  return n;
}

void SpmdStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void SpmdStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<const char*> ks;
  for (const std::string& k : keys) ks.push_back(k.c_str());
  ok(spmd_store_wait(s_, ks.data(), ks.size(), toMs(timeout)), "wait",
     keys.empty() ? "" : keys[0]);
}

void SpmdStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  spmd_store_set_timeout(s_, toMs(timeout));
}

}  // namespace spmd_torch
