#include "mtron/plan/published.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "mtron/core/error.h"
#include "mtron/core/formulas.h"
#include "mtron/embedded/published_catalog_files.h"
#include "mtron/plan/model_catalog.h"

namespace mtron::plan {
namespace {

using nlohmann::json;

// A JSON object of Megatron flags as arguments ({"num-layers": 24} -> --num-layers 24).
void append_flags(const json& args, std::vector<std::string>* out) {
  for (const auto& [key, v] : args.items()) {
    if (v.is_boolean()) {
      if (v.get<bool>()) out->push_back("--" + key);
      continue;
    }
    out->push_back("--" + key);
    out->push_back(v.is_string()           ? v.get<std::string>()
                   : v.is_number_integer() ? std::to_string(v.get<int64_t>())
                                           : fmt::format("{}", v.get<double>()));
  }
}

void apply_settings(const json& s, SearchOptions* o) {
  if (s.contains("precision")) o->precision = parse_precision(s["precision"].get<std::string>());
  if (s.contains("recompute")) {
    const std::string r = s["recompute"].get<std::string>();
    o->recompute = r == "full"        ? RecomputeGranularity::kFull
                   : r == "selective" ? RecomputeGranularity::kSelective
                                      : RecomputeGranularity::kNone;
  }
  if (s.contains("recompute_modules")) {
    o->recompute_modules =
        parse_recompute_modules(s["recompute_modules"].get<std::vector<std::string>>());
    MT_ASSERT(o->recompute == RecomputeGranularity::kSelective,
              "catalog/published: recompute_modules needs \"recompute\": \"selective\"");
  }
  o->distributed_optimizer = s.value("distributed_optimizer", o->distributed_optimizer);
  o->sequence_parallel = s.value("sequence_parallel", o->sequence_parallel);
  o->tp_comm_overlap = s.value("tp_comm_overlap", o->tp_comm_overlap);
  o->ep_comm_overlap = s.value("ep_comm_overlap", o->ep_comm_overlap);
  o->fused_attention = s.value("fused_attention", o->fused_attention);
  o->overlap_dp_comm = s.value("overlap_dp_comm", o->overlap_dp_comm);
  o->fp8_params = s.value("fp8_param_gather", o->fp8_params);
  o->grads_fp32 = s.value("grads_fp32", o->grads_fp32);
  o->tp = s.value("tp", o->tp);
  o->pp = s.value("pp", o->pp);
  o->cp = s.value("cp", o->cp);
  o->ep = s.value("ep", o->ep);
  o->vpp = s.value("vpp", o->vpp);
  o->pipeline_layout = s.value("layout", o->pipeline_layout);
  o->account_for_embedding = s.value("account_for_embedding", o->account_for_embedding);
  o->account_for_loss = s.value("account_for_loss", o->account_for_loss);
  o->micro_batch_size = s.value("mbs", o->micro_batch_size);
  o->global_batch_size = s.value("gbs", o->global_batch_size);
}

FlopsFormula parse_formula(const std::string& s) {
  if (s == "megatron") return FlopsFormula::kMegatron;
  if (s == "megatron-2024") return FlopsFormula::kMegatron2024;
  MT_ASSERT(s == "narayanan2021", "unknown FLOPs formula '", s, "' in catalog/published");
  return FlopsFormula::kNarayanan2021;
}

std::vector<PublishedRow> load() {
  std::vector<PublishedRow> out;
  for (const auto& [path, text] : embedded::published_catalog_files()) {
    const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
    MT_ASSERT(!doc.is_discarded(), "embedded catalog ", path, " is not valid JSON");
    for (const json& t : doc.at("tables")) {
      for (const json& j : t.at("rows")) {
        PublishedRow r;
        r.table = t.at("name").get<std::string>();
        r.label = j.at("label").get<std::string>();
        r.source = t.at("source").get<std::string>();
        r.hardware = j.value("hardware", t.value("hardware", ""));
        if (j.contains("model")) r.model_args = find_model(j["model"].get<std::string>()).args;
        append_flags(t.value("args", json::object()), &r.model_args);
        append_flags(j.value("args", json::object()), &r.model_args);
        r.gpus = j.at("gpus").get<int64_t>();
        apply_settings(t.value("settings", json::object()), &r.options);
        apply_settings(j, &r.options);
        r.tflops = j.value("tflops", 0.0);
        r.tokens_per_second = j.value("tokens_per_second", 0.0);
        MT_ASSERT(r.tflops > 0 || r.tokens_per_second > 0, path, ": ", r.name(),
                  " has neither tflops nor tokens_per_second");
        r.formula = parse_formula(t.value("flops", "megatron"));
        r.fit = j.value("fit", false);
        out.push_back(std::move(r));
      }
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

const std::vector<PublishedRow>& published_rows() {
  static const std::vector<PublishedRow> rows = load();
  return rows;
}

ModelConfig row_model(const PublishedRow& r) {
  return parse_model_args(r.model_args);
}

double published_tokens_per_second(const PublishedRow& r, const ModelConfig& m) {
  if (r.tokens_per_second > 0) return r.tokens_per_second;
  const int64_t gbs = r.options.global_batch_size;
  const double B = double(gbs), s = double(m.seq_length), L = double(m.num_layers);
  const double V = double(m.padded_vocab_size(std::max<int64_t>(1, r.options.tp)));
  double flops = flops_per_iteration(m, gbs, int64_t(V));
  if (r.formula != FlopsFormula::kMegatron) flops += 6 * B * s * s * double(m.q_size()) * L;
  if (r.formula == FlopsFormula::kNarayanan2021) {
    // Every layer's forward runs twice (recompute); the output layer's once.
    const double logits = 6 * B * s * double(m.hidden_size) * V;
    flops = 4.0 / 3.0 * (flops - logits) + logits;
  }
  return r.tflops * 1e12 / (flops / (B * s));
}

RowPrediction predict_row(const PublishedRow& r, const Hardware& hw) {
  const ModelConfig m = row_model(r);
  Cluster c;
  c.hardware = hw;
  c.num_devices = r.gpus;
  c.devices_per_node = std::min<int64_t>(r.gpus, hw.gpus_per_node);
  SearchOptions o = r.options;
  o.top = 1;
  o.memory_margin = 0;  // the published run fitted its GPUs
  RowPrediction p;
  p.published = published_tokens_per_second(r, m);
  const SearchResult res = search_layouts(m, c, perf_from_hardware(c, o.precision), o);
  if (res.plans.empty()) return p;
  p.planned = true;
  p.plan = res.plans[0];
  p.predicted = p.plan.time.tokens_per_second_per_device;
  p.error = p.predicted / p.published - 1;
  return p;
}

Hardware fit_achievable(const Hardware& base,
                        const std::vector<const PublishedRow*>& rows,
                        const std::vector<FitParameter>& params) {
  Hardware hw = base;
  auto cost = [&](const Hardware& h) {
    double sum = 0;
    for (const PublishedRow* r : rows) {
      const RowPrediction p = predict_row(*r, h);
      if (!p.planned) return std::numeric_limits<double>::infinity();
      sum += std::pow(std::log(p.predicted / p.published), 2);
    }
    return sum;
  };
  double best = cost(hw);
  // Coordinate descent on a log grid over each range, then on a finer grid around the best.
  for (const int points : {17, 9}) {
    for (int sweep = 0; sweep < 3; ++sweep) {
      bool moved = false;
      for (const FitParameter& f : params) {
        const double cur = hw.achievable.*f.field;
        const double ratio = std::pow(f.hi / f.lo, 1.0 / 16);
        const double lo = points == 17 ? f.lo : std::max(f.lo, cur / ratio);
        const double hi = points == 17 ? f.hi : std::min(f.hi, cur * ratio);
        for (int i = 0; i < points; ++i) {
          Hardware h = hw;
          h.achievable.*f.field = lo * std::pow(hi / lo, double(i) / (points - 1));
          const double c = cost(h);
          if (c < best - 1e-12) {
            best = c;
            hw = h;
            moved = true;
          }
        }
      }
      if (!moved) break;
    }
  }
  return hw;
}

std::vector<FitParameter> fit_parameters(const std::vector<const PublishedRow*>& rows) {
  bool half = false, fp8 = false, fused = false, unfused = false;
  for (const PublishedRow* r : rows) {
    half |= r->options.precision == Precision::kBF16 || r->options.precision == Precision::kFP16;
    fp8 |= r->options.precision == Precision::kFP8;
    (r->options.fused_attention ? fused : unfused) = true;
  }
  std::vector<FitParameter> out;
  if (half) out.push_back({&Achievable::gemm, "gemm", 0.3, 0.95});
  if (fp8) out.push_back({&Achievable::gemm_fp8, "gemm_fp8", 0.2, 0.9});
  if (fused) out.push_back({&Achievable::attention, "attention", 0.15, 0.8});
  if (unfused) {
    // Materialised scores: the softmax passes, and batched GEMMs of head-dimension K.
    out.push_back({&Achievable::memory, "memory", 0.3, 0.9});
    out.push_back({&Achievable::gemm_k_overhead, "gemm_k_overhead", 16, 512});
  }
  if (out.size() > rows.size()) out.resize(rows.size());
  return out;
}

std::vector<RowPrediction> row_errors(const std::vector<const PublishedRow*>& rows) {
  std::vector<RowPrediction> out;
  for (const PublishedRow* r : rows) out.push_back(predict_row(*r, find_hardware(r->hardware)));
  return out;
}

std::string format_published(const std::vector<const PublishedRow*>& rows,
                             const std::vector<RowPrediction>& predictions) {
  MT_ASSERT(rows.size() == predictions.size(), "one prediction per row");
  std::string s =
      fmt::format("{:<40} {:<10} {:<8} {:<36} {:>10} {:>10} {:>7} {:>15}\n", "row", "hardware",
                  "role", "plan", "predicted", "published", "error", "TFLOP/s pred/pub");
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_hw;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PublishedRow& r = *rows[i];
    const RowPrediction& p = predictions[i];
    // TFLOP/s by the source's own formula, where it published that figure.
    const std::string tflops =
        r.tflops > 0 ? fmt::format("{:.1f}/{:.1f}", r.tflops * (1 + p.error), r.tflops) : "";
    s += fmt::format("{:<40} {:<10} {:<8} {:<36} {:>10.0f} {:>10.0f} {:>+6.1f}% {:>15}\n", r.name(),
                     r.hardware, r.fit ? "fit" : "held out",
                     p.planned ? layout_name(p.plan.layout) : "(nothing fits)", p.predicted,
                     p.published, 100 * p.error, tflops);
    auto& [fit, held] = by_hw[r.hardware];
    (r.fit ? fit : held).push_back(p.planned ? std::abs(p.error) : 1.0);
  }
  s += "(tokens/s per GPU; TFLOP/s per GPU by the source's FLOPs formula)\n";
  for (const auto& [hw, e] : by_hw) {
    auto stats = [](const std::vector<double>& v) {
      return v.empty() ? std::string("-")
                       : fmt::format("{} rows, median {:.1f}%, max {:.1f}%", v.size(),
                                     100 * median(v), 100 * *std::max_element(v.begin(), v.end()));
    };
    s += fmt::format("{}: fitted {}; held out {}\n", hw, stats(e.first), stats(e.second));
  }
  return s;
}

}  // namespace mtron::plan
