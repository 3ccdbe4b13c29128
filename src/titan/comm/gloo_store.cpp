#include "titan/comm/gloo_store.h"

#include <chrono>
#include <thread>

#include "titan/comm/lighthouse_client.h"
#include "titan/comm/lighthouse_server.h"
#include "titan/core/error.h"

namespace titan::comm {

namespace {

constexpr char kGlooHexDigits[] = "0123456789abcdef";

std::string gloo_store_hex(const std::vector<char>& data) {
  std::string text;
  text.reserve(data.size() * 2 + 1);
  text.push_back('x');  // never empty: the reply format splits on spaces
  for (const char c : data) {
    const auto byte = static_cast<unsigned char>(c);
    text.push_back(kGlooHexDigits[byte >> 4]);
    text.push_back(kGlooHexDigits[byte & 15]);
  }
  return text;
}

std::vector<char> gloo_store_unhex(const std::string& text) {
  const auto digit = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::vector<char> data;
  for (size_t i = 1; i + 1 < text.size(); i += 2) {
    data.push_back(static_cast<char>(digit(text[i]) << 4 | digit(text[i + 1])));
  }
  return data;
}

}  // namespace

LighthouseStore::LighthouseStore(std::string address, std::string prefix, int64_t timeout_ms)
    : address_(std::move(address)), prefix_(std::move(prefix)), timeout_ms_(timeout_ms) {}

void LighthouseStore::set(const std::string& key, const std::vector<char>& data) {
  lighthouse_request(address_, "set " + prefix_ + key + " " + gloo_store_hex(data), timeout_ms_);
}

std::vector<char> LighthouseStore::get(const std::string& key) {
  wait({key});
  const std::string reply = lighthouse_request(address_, "get " + prefix_ + key, timeout_ms_);
  TITAN_CHECK(reply.rfind("value ", 0) == 0, "lighthouse {}: key {} vanished", address_, prefix_ + key);
  return gloo_store_unhex(reply.substr(6));
}

void LighthouseStore::wait(const std::vector<std::string>& keys) { wait(keys, std::chrono::milliseconds(timeout_ms_)); }

void LighthouseStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const int64_t deadline = lighthouse_now_ms() + timeout.count();
  for (const std::string& key : keys) {
    while (lighthouse_request(address_, "get " + prefix_ + key, timeout_ms_) == "missing") {
      TITAN_CHECK(lighthouse_now_ms() < deadline,
                  "lighthouse {}: a quorum member never published {} within {} ms (it died while joining?)", address_,
                  prefix_ + key, timeout.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

}  // namespace titan::comm
