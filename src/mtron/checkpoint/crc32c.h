// defines: crc32c
//
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every tensor a
// checkpoint stores. The SSE4.2 crc32 instruction computes it at several GB/s, so verifying on
// load costs little next to the read; a table-driven fallback serves other CPUs.
// crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mtron::checkpoint {

// Extends `crc` (0 for a fresh checksum) over n bytes.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace mtron::checkpoint
