// Bad-input tests: the call must throw titan::Error, and its message must
// hold every expected fragment (the file, key, tensor, value it names).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "titan/core/error.h"

namespace titan::testing {

inline void expect_error(const std::function<void()>& call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected a titan::Error";
  } catch (const Error& error) {
    const std::string message = error.what();
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << message;
  }
}

}  // namespace titan::testing
