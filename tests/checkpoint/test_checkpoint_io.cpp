// Save/load of a model chunk in one process: exact round trip, vocabulary re-padding, the
// marker and retention, and a clear error (naming file and tensor) for every corruption.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ckpt_model.h"
#include "mtron/checkpoint/checkpoint.h"
#include "mtron/checkpoint/file_io.h"
#include "mtron/checkpoint/manifest.h"
#include "mtron/checkpoint/reader.h"
#include "mtron/comm/single.h"
#include "mtron/core/error.h"
#include "mtron/model/gpt.h"

namespace mtron::checkpoint {
namespace {

namespace fs = std::filesystem;

class CheckpointIO : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/ckio_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    world_ = make_single_comm();
    g_ = RankGroups{world_.get(), world_.get(), 0};
  }
  std::string save(Model& m, int64_t it, Retention keep = {}) {
    RunInfo info;
    info.model = m.cfg;
    info.seed = 1;
    return save_checkpoint(dir_, m.state(), info, Progress{it, it * 4, it, it * 4, {}}, g_, keep);
  }
  // The message of loading `dir` into `m` ("" if it loads).
  std::string load_error(const std::string& dir, Model& m) {
    try {
      load_checkpoint(dir, m.state(), g_, true);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string dir_;
  std::unique_ptr<Comm> world_;
  RankGroups g_;
};

TEST_F(CheckpointIO, RoundTripIsBitExact) {
  Model a(tiny(), 1), b(tiny(), 2);
  const std::string d = save(a, 7);
  EXPECT_EQ(d, dir_ + "/iter_0000007");
  EXPECT_EQ(read_small_file(dir_ + "/latest_checkpointed_iteration.txt", 64), "7");
  const Manifest man = load_checkpoint(*find_checkpoint(dir_), b.state(), g_, true);
  EXPECT_EQ(man.iteration, 7);
  EXPECT_EQ(man.consumed_samples, 28);
  EXPECT_EQ(man.optimizer_steps, 7);
  const int64_t n = a.chunk.params().size();
  EXPECT_EQ(std::memcmp(a.chunk.params().master_flat().f32(), b.chunk.params().master_flat().f32(),
                        size_t(n) * 4),
            0);
  for (const model::ParamSpec& s : a.chunk.params().specs()) {  // (not the alignment padding)
    for (int64_t i = s.offset; i < s.offset + s.numel(); ++i) {
      ASSERT_EQ(a.m.f32()[i], b.m.f32()[i]) << s.name;
      ASSERT_EQ(a.v.f32()[i], b.v.f32()[i]) << s.name;
    }
  }
  // Keys: Megatron-Core names, optimizer moments beside them.
  CheckpointReader r(d);
  EXPECT_TRUE(r.has("embedding.word_embeddings.weight"));
  EXPECT_TRUE(r.has("decoder.layers.1.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(r.has("optimizer.exp_avg_sq.decoder.final_layernorm.bias"));
  EXPECT_EQ(r.global_shape("embedding.word_embeddings.weight"), (Shape{128, 32}));
}

TEST_F(CheckpointIO, VocabularyPaddingMayDiffer) {
  Model a(tiny(128), 1);
  save(a, 1);
  for (int64_t div : {8, 1024}) {  // padded to 104 rows, to 1024 rows
    Model b(tiny(div), 2);
    const model::ParamSpec& s = b.chunk.params().spec(b.chunk.word_embedding());
    std::vector<float> before(b.chunk.params().master(b.chunk.word_embedding()),
                              b.chunk.params().master(b.chunk.word_embedding()) + s.numel());
    load_checkpoint(dir_ + "/iter_0000001", b.state(), g_, true);
    const float* wa = a.chunk.params().master(a.chunk.word_embedding());
    const float* wb = b.chunk.params().master(b.chunk.word_embedding());
    const int64_t h = 32, rows = std::min<int64_t>(128, s.global_shape[0]);
    EXPECT_EQ(std::memcmp(wa, wb, size_t(rows * h) * 4), 0);
    for (int64_t i = rows * h; i < s.numel(); ++i) ASSERT_EQ(wb[i], before[size_t(i)]);
  }
}

TEST_F(CheckpointIO, FindsCheckpointsByMarker) {
  EXPECT_FALSE(find_checkpoint(dir_).has_value());
  Model a(tiny(), 1);
  save(a, 3);
  save(a, 5);
  EXPECT_EQ(*find_checkpoint(dir_), dir_ + "/iter_0000005");
  EXPECT_EQ(*find_checkpoint(dir_ + "/iter_0000003"), dir_ + "/iter_0000003");
  // Rolling back by editing the marker (a common practice) is honoured.
  write_file_atomic(dir_ + "/latest_checkpointed_iteration.txt", "3\n");
  EXPECT_EQ(*find_checkpoint(dir_), dir_ + "/iter_0000003");
  write_file_atomic(dir_ + "/latest_checkpointed_iteration.txt", "4");
  EXPECT_THROW(find_checkpoint(dir_), Error);
  write_file_atomic(dir_ + "/latest_checkpointed_iteration.txt", "five");
  EXPECT_THROW(find_checkpoint(dir_), Error);
}

TEST_F(CheckpointIO, RetentionAndCrashLeftovers) {
  Model a(tiny(), 1);
  // Leftovers of a save killed before its commit, and of an interrupted deletion.
  fs::create_directories(dir_ + "/.tmp.iter_0000004");
  fs::create_directories(dir_ + "/.trash.iter_0000001.123");
  // A complete directory the marker never named (killed between rename and marker update).
  for (int64_t it : {1, 2, 3, 4}) save(a, it, {.keep_last_n = 2});
  EXPECT_FALSE(fs::exists(dir_ + "/.tmp.iter_0000004"));
  EXPECT_FALSE(fs::exists(dir_ + "/.trash.iter_0000001.123"));
  EXPECT_FALSE(fs::exists(dir_ + "/iter_0000001"));
  EXPECT_FALSE(fs::exists(dir_ + "/iter_0000002"));
  EXPECT_TRUE(fs::exists(dir_ + "/iter_0000003/manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/iter_0000004/manifest.json"));
  // Saving an iteration again replaces the stale directory.
  write_file_atomic(dir_ + "/latest_checkpointed_iteration.txt", "3");
  save(a, 4);
  EXPECT_EQ(*find_checkpoint(dir_), dir_ + "/iter_0000004");
}

// --save-retain-interval 2 (Megatron's rule): each save deletes the previous latest checkpoint
// unless its iteration is a multiple of 2 or it is a symbolic link.
TEST_F(CheckpointIO, SaveRetainIntervalKeepsMultiplesAndTheLatest) {
  Model a(tiny(), 1);
  for (int64_t it : {1, 2, 3, 4, 5}) save(a, it, {.retain_interval = 2});
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("iter_", 0) == 0)
      left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"iter_0000002", "iter_0000004", "iter_0000005"}));
  // A symbolic link in place of the previous latest stays.
  fs::rename(dir_ + "/iter_0000005", dir_ + "/elsewhere");
  fs::create_directory_symlink(dir_ + "/elsewhere", dir_ + "/iter_0000005");
  save(a, 6, {.retain_interval = 2});
  EXPECT_TRUE(fs::is_symlink(dir_ + "/iter_0000005"));
  EXPECT_TRUE(fs::exists(dir_ + "/iter_0000006/manifest.json"));
}

TEST_F(CheckpointIO, CorruptionIsReportedWithFileAndTensor) {
  Model a(tiny(), 1);
  const std::string d = save(a, 1);
  const std::string shard = d + "/rank_00000.safetensors";
  const std::string pristine = testing::TempDir() + "/pristine.safetensors";
  fs::copy_file(shard, pristine, fs::copy_options::overwrite_existing);
  auto restore = [&] { fs::copy_file(pristine, shard, fs::copy_options::overwrite_existing); };
  auto patch = [&](uint64_t off, char c) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(off));
    f.put(c);
  };
  Model b(tiny(), 2);
  ASSERT_EQ(load_error(d, b), "");

  // A flipped bit in the data: the tensor's checksum.
  const uint64_t size = fs::file_size(shard);
  patch(size - 3, 0x55);
  std::string e = load_error(d, b);
  EXPECT_NE(e.find("rank_00000.safetensors: tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("checksum mismatch"), std::string::npos) << e;
  restore();

  // A changed header byte: the manifest's header checksum.
  patch(20, ' ');
  e = load_error(d, b);
  EXPECT_NE(e.find("rank_00000.safetensors"), std::string::npos) << e;
  restore();

  // Truncation.
  fs::resize_file(shard, size - 100);
  e = load_error(d, b);
  EXPECT_NE(e.find("rank_00000.safetensors has "), std::string::npos) << e;
  EXPECT_NE(e.find("the manifest says"), std::string::npos) << e;
  restore();

  // A missing file.
  fs::remove(shard);
  e = load_error(d, b);
  EXPECT_NE(e.find("missing"), std::string::npos) << e;
  restore();

  // Another model: the tensor whose shape differs is named.
  ModelConfig wide = tiny();
  wide.hidden_size = 64;
  wide.kv_channels = 0;
  wide.finalize();
  Model c(wide, 3);
  e = load_error(d, c);
  EXPECT_NE(e.find("tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("has shape"), std::string::npos) << e;

  // A manifest that is not JSON, or names a file outside the directory.
  const std::string man = read_small_file(d + "/manifest.json", 1 << 20);
  write_file_atomic(d + "/manifest.json", man.substr(0, man.size() / 2));
  EXPECT_NE(load_error(d, b).find("manifest.json"), std::string::npos);
  std::string evil = man;
  evil.replace(evil.find("rank_00000.safetensors"), 22, "../../../../etc/passwd");
  write_file_atomic(d + "/manifest.json", evil);
  EXPECT_NE(load_error(d, b).find("invalid file name"), std::string::npos);
  write_file_atomic(d + "/manifest.json", man);
  EXPECT_EQ(load_error(d, b), "");
}

// Every MoE field of the model configuration survives the manifest, and a dense model's JSON has
// none of them.
TEST(Manifest, MoEConfigRoundTrip) {
  ModelConfig m = tiny();
  EXPECT_FALSE(model_config_to_json(m).contains("moe_router_topk"));
  m.num_experts = 6;
  m.moe_ffn_hidden_size = 40;
  m.moe_router_topk = 3;
  m.moe_layer_freq = 2;
  m.moe_shared_expert_intermediate_size = 24;
  m.moe_router_score_function = RouterScore::kSigmoid;
  m.moe_router_load_balancing_type = RouterLoadBalancing::kSeqAuxLoss;
  m.moe_aux_loss_coeff = 1e-2f;
  m.moe_z_loss_coeff = 1e-3f;
  m.moe_expert_capacity_factor = 1.25f;
  m.moe_token_drop_policy = TokenDropPolicy::kPosition;
  m.finalize();
  const ModelConfig r = model_config_from_json(model_config_to_json(m), "m.json");
  EXPECT_EQ(r.num_experts, 6);
  EXPECT_EQ(r.moe_ffn(), 40);
  EXPECT_EQ(r.moe_router_topk, 3);
  EXPECT_EQ(r.moe_layer_freq, 2);
  EXPECT_EQ(r.moe_shared_expert_intermediate_size, 24);
  EXPECT_EQ(r.moe_router_score_function, RouterScore::kSigmoid);
  EXPECT_EQ(r.moe_router_load_balancing_type, RouterLoadBalancing::kSeqAuxLoss);
  EXPECT_EQ(r.moe_aux_loss_coeff, 1e-2f);
  EXPECT_EQ(r.moe_z_loss_coeff, 1e-3f);
  EXPECT_EQ(r.moe_expert_capacity_factor, 1.25f);
  EXPECT_EQ(r.moe_token_drop_policy, TokenDropPolicy::kPosition);
  auto j = model_config_to_json(m);
  j["moe_router_score_function"] = "relu";
  EXPECT_THROW(model_config_from_json(j, "m.json"), Error);
  j = model_config_to_json(m);
  j.erase("moe_router_topk");
  EXPECT_THROW(model_config_from_json(j, "m.json"), Error);
}

}  // namespace
}  // namespace mtron::checkpoint
