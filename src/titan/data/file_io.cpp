#include "titan/data/file_io.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "titan/core/error.h"

namespace titan::data {

std::string read_file(const std::filesystem::path& path, std::string_view what) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  TITAN_CHECK(std::filesystem::exists(status), "{} file {}: no such file", what, path.string());
  TITAN_CHECK(!std::filesystem::is_directory(status), "{} file {}: is a directory, expected a file", what,
              path.string());
  std::FILE* file = std::fopen(path.c_str(), "rb");
  TITAN_CHECK(file != nullptr, "{} file {}: cannot open: {}", what, path.string(), std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) bytes.append(buffer, got);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  TITAN_CHECK(!failed, "{} file {}: read error", what, path.string());
  return bytes;
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    TITAN_CHECK(out.good(), "cannot write {}: {}", temporary.string(), std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out.good()) {
      const int write_errno = errno;
      out.close();
      std::error_code ignored;
      std::filesystem::remove(temporary, ignored);
      fail("cannot write {}: {}", temporary.string(), std::strerror(write_errno));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  TITAN_CHECK(!error, "cannot rename {} to {}: {}", temporary.string(), path.string(), error.message());
}

}  // namespace titan::data
