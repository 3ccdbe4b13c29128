// The headers nearly every translation unit parses, precompiled once per
// target (CMake's target_precompile_headers, TITAN_PCH): the standard
// library's, fmt and nlohmann/json. Parsing them took about 4 s of the 6 s a
// typical unity batch spends in headers (g++ 12). Titan's own headers stay
// out: they change often, and each layer may see only its own (layer_include).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
