#include "mtron/checkpoint/whole_model.h"

#include "mtron/checkpoint/checkpoint.h"
#include "mtron/comm/single.h"

namespace mtron::checkpoint {

std::unique_ptr<WholeModel> load_whole_model(const std::string& load_dir) {
  const std::optional<std::string> dir = find_checkpoint(load_dir);
  MT_CHECK(dir, "no checkpoint in --load ", load_dir,
           " (neither manifest.json nor latest_checkpointed_iteration.txt)");
  auto m = std::make_unique<WholeModel>();
  m->dir = *dir;
  m->manifest = read_manifest(*dir);
  m->cfg = m->manifest.model;
  m->chunk = std::make_unique<model::GPTChunk>(
      m->cfg, model::ChunkPlacement{0, m->cfg.num_layers, true, true}, parallel::TensorParallel{},
      model::Recompute{});
  model::ParamBuffer& p = m->chunk->params();
  model::ParamBuffer& x = m->chunk->expert_params();
  p.allocate(Precision::kFP32, 1);
  std::vector<ChunkState> bufs = {{&p, {}, {}, {{0, p.size()}}, false, {}}};
  // The trained expert biases route tokens at inference too.
  if (m->cfg.moe_router_enable_expert_bias) add_expert_bias_states(bufs.front(), *m->chunk);
  if (!x.specs().empty()) {
    x.allocate(Precision::kFP32, 1);
    bufs.push_back({&x, {}, {}, {{0, x.size()}}, /*experts=*/true, {}});
  }
  auto world = make_single_comm();
  load_checkpoint(*dir, bufs, RankGroups{world.get(), world.get(), 0, world.get(), 0},
                  /*load_optimizer=*/false);
  return m;
}

}  // namespace mtron::checkpoint
