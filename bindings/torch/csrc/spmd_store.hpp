// spmd_store.hpp — torch's c10d::Store interface over an spmd store client,
// so torch programs launched by spmdrun (whose agent hosts an spmd store at
// MASTER_ADDR:MASTER_PORT, not a torch TCPStore) rendezvous through it.
#pragma once

#include <spmd/spmd.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

namespace spmd_torch {

class SpmdStore : public c10d::Store {
 public:
  SpmdStore(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~SpmdStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;

 private:
  void ok(spmd_status st, const char* what, const std::string& key);
  spmd_store* s_ = nullptr;
};

}  // namespace spmd_torch
