// .npy files: save_npy writes exactly what numpy.save writes; load_npy reads numpy's files and
// rejects every kind of damage with a message naming the file.
#include <gtest/gtest.h>

#include "mtron/core/error.h"
#include "mtron/data/int_array.h"
#include "test_util.h"

namespace mtron::data {
namespace {

using testing::python_reference;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

TEST(Npy, SaveIsByteIdenticalToNumpyAndLoadsBack) {
  TempDir t;
  struct Case {
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<int64_t> values;
  };
  const std::vector<Case> cases = {
      {"<i4", {5}, {0, -1, 7, 2147483647, -2147483648}},
      {"<u4", {3}, {0, 1, 4294967295}},
      {"<i8", {3, 2}, {0, 1, 2, 3, -4, 1LL << 40}},
      {"<i2", {4}, {0, 1, -1, 32767}},
      {"<i4", {0}, {}},
      {"<i4", {33, 2}, std::vector<int64_t>(66, 9)},
  };
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string ref = t / ("ref" + std::to_string(k) + ".npy");
    python_reference("save_npy",
                     {{"path", ref}, {"dtype", c.dtype}, {"shape", c.shape}, {"values", c.values}});
    IntArray a = load_npy(ref);
    ASSERT_EQ(a.size(), int64_t(c.values.size()));
    ASSERT_EQ(a.ndim(), int(c.shape.size()));
    for (std::size_t i = 0; i < c.values.size(); ++i) EXPECT_EQ(a[int64_t(i)], c.values[i]);
    const std::string mine = t / ("mine" + std::to_string(k) + ".npy");
    save_npy(mine, a);
    EXPECT_EQ(read_text(mine), read_text(ref)) << "case " << k << " (" << c.dtype << ")";
  }
}

TEST(Npy, CorruptFilesAreRejectedWithTheFileName) {
  TempDir t;
  const std::string good = t / "good.npy";
  save_npy(good, IntArray::from_vector(std::vector<int32_t>{1, 2, 3}));
  const std::string bytes = read_text(good);
  const auto expect_error = [&](const std::string& content, const std::string& what) {
    const std::string p = t / "bad.npy";
    write_text(p, content);
    try {
      load_npy(p);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("", "bad magic");
  expect_error("\x93NUMPZ" + bytes.substr(6), "bad magic");
  std::string v = bytes;
  v[6] = 9;
  expect_error(v, "version");
  expect_error(bytes.substr(0, bytes.size() - 1), "size mismatch");
  expect_error(bytes + "xxxx", "size mismatch");
  expect_error(bytes.substr(0, 20), "truncated");
  std::string f8 = bytes;
  f8.replace(f8.find("<i4"), 3, "<f8");
  expect_error(f8, "dtype");
  std::string fo = bytes;
  fo.replace(fo.find("False"), 5, "True ");
  expect_error(fo, "Fortran");
  std::string sh = bytes;
  sh.replace(sh.find("(3,)"), 4, "(9,)");
  expect_error(sh, "size mismatch");
}

}  // namespace
}  // namespace mtron::data
