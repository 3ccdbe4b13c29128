// The record signatures of the zip format (PKWARE's APPNOTE), shared by the
// reader and the writer of torch.save archives.
#pragma once

#include <cstdint>

namespace titan::checkpoint::zip_format {

inline constexpr uint32_t kLocalHeader = 0x04034b50;
inline constexpr uint32_t kCentralHeader = 0x02014b50;
inline constexpr uint32_t kEndOfDirectory = 0x06054b50;
inline constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
inline constexpr uint32_t kZip64Locator = 0x07064b50;
inline constexpr uint16_t kZip64Extra = 0x0001;         // the extra field holding 64-bit sizes and offsets
inline constexpr uint64_t kDeferredTo64 = 0xffffffffu;  // a 32-bit field at this value defers to the zip64 extra field
inline constexpr size_t kLocalHeaderBytes = 30;
inline constexpr size_t kEndOfDirectoryBytes = 22;

}  // namespace titan::checkpoint::zip_format
