// LlamaGen behind the public Pipeline: vanilla and speculative generation of token grids,
// teacher-forced logits, VQ decoding.
#include "pipeline/llamagen_family.h"

#include <map>
#include <mutex>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <span>

#include "decode/decoder.h"
#include "decode/guidance.h"
#include "decode/teacher_forcing.h"
#include "models/eagle_drafter.h"
#include "models/llamagen.h"
#include "models/medusa_heads.h"
#include "models/vq_decoder.h"
#include "pipeline/cost_cache.h"
#include "pipeline/forward_cost.h"
#include "pipeline/verify_cost.h"
#include "speculative/drafters/hawk_drafter.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/medusa_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/method.h"
#include "speculative/model_defaults.h"
#include "speculative/speculative_decoder.h"
#include "speculative/tree_spec.h"

namespace tessera {

namespace {
// generate_all one batch at a time, so that a cancel request (GenerateOptions::cancel) is seen
// between batches: the finished images are returned and the rest never start. A batch holds the
// decoder's capacity, so the images are grouped exactly as one generate_all call would group them.
std::vector<std::vector<int32_t>> generate_batches(Decoder& decoder,
                                                   const std::vector<const Condition*>& conds,
                                                   const std::vector<uint64_t>& idx,
                                                   const GenerateOptions& opts, GenerateStats& st) {
  if (!opts.cancel && !opts.on_image) return generate_all(decoder, conds, idx, st);
  std::vector<std::vector<int32_t>> out;
  const size_t cap = static_cast<size_t>(std::max(decoder.capacity_images(), 1));
  for (size_t b0 = 0; b0 < conds.size() && !(opts.cancel && opts.cancel->load()); b0 += cap) {
    const size_t b1 = std::min(conds.size(), b0 + cap);
    auto grids = generate_all(decoder, {conds.begin() + b0, conds.begin() + b1},
                              {idx.begin() + b0, idx.begin() + b1}, st);
    for (auto& g : grids) {
      if (opts.on_image) opts.on_image(out.size(), g);  // as soon as its batch is done
      out.push_back(std::move(g));
    }
  }
  return out;
}
}  // namespace

struct LlamaGenFamily::Data {
  ModelConfig config;
  Backend* backend = nullptr;
  std::unique_ptr<LlamaGen> gpt;
  std::unique_ptr<VqDecoder> vq;
  // Draft models and Medusa or Hawk heads, each loaded once by its directory and kept while the
  // family lives: the runs in flight (one per setting of a server, or per thread) hold pointers to
  // them. `mu` guards the maps; the models themselves are read-only once loaded.
  struct LoadedDraft {
    std::unique_ptr<AutoregressiveModel> model;
    ModelConfig config;
  };
  std::mutex mu;
  std::map<std::string, LoadedDraft> drafts;
  std::map<std::pair<std::string, bool>, std::unique_ptr<MedusaHeads>> heads;  // (dir, hawk)

  const LoadedDraft& draft_model(const std::string& dir);
  const MedusaHeads& medusa_heads(const std::string& dir, const std::string& method, bool hawk);
};

// Medusa heads (the medusa methods' drafter) or Hawk's (the hawk methods') trained for this
// target.
const MedusaHeads& LlamaGenFamily::Data::medusa_heads(const std::string& dir,
                                                      const std::string& method, bool hawk) {
  std::lock_guard lock(mu);
  std::unique_ptr<MedusaHeads>& loaded = heads[{dir, hawk}];
  if (loaded) return *loaded;
  ModelConfig mc = load_model_config(dir);
  mc.check_weights = config.check_weights;
  const std::string what = mc.is_eagle()    ? "an EAGLE drafter"
                           : mc.is_medusa() ? "a Medusa heads directory"
                           : mc.is_hawk()   ? "a Hawk heads directory"
                                            : "a model, not draft heads";
  check_param(hawk ? mc.is_hawk() : mc.is_medusa(), "draft",
              "{method} " + method + " drafts with " +
                  (hawk ? "Hawk's heads (python/emoji/train_medusa.py --vertical D)"
                        : "Medusa heads (python/emoji/train_medusa.py)") +
                  "; " + dir + " is " + what);
  loaded = std::make_unique<MedusaHeads>(mc, *gpt);  // checks that they fit the target
  return *loaded;
}

// A draft model over the target's vocabulary (a smaller LlamaGen), or an EAGLE drafter converted
// for this target.
const LlamaGenFamily::Data::LoadedDraft& LlamaGenFamily::Data::draft_model(const std::string& dir) {
  std::lock_guard lock(mu);
  if (auto it = drafts.find(dir); it != drafts.end()) return it->second;
  ModelConfig dc = load_model_config(dir);
  dc.check_weights = config.check_weights;
  check_param(!dc.is_medusa(), "draft",
              "{draft} " + dir +
                  " holds Medusa heads: they draft for {method} medusa, medusa-typical or a "
                  "method that takes a draft model (sd, lantern, ...)");
  check_param(!dc.is_hawk(), "draft",
              "{draft} " + dir +
                  " holds Hawk's heads: they draft for {method} hawk, hawk-vertical or a method "
                  "that takes a draft model (sd, lantern, ...)");
  if (dc.is_eagle()) {
    auto eagle = std::make_unique<EagleDrafterModel>(dc, *gpt);  // checks that it fits the target
    return drafts[dir] = {std::move(eagle), dc};
  }
  check_param(!dc.is_mar(), "draft", "{draft} " + dir + " is a MAR model, not a draft model");
  const GptConfig &t = config.gpt, &d = dc.gpt;
  auto same = [&](const char* what, long a, long b) {
    check_param(a == b, "draft",
                "{draft} " + dir + ": " + what + " " + std::to_string(b) +
                    " does not match the target's " + std::to_string(a) +
                    " (a draft model must share the target's VQ vocabulary, grid and "
                    "conditioning)");
  };
  same("vocab_size", t.vocab_size, d.vocab_size);
  same("grid", t.grid, d.grid);
  check_param(t.model_type == d.model_type, "draft",
              "{draft} " + dir + ": the target is " + (t.is_c2i() ? "c2i" : "t2i") +
                  " but the draft model is " + (d.is_c2i() ? "c2i" : "t2i"));
  if (t.is_c2i())
    same("num_classes", t.num_classes, d.num_classes);
  else
    same("caption_dim", t.caption_dim, d.caption_dim);
  auto draft = std::make_unique<LlamaGen>(dc, *backend);
  return drafts[dir] = {std::move(draft), dc};
}

LlamaGenFamily::LlamaGenFamily(const ModelConfig& config, Backend& backend, bool load_decoder)
    : d_(std::make_unique<Data>()) {
  // The validated settings are checked against the registry here (the config parser knows no
  // method).
  speculative::check_validated_settings(
      config.quality, (std::filesystem::path(config.dir) / "config.json").string());
  d_->config = config;
  d_->backend = &backend;
  d_->gpt = std::make_unique<LlamaGen>(config, backend);
  if (load_decoder && config.has_vq) d_->vq = std::make_unique<VqDecoder>(config, backend);
}
LlamaGenFamily::~LlamaGenFamily() = default;

bool LlamaGenFamily::has_decoder() const {
  return d_->vq != nullptr;
}
int LlamaGenFamily::image_size() const {
  return d_->config.gpt.grid *
         (d_->config.has_vq ? d_->config.vq.upsample_factor() : d_->config.gpt.downsample);
}
int64_t LlamaGenFamily::weight_bytes_per_step() const {
  return d_->gpt->streamed_weight_bytes();
}

std::vector<double> LlamaGenFamily::forward_seconds(int max_k, bool cfg, int repeats) {
  ForwardCostSettings s;
  s.max_k = max_k;
  s.cfg = cfg;
  s.repeats = repeats;
  return measure_forward_seconds(*d_->gpt, s);
}

std::vector<double> LlamaGenFamily::verify_seconds(int max_k, bool cfg, int repeats) {
  VerifyCostSettings s;
  s.max_k = max_k;
  s.cfg = cfg;
  s.repeats = repeats;
  return measure_verify_seconds(d_->gpt->backend(), d_->gpt->info().vocab_size, s);
}

ForwardFlops LlamaGenFamily::forward_flops(int k, bool cfg) const {
  const ArModelInfo& info = d_->gpt->info();
  // The context measure_forward_seconds runs at: the prefix and half the image, then k rows.
  const double context = info.prefix_len + info.n_tokens / 2 + (k - 1) / 2.0;
  const double rows = k * (cfg ? 2.0 : 1.0);
  ForwardFlops f;
  f.matmul = 2.0 * static_cast<double>(d_->gpt->streamed_weight_params()) * rows;
  f.attention = 4.0 * info.n_layer * info.dim * context * rows;
  return f;
}

// What a generation with `opts` runs, checked: every ParameterError generate can raise about its
// options is raised here, before any image starts.
struct LlamaGenFamily::Prepared {
  SamplingParams p;
  const AutoregressiveModel* draft = nullptr;
  const ModelConfig* draft_config = nullptr;  // the draft model's
  const MedusaHeads* medusa = nullptr;        // the medusa methods' drafter (draft stays null)
  speculative::Method method;
  std::string note;
  std::optional<speculative::TreeSpec> tree;  // --tree: the draft model's static or dynamic tree
  std::string tree_spec;   // the tree drafted: --tree or the heads' default ("": chains)
  std::string spec_draft;  // the draft directory given (opts.spec.draft_model)
};

LlamaGenFamily::Prepared LlamaGenFamily::prepare(const GenerateOptions& opts) {
  check_param(opts.batch >= 1, "batch", "must be at least 1");
  Prepared r;
  r.spec_draft = opts.spec.draft_model;
  // Settings left to the model take its config.json "sampling" (then LlamaGen's defaults).
  r.p = to_sampling_params(resolve_sampling(opts.sampling, d_->config.sampling));  // validates
  const int N = d_->config.gpt.n_image_tokens();
  check_param(opts.max_tokens >= 0 && opts.max_tokens <= N, "tokens",
              "must be in [1, " + std::to_string(N) + "]");
  check_param(opts.spec.max_rounds >= 0, "max_rounds", "must be >= 0");
  // The draft model is validated before the method's tables (LANTERN's can take seconds) are built.
  const bool wants_draft = !opts.spec.draft_model.empty() && opts.spec.method != "vanilla";
  const MethodInfo* mi = find_method(opts.spec.method);
  bool hawk = mi && mi->drafter == "hawk";
  bool medusa = mi && (mi->drafter == "medusa" || hawk);
  if (wants_draft && mi && mi->drafter == "draft") {
    // A method that drafts with a draft model drafts with Medusa's or Hawk's heads when --draft
    // names them: its rule on their trees (Hawk, Table 1's "Medusa with LANTERN++").
    const ModelConfig dc = load_model_config(opts.spec.draft_model);
    hawk = dc.is_hawk();
    medusa = dc.is_medusa() || hawk;
  }
  if (wants_draft && medusa)
    r.medusa = &d_->medusa_heads(opts.spec.draft_model, opts.spec.method, hawk);
  else if (wants_draft) {
    const Data::LoadedDraft& loaded = d_->draft_model(opts.spec.draft_model);
    r.draft = loaded.model.get();
    r.draft_config = &loaded.config;
  }
  if (mi && mi->drafter == "eagle" && r.draft)
    check_param(dynamic_cast<const EagleDrafterModel*>(r.draft) != nullptr, "draft",
                "{method} " + opts.spec.method +
                    " drafts with an EAGLE drafter (tools/convert_eagle.py); " +
                    opts.spec.draft_model + " is a draft GPT (for it use {method} sd)");
  // The model's validated settings are its defaults (config.json "quality"); flags given win.
  const SpeculativeOptions spec = speculative::with_model_defaults(opts.spec, d_->config.quality);
  r.method = speculative::make_method(spec, d_->config.dir, d_->config.gpt, *d_->backend);
  check_param(opts.spec.auto_hold >= 0 && opts.spec.auto_hold <= kMaxDraftHold, "auto_hold",
              "must be in [1, " + std::to_string(kMaxDraftHold) +
                  "] rounds (0: the loop's default), got " + std::to_string(opts.spec.auto_hold));
  check_param(opts.spec.auto_hold == 0 || (r.method.rule && r.method.auto_len), "auto_hold",
              r.method.rule ? "is what --draft-len auto holds its lengths for; this draft length "
                              "is fixed"
                            : "is for speculative methods; vanilla drafts nothing");
  if (r.method.rule)
    check_param(opts.max_tokens == 0 || opts.max_tokens == N, "tokens",
                "{tokens} (a partial grid) is only supported by {method} vanilla");
  // Another method's rule on Hawk's pools: every head, one sampled candidate per pool member.
  if (hawk && r.medusa && !r.method.hawk) r.method.hawk = speculative::HawkOptions{};
  if (r.method.hawk && r.medusa) {
    // "every head": the heads' counts; more than they have is refused naming the flag.
    speculative::HawkOptions& h = *r.method.hawk;
    const int K = r.medusa->num_heads(), D = r.medusa->vertical_heads();
    if (h.horizontal == speculative::HawkOptions::kAll) h.horizontal = K;
    if (h.vertical == speculative::HawkOptions::kAll) h.vertical = D;
    check_param(h.horizontal <= K, "hawk.horizontal",
                "{hawk.horizontal} " + std::to_string(h.horizontal) + ": " + opts.spec.draft_model +
                    " has " + std::to_string(K) + " horizontal heads");
    check_param(h.vertical <= D, "hawk.vertical",
                "{hawk.vertical} " + std::to_string(h.vertical) + ": " + opts.spec.draft_model +
                    " has " + std::to_string(D) + " vertical heads");
    check_param(h.horizontal + h.vertical > 0, "hawk.horizontal",
                "{hawk.horizontal}: " + opts.spec.draft_model + " has no horizontal heads");
  }
  // Medusa's heads draft a tree: --tree, else the chain of their top-1 tokens; Hawk's the
  // Cartesian product of its pools.
  const std::string tree = !opts.spec.tree.empty() ? opts.spec.tree
                           : r.method.hawk && r.medusa
                               ? speculative::hawk_default_tree(*r.method.hawk)
                           : r.medusa ? speculative::medusa_default_tree(r.medusa->num_heads())
                                      : opts.spec.tree;
  if (r.method.rule && !tree.empty()) {
    // Every rule verifies trees with the same walk: exact verification is proven on trees
    // (tests/test_spec_trees.cpp), the relaxed rules checked against their papers' tree forms
    // (tests/test_spec_tree_rules.cpp), and Medusa's typical acceptance is defined on them (Cai
    // et al., 2024, §2.3.1).
    check_param(r.draft != nullptr || r.medusa != nullptr, "tree",
                "{tree} is drafted by a draft model ({draft}); Jacobi drafts are chains");
    try {
      r.tree = speculative::load_tree_spec(tree);
    } catch (const ParameterError&) {
      throw;
    } catch (const Error& e) {
      throw ParameterError("tree", e.what());
    }
    r.tree_spec = tree;
    check_param(!(r.medusa && r.tree->dynamic()), "tree",
                "{tree} " + tree + ": " + (r.method.hawk ? "Hawk's" : "Medusa's") +
                    " heads draft static trees (a depth's candidates do not depend on "
                    "the parent); dynamic trees are drafted by a draft model or an EAGLE drafter");
  }
  r.note = speculative::validated_settings_note(opts.spec, d_->config.quality, d_->config.dir);
  return r;
}

void LlamaGenFamily::validate(const GenerateOptions& opts) {
  prepare(opts);
}

// What one generation runs, owned together: the checked options and method, the drafter, the
// draft-length policy and the decoder (which holds pointers to the others).
struct LlamaGenFamily::Run final : GenerationRun {
  LlamaGenFamily* family = nullptr;
  GenerateOptions opts;
  Prepared prep;
  std::unique_ptr<speculative::Drafter> drafter;
  std::optional<speculative::DraftLengthPolicy> policy;
  DraftCosts costs;  // --draft-len auto: the costs its policy chooses by (given or calibrated)
  int hold = 0;      // and the rounds it holds a chosen length for (resolved)
  std::unique_ptr<Decoder> decoder_;
  speculative::SpeculativeDecoder* speculative = nullptr;  // decoder_, when the method drafts
  // Other methods asked for, prepared once: prep is null for one that drafts otherwise (why).
  struct Joined {
    SpeculativeOptions spec;
    std::unique_ptr<Prepared> prep;
    std::string why_not;
  };
  std::vector<Joined> joined;

  Decoder& decoder() override { return *decoder_; }
  std::string drafts_otherwise(const SpeculativeOptions& spec) override {
    return spec == opts.spec ? "" : joined_method(spec).why_not;
  }
  void set_method(int id, const SpeculativeOptions& spec) override {
    const Prepared* p = spec == opts.spec ? nullptr : joined_method(spec).prep.get();
    check(spec == opts.spec || p, "internal: an image's method must draft as its generation's");
    if (speculative) speculative->set_rule(id, p ? p->method.rule.get() : nullptr);
  }

  const Joined& joined_method(const SpeculativeOptions& spec) {
    for (const Joined& j : joined)
      if (j.spec == spec) return j;
    GenerateOptions o = opts;
    o.spec = spec;
    auto p = std::make_unique<Prepared>(family->prepare(o));  // ParameterErrors: the method's own
    std::string why = difference(*p, spec);
    if (!why.empty()) p.reset();
    if (p && !p->note.empty() && std::find(notes.begin(), notes.end(), p->note) == notes.end())
      notes.push_back(p->note);
    joined.push_back({spec, std::move(p), std::move(why)});
    return joined.back();
  }

  // "" when `other` (prepared from `spec`) drafts as this run's method does, so that only their
  // acceptance rules differ: vanilla with vanilla; a speculative method with the same draft model
  // or heads (the same loaded object) or Jacobi window, draft length (auto or fixed), tree, Hawk
  // pools, drafting rounds and measured costs. Else what differs.
  std::string difference(const Prepared& other, const SpeculativeOptions& spec) const {
    const speculative::Method &a = prep.method, &b = other.method;
    auto drafter = [](const Prepared& p) -> std::string {
      if (!p.method.rule) return "no drafts";
      if (p.medusa) return (p.method.hawk ? "Hawk's heads " : "Medusa heads ") + p.spec_draft;
      if (p.draft) return "the draft model " + p.spec_draft;
      return "Jacobi windows";
    };
    auto length = [](const speculative::Method& m) {
      return m.auto_len ? "auto (up to " + std::to_string(m.draft_len) + ")"
                        : std::to_string(m.draft_len);
    };
    if (!a.rule || !b.rule || other.draft != prep.draft || other.medusa != prep.medusa)
      return !a.rule && !b.rule ? "" : drafter(other) + ", not " + drafter(prep);  // the drafter
    if (b.draft_len != a.draft_len || b.auto_len != a.auto_len)
      return "a draft length of " + length(b) + ", not " + length(a);
    if (other.tree_spec != prep.tree_spec) {
      auto tree = [](const std::string& t) { return t.empty() ? "chains" : "the tree " + t; };
      return tree(other.tree_spec) + ", not " + tree(prep.tree_spec);
    }
    if (b.hawk != a.hawk) return "other Hawk head counts or samples";
    if (spec.max_rounds != opts.spec.max_rounds)
      return "max_rounds " + std::to_string(spec.max_rounds) + ", not " +
             std::to_string(opts.spec.max_rounds);
    // Costs given as this run chooses by (as given, or as it calibrated them) draft alike; none
    // given would calibrate anew.
    if (spec.auto_costs != opts.spec.auto_costs && spec.auto_costs != costs)
      return "other auto_costs";
    if (spec.auto_hold != opts.spec.auto_hold && spec.auto_hold != hold) return "other auto_hold";
    return "";
  }
};

std::unique_ptr<GenerationRun> LlamaGenFamily::start(const GenerateOptions& opts, int max_images,
                                                     GenerateStats& st,
                                                     std::function<void(int64_t)> on_tokens) {
  auto run = std::make_unique<Run>();
  run->family = this;
  run->opts = opts;
  run->opts.progress = nullptr;  // the run's options prepare other methods; they run nothing
  run->opts.on_image = nullptr;
  run->opts.cancel = nullptr;
  run->prep = prepare(opts);
  Prepared& prep = run->prep;
  const SamplingParams& p = prep.p;
  const AutoregressiveModel* draft = prep.draft;
  const MedusaHeads* medusa = prep.medusa;
  speculative::Method& method = prep.method;
  max_images = std::max(max_images, 1);
  DecoderSettings ds;
  ds.sampling = p;
  ds.seed = opts.seed;
  ds.max_tokens = opts.max_tokens;
  ds.device_loop = opts.device_loop;
  ds.on_tokens = std::move(on_tokens);
  if (!method.rule) {
    run->decoder_ = std::make_unique<VanillaDecoder>(*d_->gpt, max_images, ds, st);
    return run;  // lossless: no note
  }
  if (!prep.note.empty()) run->notes.push_back(prep.note);
  // A static tree: a fixed draft length cuts it at that depth; auto sizes the drafter for the
  // whole tree and the policy below cuts each round's at the depth with the most expected tokens
  // per second (the node budget).
  const int draft_len = prep.tree && method.auto_len ? prep.tree->max_depth() : method.draft_len;
  std::unique_ptr<speculative::Drafter>& drafter = run->drafter;
  if (medusa && method.hawk) {
    drafter = std::make_unique<speculative::HawkDrafter>(
        *medusa, p, *method.hawk, *prep.tree->shape(), d_->config.gpt.n_image_tokens());
  } else if (medusa) {
    drafter =
        std::make_unique<speculative::MedusaDrafter>(*medusa, p, *prep.tree->shape(), max_images);
  } else if (draft) {
    speculative::FeatureInputs features;
    if (const auto* eagle = dynamic_cast<const EagleDrafterModel*>(draft))
      features = {eagle->feature(), eagle->prefix_token()};
    drafter = std::make_unique<speculative::ModelDrafter>(*draft, p, draft_len, max_images,
                                                          prep.tree, features);
  } else
    drafter = std::make_unique<speculative::JacobiDrafter>(d_->config.gpt.vocab_size, p);
  speculative::LoopSettings ls;
  ls.rule = method.rule.get();
  ls.drafter = drafter.get();
  ls.draft_len = draft_len;
  ls.max_rounds = opts.spec.max_rounds;
  ls.hold_depth = opts.spec.auto_hold;
  if (method.auto_len) {
    int depth = drafter->draft_depth(draft_len);
    speculative::RoundCosts rc;
    if (const speculative::TreeShape* shape = prep.tree ? prep.tree->shape() : nullptr) {
      const std::vector<int> children = shape->child_counts();  // [nodes()]: the root's
      speculative::set_tree_costs(rc, shape->depth, std::span(children).first(shape->depth.size()));
      // Hawk's product is cut by its nodes' values (HawkDrafter::keep_best), not whole depths.
      rc.valued = method.hawk.has_value() && medusa != nullptr;
    } else if (prep.tree) {
      // A dynamic tree cut at depth L keeps its best `total` of the candidates down to L; each
      // expansion feeds the top_k frontier.
      const speculative::DynamicTree& dt = *prep.tree->dynamic_tree();
      for (int d = 1; d <= dt.max_depth(); ++d) {
        rc.tree_nodes.push_back(dt.max_nodes(d));
        rc.tree_rows.push_back(d == 1 ? 1 : dt.top_k);
      }
      rc.valued = true;
    }
    // Positions one round verifies at depth L: the root and the chain's L drafts or the tree's
    // nodes down to depth L. The calibration measures at most the image's tokens per forward, so
    // a tree with more nodes is cut where its verification was measured.
    const int N = d_->config.gpt.n_image_tokens();
    auto positions = [&](int L) { return 1 + (rc.tree_nodes.empty() ? L : rc.tree_nodes[L - 1]); };
    while (depth > 1 && positions(depth) > N) --depth;
    DraftCosts costs = opts.spec.auto_costs;
    if (costs.verify.empty())
      costs = calibrated_draft_costs({d_->gpt.get(), &d_->config}, {draft, prep.draft_config},
                                     p.uses_cfg(), positions(depth));
    check_param(static_cast<int>(costs.verify.size()) >= positions(depth), "auto_costs",
                "has " + std::to_string(costs.verify.size()) +
                    " verification costs; --draft-len auto at depth " + std::to_string(depth) +
                    " needs " + std::to_string(positions(depth)));
    check_param(costs.draft_step >= 0.0, "auto_costs", "has a negative draft step");
    for (double v : costs.verify)
      check_param(v > 0.0, "auto_costs", "has a verification cost that is not positive");
    rc.verify = costs.verify;
    rc.draft_step = costs.draft_step;
    run->costs = costs;
    st.draft_costs = std::move(costs);
    run->policy.emplace(std::move(rc), depth, drafter->carries_drafts());
    ls.policy = &*run->policy;
  }
  st.tree = prep.tree_spec;
  auto decoder =
      std::make_unique<speculative::SpeculativeDecoder>(*d_->gpt, max_images, ds, ls, st);
  if (method.auto_len) st.draft_hold = run->hold = decoder->hold();
  run->speculative = decoder.get();
  run->decoder_ = std::move(decoder);
  return run;
}

std::vector<std::vector<int32_t>> LlamaGenFamily::generate(const std::vector<Condition>& conditions,
                                                           const GenerateOptions& opts,
                                                           GenerateStats* stats) {
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  const int N = d_->config.gpt.n_image_tokens();
  const int64_t total =
      static_cast<int64_t>(conditions.size()) * (opts.max_tokens > 0 ? opts.max_tokens : N);
  int64_t done = 0;
  std::vector<const Condition*> conds;
  std::vector<uint64_t> idx;
  for (size_t i = 0; i < conditions.size(); ++i) {
    conds.push_back(&conditions[i]);
    idx.push_back(opts.first_image_index + i);
  }
  const int max_images = static_cast<int>(std::min<size_t>(conditions.size(), opts.batch));
  const auto run = start(opts, max_images, st, [&](int64_t k) {
    done += k;
    if (opts.progress) opts.progress(done, total);
  });
  auto grids = generate_batches(run->decoder(), conds, idx, opts, st);
  st.notes.insert(st.notes.end(), run->notes.begin(), run->notes.end());
  return grids;
}

std::vector<float> LlamaGenFamily::forward_logits(const Condition& condition,
                                                  std::span<const int32_t> tokens) {
  return teacher_forced_logits(*d_->gpt, condition, tokens);
}

std::vector<float> LlamaGenFamily::decode_float(std::span<const int32_t> tokens, int n) {
  check(d_->vq != nullptr,
        "this model directory has no VQ decoder (vq.safetensors): its token grids cannot be "
        "decoded to pixels");
  const int grid = d_->config.gpt.grid;
  // One image at a time: every decoder op works per image (same numbers as a batch), and the
  // activations of a large request never have to fit in memory at once.
  const size_t per_image = static_cast<size_t>(grid) * grid;
  check(tokens.size() == per_image * static_cast<size_t>(std::max(n, 0)),
        "decode: expected " + std::to_string(per_image * std::max(n, 0)) + " tokens, got " +
            std::to_string(tokens.size()));
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    const Tensor y = d_->vq->decode(tokens.subspan(i * per_image, per_image), 1, grid);
    const std::vector<float> one = download_f32(*d_->backend, y);
    if (out.empty()) out.reserve(one.size() * static_cast<size_t>(n));
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

std::vector<uint8_t> LlamaGenFamily::decode(std::span<const int32_t> tokens, int n) {
  const int size = image_size();
  return to_pixels(decode_float(tokens, n), n, size, size);
}

}  // namespace tessera
