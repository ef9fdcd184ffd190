#include "mtron/checkpoint/reader.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "mtron/checkpoint/crc32c.h"

namespace mtron::checkpoint {

using nlohmann::json;

namespace {

json shape_json(const Shape& s) {
  return json(s);
}

Shape shape_from(const json& j, const std::string& where, const char* what) {
  MT_CHECK(j.is_array() && j.size() <= 8, where, ": '", what, "' is not a shape");
  Shape s;
  for (const json& d : j) {
    MT_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= (uint64_t(1) << 48), where, ": '", what,
             "' has an invalid dimension");
    s.push_back(int64_t(d.get<uint64_t>()));
  }
  return s;
}

}  // namespace

std::string piece_metadata_json(const std::vector<PieceInfo>& pieces) {
  json j = json::object();
  for (const PieceInfo& p : pieces) {
    j[p.key] = {{"global", shape_json(p.region.global)},
                {"offset", shape_json(p.region.offset)},
                {"block", shape_json(p.region.block)},
                {"flat", {p.region.flat_begin, p.region.flat_end}},
                {"crc32c", p.crc32c}};
  }
  return j.dump();
}

CheckpointReader::CheckpointReader(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  const std::string mpath = (fs::path(dir_) / "manifest.json").string();
  MT_CHECK(fs::exists(mpath), "no checkpoint at ", dir_, " (", mpath, " does not exist)");
  manifest_ = read_manifest(dir_);

  for (const FileRecord& rec : manifest_.files) {
    const std::string path = (fs::path(dir_) / rec.name).string();
    MT_CHECK(fs::exists(path), path, " is listed in ", mpath, " but missing");
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    MT_CHECK(!ec && size == rec.bytes, path, " has ", size, " bytes; the manifest says ", rec.bytes,
             " (truncated or replaced)");
    auto f = std::make_unique<SafetensorsFile>(path);
    MT_CHECK(f->size() == rec.bytes, path, " changed while it was opened");
    MT_CHECK(crc32c(f->header_json().data(), f->header_json().size()) == rec.header_crc32c, path,
             ": header checksum does not match the manifest (corrupt file)");
    const auto it = f->header().metadata.find(kPiecesMetadataKey);
    MT_CHECK(it != f->header().metadata.end(), path, ": no '", kPiecesMetadataKey,
             "' metadata (not an mtron checkpoint shard)");
    MT_CHECK(json_depth_ok(it->second, 4), path, ": piece metadata nests too deeply");
    const json meta = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    MT_CHECK(!meta.is_discarded() && meta.is_object(), path, ": piece metadata is not an object");
    MT_CHECK(meta.size() == f->header().entries.size(), path, ": ", f->header().entries.size(),
             " tensors but ", meta.size(), " piece descriptions");
    for (const SafetensorsEntry& e : f->header().entries) {
      const std::string where = path + ": tensor '" + e.name + "'";
      MT_CHECK(meta.contains(e.name) && meta[e.name].is_object(), where, ": no piece description");
      const json& m = meta[e.name];
      MT_CHECK(e.dtype == "F32", where, ": dtype ", e.dtype, " (checkpoint tensors are F32)");
      Piece p{files_.size(), &e, {}, 0};
      MT_CHECK(m.contains("global") && m.contains("offset") && m.contains("block") &&
                   m.contains("flat") && m.contains("crc32c"),
               where, ": incomplete piece description");
      p.region.global = shape_from(m["global"], where, "global");
      p.region.offset = shape_from(m["offset"], where, "offset");
      p.region.block = shape_from(m["block"], where, "block");
      const json& fl = m["flat"];
      MT_CHECK(fl.is_array() && fl.size() == 2 && fl[0].is_number_unsigned() &&
                   fl[1].is_number_unsigned() && fl[1].get<uint64_t>() <= (uint64_t(1) << 62),
               where, ": invalid 'flat' range");
      p.region.flat_begin = int64_t(fl[0].get<uint64_t>());
      p.region.flat_end = int64_t(fl[1].get<uint64_t>());
      const json& c = m["crc32c"];
      MT_CHECK(c.is_number_unsigned() && c.get<uint64_t>() <= 0xFFFFFFFFu, where,
               ": invalid crc32c");
      p.crc32c = uint32_t(c.get<uint64_t>());
      validate_region(p.region, where);
      MT_CHECK(e.numel() == p.region.size(), where, ": holds ", e.numel(),
               " elements but its piece description says ", p.region.size());
      index_[e.name].push_back(std::move(p));
    }
    files_.push_back(std::move(f));
  }
  for (const auto& [key, ps] : index_) {
    std::vector<const Region*> rs;
    for (const Piece& p : ps) rs.push_back(&p.region);
    MT_CHECK(regions_tile(rs), dir_, ": the pieces of tensor '", key,
             "' do not cover its global shape exactly once (first piece in ",
             files_[ps.front().file]->path(), ")");
  }
}

CheckpointReader::~CheckpointReader() = default;

std::vector<std::string> CheckpointReader::keys() const {
  std::vector<std::string> k;
  for (const auto& kv : index_) k.push_back(kv.first);
  return k;
}

const std::vector<CheckpointReader::Piece>& CheckpointReader::pieces(const std::string& key) const {
  const auto it = index_.find(key);
  MT_CHECK(it != index_.end(), "checkpoint ", dir_, " has no tensor '", key, "'");
  return it->second;
}

const Shape& CheckpointReader::global_shape(const std::string& key) const {
  return pieces(key).front().region.global;
}

std::string CheckpointReader::where(const Piece& p) const {
  return files_[p.file]->path() + ": tensor '" + p.entry->name + "'";
}

void CheckpointReader::read(const std::string& key,
                            const Region& target,
                            float* dst,
                            bool pad_rows) const {
  const std::vector<Piece>& ps = pieces(key);
  const Shape& stored = ps.front().region.global;
  validate_region(target, "read of '" + key + "'");
  bool same = stored.size() == target.global.size();
  for (size_t d = 0; same && d < stored.size(); ++d) {
    same = stored[d] == target.global[d] || (pad_rows && d == 0);
  }
  MT_CHECK(same, "tensor '", key, "' in ", dir_, " has shape ", shape_str(stored),
           " but this model needs ", shape_str(target.global));
  // Elements of the target inside the stored tensor (all of them unless rows were padded).
  int64_t expected = target.size();
  if (!stored.empty() && target.global[0] != stored[0]) {
    const int64_t row = target.block[0] > 0 ? numel(target.block) / target.block[0] : 0;
    const int64_t limit =
        std::clamp<int64_t>((stored[0] - target.offset[0]) * row, 0, numel(target.block));
    expected = std::max<int64_t>(0, std::min(target.flat_end, limit) - target.flat_begin);
  }

  int64_t copied = 0;
  std::vector<std::array<int64_t, 3>> runs;
  std::vector<float> buf;
  for (const Piece& p : ps) {
    runs.clear();
    region_runs(p.region, target, [&](int64_t s, int64_t t, int64_t n) {
      runs.push_back({s, t, n});
    });
    if (runs.empty()) continue;
    const SafetensorsFile& f = *files_[p.file];
    const uint64_t bytes = p.entry->end - p.entry->begin;
    if (runs.size() == 1 && runs[0][0] == 0 && runs[0][2] == p.region.size()) {
      // The whole piece lands contiguously: read it in place and verify it there.
      float* out = dst + runs[0][1];
      f.read(*p.entry, 0, bytes, out);
      MT_CHECK(crc32c(out, bytes) == p.crc32c, where(p), ": checksum mismatch (corrupt data)");
      copied += runs[0][2];
      continue;
    }
    buf.resize(size_t(p.region.size()));
    f.read(*p.entry, 0, bytes, buf.data());
    MT_CHECK(crc32c(buf.data(), bytes) == p.crc32c, where(p), ": checksum mismatch (corrupt data)");
    for (const auto& r : runs) {
      std::copy(buf.data() + r[0], buf.data() + r[0] + r[2], dst + r[1]);
      copied += r[2];
    }
  }
  MT_ASSERT(copied == expected, "tensor '", key, "': copied ", copied, " of ", expected,
            " elements despite a tiling check");
}

Tensor CheckpointReader::read_global(const std::string& key) const {
  const Shape& g = global_shape(key);
  Tensor t = Tensor::empty(g, DType::kF32);
  read(key, Region::whole(g), t.f32());
  return t;
}

}  // namespace mtron::checkpoint
