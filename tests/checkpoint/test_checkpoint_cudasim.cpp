// Checkpoints of buffers in device memory, on the CPU emulation of CUDA (mtron_kernels_cudasim,
// whose device memory the host cannot touch): a checkpoint saved from host buffers loads into
// device buffers bit for bit, saving from the device writes the same tensors, and padding rows
// of another vocabulary padding keep the device's values.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt_model.h"
#include "mtron/checkpoint/checkpoint.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/comm/single.h"
#include "mtron/kernels/device.h"
#include "mtron/model/gpt.h"

namespace mtron::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointCudaSim : public ::testing::Test {
 protected:
  void SetUp() override {
    kernels::init_device(Device::kCUDA, 0);
    dir_ = testing::TempDir() + "/ckcudasim_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    world_ = make_single_comm();
    g_ = RankGroups{world_.get(), world_.get(), 0};
  }
  std::string save(Model& m, const std::string& sub, int64_t it) {
    RunInfo info;
    info.model = m.cfg;
    info.seed = 1;
    return save_checkpoint(dir_ + "/" + sub, m.state(), info, Progress{it, it * 4, it, it * 4, {}},
                           g_, {});
  }
  std::string dir_;
  std::unique_ptr<Comm> world_;
  RankGroups g_;
};

// Every tensor of the two checkpoints, bit for bit; returns how many were compared.
int expect_same_tensors(const std::string& a, const std::string& b) {
  const CheckpointReader ra(a), rb(b);
  EXPECT_EQ(ra.keys(), rb.keys());
  int n = 0;
  for (const std::string& key : ra.keys()) {
    const Tensor ta = ra.read_global(key), tb = rb.read_global(key);
    EXPECT_EQ(ta.shape(), tb.shape()) << key;
    EXPECT_EQ(std::memcmp(ta.f32(), tb.f32(), size_t(ta.numel()) * 4), 0) << key;
    ++n;
  }
  return n;
}

TEST_F(CheckpointCudaSim, HostToDeviceToHostIsBitExact) {
  Model cpu(tiny(), 1, Device::kCPU), gpu(tiny(), 2, Device::kCUDA);
  const std::string a = save(cpu, "cpu", 3);
  load_checkpoint(a, gpu.state(), g_, true);
  const std::vector<float> wm = gpu.host(gpu.chunk.params().master_flat());
  const std::vector<float> mm = gpu.host(gpu.m), mv = gpu.host(gpu.v);
  for (const model::ParamSpec& s : cpu.chunk.params().specs()) {  // (not the alignment padding)
    const size_t b = size_t(s.offset), n = size_t(s.numel()) * 4;
    EXPECT_EQ(std::memcmp(cpu.chunk.params().master_flat().f32() + b, wm.data() + b, n), 0)
        << s.name;
    EXPECT_EQ(std::memcmp(cpu.m.f32() + b, mm.data() + b, n), 0) << s.name;
    EXPECT_EQ(std::memcmp(cpu.v.f32() + b, mv.data() + b, n), 0) << s.name;
  }
  // Saved again from the device, and loaded back on the host.
  const std::string b = save(gpu, "gpu", 3);
  EXPECT_GT(expect_same_tensors(a, b), 30);
  Model back(tiny(), 3, Device::kCPU);
  load_checkpoint(b, back.state(), g_, true);
  EXPECT_EQ(std::memcmp(back.chunk.params().master_flat().f32(),
                        cpu.chunk.params().master_flat().f32(), size_t(cpu.m.numel()) * 4),
            0);
}

// Optimizer offload: the moments of the first parameters in host memory, the rest on the device.
// Saving writes the tensors an all-device save writes, and loading fills both parts.
TEST_F(CheckpointCudaSim, OffloadedMomentsSaveAndLoadAsOnTheDevice) {
  Model gpu(tiny(), 2, Device::kCUDA);
  const std::string a = save(gpu, "device", 2);
  const model::ParamBuffer& p = gpu.chunk.params();
  const int64_t h = p.spec(int(p.specs().size() / 2)).offset;  // a parameter boundary
  ASSERT_GT(h, 0);
  // The same moments, split: [0, h) in host memory.
  std::vector<float> mh = gpu.host(gpu.m), vh = gpu.host(gpu.v);
  mh.resize(size_t(h));
  vh.resize(size_t(h));
  std::vector<ChunkState> split = gpu.state();
  split[0].exp_avg = {mh.data(), gpu.m.f32() + h, h};
  split[0].exp_avg_sq = {vh.data(), gpu.v.f32() + h, h};
  RunInfo info;
  info.model = gpu.cfg;
  info.seed = 1;
  const std::string b =
      save_checkpoint(dir_ + "/split", split, info, Progress{2, 8, 2, 8, {}}, g_, {});
  EXPECT_GT(expect_same_tensors(a, b), 30);

  // Loaded into a split state of another model: both parts get the saved moments.
  Model other(tiny(), 7, Device::kCUDA);
  std::vector<float> mh2(size_t(h), -1.0f), vh2(size_t(h), -1.0f);
  std::vector<ChunkState> into = other.state();
  into[0].exp_avg = {mh2.data(), other.m.f32() + h, h};
  into[0].exp_avg_sq = {vh2.data(), other.v.f32() + h, h};
  load_checkpoint(b, into, g_, true);
  const std::vector<float> want_m = gpu.host(gpu.m), want_v = gpu.host(gpu.v);
  const std::vector<float> got_m = other.host(other.m), got_v = other.host(other.v);
  for (const model::ParamSpec& s : p.specs()) {
    const size_t o = size_t(s.offset), n = size_t(s.numel()) * 4;
    const bool host = s.offset < h;
    EXPECT_EQ(std::memcmp(host ? mh2.data() + o : got_m.data() + o, want_m.data() + o, n), 0)
        << s.name;
    EXPECT_EQ(std::memcmp(host ? vh2.data() + o : got_v.data() + o, want_v.data() + o, n), 0)
        << s.name;
  }
}

TEST_F(CheckpointCudaSim, PaddingRowsKeepTheDeviceValues) {
  Model cpu(tiny(128), 1, Device::kCPU);
  save(cpu, "cpu", 1);
  Model gpu(tiny(1024), 2, Device::kCUDA);  // 1024 rows where the checkpoint has 128
  const int h = gpu.chunk.word_embedding();
  const model::ParamSpec& s = gpu.chunk.params().spec(h);
  const std::vector<float> before = gpu.host(gpu.chunk.params().master_flat());
  load_checkpoint(dir_ + "/cpu/iter_0000001", gpu.state(), g_, true);
  const std::vector<float> after = gpu.host(gpu.chunk.params().master_flat());
  const int64_t hidden = 32, stored = 128 * hidden;
  const float* w = cpu.chunk.params().master(cpu.chunk.word_embedding());
  EXPECT_EQ(std::memcmp(w, after.data() + s.offset, size_t(stored) * 4), 0);
  EXPECT_EQ(std::memcmp(before.data() + s.offset + stored, after.data() + s.offset + stored,
                        size_t(s.numel() - stored) * 4),
            0);
}

}  // namespace
}  // namespace mtron::checkpoint
