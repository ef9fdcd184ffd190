// defines: kPiecesMetadataKey, piece_metadata_json, CheckpointReader
//
// Reads a checkpoint directory under any layout. Opening it reads manifest.json and the header
// of every safetensors file it lists (never the data), checks each file's size and header
// checksum against the manifest, and indexes the pieces by key: every tensor in a file is one
// piece of one global tensor, described in the file's __metadata__ (its Region and CRC-32C).
// Each key's pieces must tile its global tensor exactly once.
//
// read() then copies exactly the elements a rank asks for (a Region of the global tensor) from
// the pieces that hold them: a whole piece is read straight into the destination and verified
// there; a piece needed in part is read once into a buffer, verified, and its runs copied. Any
// inconsistency throws mtron::Error naming the file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mtron/checkpoint/manifest.h"
#include "mtron/checkpoint/region.h"
#include "mtron/checkpoint/safetensors.h"

namespace mtron::checkpoint {

// The safetensors __metadata__ key holding the pieces' regions and checksums (a JSON object
// mapping each tensor name to {"global", "offset", "block", "flat", "crc32c"}).
inline constexpr const char* kPiecesMetadataKey = "mtron.pieces";

struct PieceInfo {
  std::string key;
  Region region;
  uint32_t crc32c = 0;
};
std::string piece_metadata_json(const std::vector<PieceInfo>& pieces);

class CheckpointReader {
 public:
  // `dir` holds manifest.json (an iter_NNNNNNN directory).
  explicit CheckpointReader(std::string dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  std::vector<std::string> keys() const;
  bool has(const std::string& key) const { return index_.count(key) > 0; }
  // The stored global shape of `key`; throws naming the key and directory when absent.
  const Shape& global_shape(const std::string& key) const;

  // Fills dst[target.size()] with `target`'s elements of key's tensor. The target's global
  // shape must equal the stored one, except that with `pad_rows` dimension 0 may differ (the
  // padded vocabulary of another TP size): rows beyond the stored ones are left untouched.
  void read(const std::string& key, const Region& target, float* dst, bool pad_rows = false) const;
  // The whole stored tensor.
  Tensor read_global(const std::string& key) const;

 private:
  struct Piece {
    size_t file;
    const SafetensorsEntry* entry;
    Region region;
    uint32_t crc32c;
  };
  const std::vector<Piece>& pieces(const std::string& key) const;
  std::string where(const Piece& p) const;

  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::vector<Piece>> index_;
};

}  // namespace mtron::checkpoint
