// The safetensors reader against the format's golden vector and every rule it must enforce;
// CRC-32C against its check value and a bitwise reference.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "mtron/checkpoint/crc32c.h"
#include "mtron/checkpoint/safetensors.h"
#include "mtron/core/error.h"

namespace mtron::checkpoint {
namespace {

std::vector<uint8_t> file_bytes(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

// The error message of parsing `header` followed by `data_bytes` bytes ("" if it parses).
std::string parse_error(const std::string& header, size_t data_bytes) {
  const auto b = file_bytes(header, data_bytes);
  try {
    parse_safetensors_header(b, b.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Crc32c, CheckValueAndBitwiseReference) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::mt19937 rng(7);
  std::vector<uint8_t> data(1000);
  for (auto& x : data) x = uint8_t(rng());
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(31), size_t(33), size_t(1000)}) {
    uint32_t c = ~0u;  // bitwise reference, reflected polynomial 0x82F63B78
    for (size_t i = 0; i < n; ++i) {
      c ^= data[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    EXPECT_EQ(crc32c(data.data(), n), ~c) << n;
    // Incremental == one shot.
    EXPECT_EQ(crc32c(data.data() + n / 2, n - n / 2, crc32c(data.data(), n / 2)), ~c) << n;
  }
}

TEST(Safetensors, GoldenVector) {
  // The reference implementation's test: 40 00.. + header + f32 0..5.
  const std::string h = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(h.size(), 0x40u);
  auto b = file_bytes(h, 24);
  for (int i = 0; i < 6; ++i) {
    const float f = float(i);
    std::memcpy(b.data() + 8 + h.size() + 4 * i, &f, 4);
  }
  const SafetensorsHeader hd = parse_safetensors_header(b, b.size(), "golden");
  ASSERT_EQ(hd.entries.size(), 1u);
  const SafetensorsEntry& e = hd.entries[0];
  EXPECT_EQ(e.name, "attn.0");
  EXPECT_EQ(e.shape, (Shape{1, 2, 3}));
  EXPECT_EQ(hd.data_start, 72u);
  float v[6];
  std::memcpy(v, b.data() + hd.data_start + e.begin, 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(v[i], float(i));
}

TEST(Safetensors, WriteThenReadRoundTrip) {
  const std::string path = testing::TempDir() + "/rt.safetensors";
  std::vector<float> a(31);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * float(i) - 3;
  std::vector<uint16_t> b = {0x3f80, 0x4000, 0xbf80};  // bf16 1, 2, -1
  const auto w = write_safetensors(path,
                                   {{"a", "F32", {31}, a.data()},
                                    {"b", "BF16", {1, 3}, b.data()},
                                    {"e", "F32", {0, 4}, nullptr}},
                                   {{"format", "pt"}}, true);
  EXPECT_EQ(w.header.size() % 8, 0u);
  EXPECT_EQ(w.bytes, std::filesystem::file_size(path));
  SafetensorsFile f(path);
  EXPECT_EQ(f.header().metadata.at("format"), "pt");
  const SafetensorsEntry* ea = f.header().find("a");
  ASSERT_TRUE(ea);
  std::vector<float> back(31);
  f.read(*ea, 0, 124, back.data());
  EXPECT_EQ(back, a);
  const SafetensorsEntry* eb = f.header().find("b");
  ASSERT_TRUE(eb);
  EXPECT_EQ(eb->dtype, "BF16");
  uint16_t bb[3];
  f.read(*eb, 0, 6, bb);
  EXPECT_EQ(bb[2], 0xbf80);
  ASSERT_TRUE(f.header().find("e"));
  EXPECT_EQ(f.header().find("e")->numel(), 0);
}

// Data reached through a DataSource (a device's memory) is written in chunks of at most
// chunk_bytes, into the same bytes as host data.
TEST(Safetensors, WritesThroughADataSourceInChunks) {
  const std::string direct = testing::TempDir() + "/direct.safetensors";
  const std::string chunked = testing::TempDir() + "/chunked.safetensors";
  std::vector<float> a(31);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * float(i) - 1;
  std::vector<uint64_t> copies;
  const DataSource source{[&](void* dst, const void* src, uint64_t n) {
                            copies.push_back(n);
                            std::memcpy(dst, src, n);
                          },
                          12};
  write_safetensors(direct, {{"a", "F32", {31}, a.data()}}, {}, false);
  write_safetensors(chunked, {{"a", "F32", {31}, a.data(), &source}}, {}, false);
  EXPECT_EQ(copies, (std::vector<uint64_t>{12, 12, 12, 12, 12, 12, 12, 12, 12, 12, 4}));
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  EXPECT_EQ(bytes(direct), bytes(chunked));
}

TEST(Safetensors, RejectsEveryMalformation) {
  auto t = [](const std::string& body) { return "{" + body + "}"; };
  const std::string ok = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_EQ(parse_error(t(ok), 8), "");
  auto has = [](const std::string& err, const std::string& part) {
    return err.find(part) != std::string::npos && err.find("x.safetensors") != std::string::npos;
  };
  // Truncated data, trailing data.
  EXPECT_TRUE(has(parse_error(t(ok), 4), "outside the data buffer")) << parse_error(t(ok), 4);
  EXPECT_TRUE(has(parse_error(t(ok), 12), "trailing data"));
  // Unknown dtype, wrong byte count, negative or fractional dims, overflow.
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]})"), 8),
                  "unknown dtype 'F33'"));
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 8),
                  "tensor 'w': data_offsets span 8 bytes"));
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), 8),
                  "non-negative"));
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), 8),
                  "non-negative"));
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F64","shape":[4294967296,4294967296],)"
                                R"("data_offsets":[0,8]})"),
                              8),
                  "overflows"));
  // Offsets reversed, gap, overlap.
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), 8),
                  "outside the data buffer"));
  EXPECT_TRUE(
      has(parse_error(t(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), 8), "gap"));
  EXPECT_TRUE(has(parse_error(t(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})"),
                              8),
                  "overlapping"));
  // Missing or extra fields, wrong types, bad metadata, not JSON, not an object, too deep.
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":"F32","shape":[2]})"), 8), "tensor 'w'"));
  EXPECT_TRUE(
      has(parse_error(t(R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"), 8),
          "tensor 'w'"));
  EXPECT_TRUE(has(parse_error(t(R"("w":{"dtype":7,"shape":[2],"data_offsets":[0,8]})"), 8),
                  "dtype is not a string"));
  EXPECT_TRUE(has(parse_error(t(R"("__metadata__":{"a":1},)" + ok), 8), "__metadata__"));
  EXPECT_TRUE(has(parse_error("{\"w\":", 8), "not a JSON object"));
  EXPECT_TRUE(has(parse_error("[1,2]   ", 8), "does not start with '{'"));
  EXPECT_TRUE(has(parse_error("{\"a\":[[[[[[[[1]]]]]]]]}", 0), "nests too deeply"));
  // Header length beyond the file or the limit.
  std::vector<uint8_t> b = file_bytes(t(ok), 8);
  b[0] = 0xff;
  EXPECT_THROW(parse_safetensors_header(b, b.size(), "x.safetensors"), Error);
  b[0] = 0;
  b[7] = 1;  // N ~ 7e16
  EXPECT_THROW(parse_safetensors_header(b, b.size(), "x.safetensors"), Error);
  EXPECT_THROW(parse_safetensors_header(std::span<const uint8_t>(b.data(), 4), 4, "x"), Error);
  // Strings hide brackets from the depth check.
  EXPECT_TRUE(json_depth_ok(R"({"a":"[[[[[[[[\"]]]]"})", 2));
  EXPECT_FALSE(json_depth_ok("[[[", 2));
}

}  // namespace
}  // namespace mtron::checkpoint
