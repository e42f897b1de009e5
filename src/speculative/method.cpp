#include "speculative/method.h"

#include <algorithm>

#include "io/safetensors.h"
#include "speculative/rules/rules.h"
#include "tensor/backend.h"
#include "tessera/error.h"

namespace tessera::speculative {

const std::vector<std::string>& method_names() {
  static const std::vector<std::string> names = {"vanilla",   "sd",      "sjd",         "lantern",
                                                 "lantern++", "gsd",     "uniform-rsd", "cool-sd",
                                                 "amplify",   "addition"};
  return names;
}

namespace {

std::string list_methods() {
  std::string s;
  for (const auto& m : method_names()) s += (s.empty() ? "" : "|") + m;
  return s;
}

// The GSD distance embedding, [V, dim] f32.
std::shared_ptr<const std::vector<float>> gsd_embedding(const std::string& dir,
                                                        const std::string& which, int V, int* dim) {
  const bool tokens = which == "tokens";
  const std::string path = dir + (tokens ? "/gpt.safetensors" : "/vq.safetensors");
  const std::string name = tokens ? "tok_embeddings.weight" : "quantize.embedding.weight";
  SafeTensorsFile f = SafeTensorsFile::open(path);
  const SafeTensorInfo& t = f.get(name);
  check(t.shape.size() == 2 && t.shape[0] >= V,
        path + ": " + name + " must be [>= " + std::to_string(V) + ", dim]");
  *dim = static_cast<int>(t.shape[1]);
  std::vector<float> e = f.read_f32(name);
  e.resize(static_cast<size_t>(V) * *dim);
  if (!tokens) {  // LlamaGen looks codes up L2-normalised (as VqDecoder); compare them the same way
    Backend& be = cpu_backend();
    Tensor c = be.upload(e.data(), DType::F32, {V, *dim});
    be.l2_normalize_rows(c, 1e-12f);
    be.download(c, e.data());
  }
  return std::make_shared<const std::vector<float>>(std::move(e));
}

}  // namespace

Method make_method(const SpeculativeOptions& o, const std::string& target_dir,
                   const GptConfig& target) {
  const auto& names = method_names();
  check(std::find(names.begin(), names.end(), o.method) != names.end(),
        "--method: unknown method '" + o.method + "' (one of " + list_methods() + ")");
  Method m;
  m.name = o.method;
  const bool has_draft = !o.draft_model.empty();
  if (o.method == "vanilla") {
    check(!has_draft, "--draft is only used by speculative methods (not --method vanilla)");
    return m;
  }
  if (o.method == "sd")
    check(has_draft,
          "--method sd needs a draft model: --draft DIR (for drafts without a model, "
          "use --method sjd)");
  if (o.method == "sjd")
    check(!has_draft,
          "--method sjd drafts by Jacobi iteration; with a draft model use --method sd");
  m.draft_model = has_draft;
  check(o.draft_len >= 0, "--draft-len must be >= 1");
  m.draft_len = o.draft_len > 0 ? o.draft_len : (has_draft ? 5 : 16);
  check(has_draft || m.draft_len >= 2,
        "--draft-len: a Jacobi window needs at least 2 positions (the root and one draft)");
  check(o.resample.empty() || o.resample == "vanilla" || o.resample == "optimal",
        "--resample must be vanilla or optimal, got '" + o.resample + "'");
  const int V = target.vocab_size;

  if (o.method == "sd" || o.method == "sjd") {
    check(o.resample.empty() || o.resample == "vanilla",
          "--resample optimal only applies to relaxed rules (for exact SD, G* = Norm([p - q]+))");
    m.rule = make_exact_rule();
  } else if (o.method == "lantern" || o.method == "lantern++") {
    LanternParams lp;
    const bool pp = o.method == "lantern++";
    lp.k = o.lantern_k > 0 ? o.lantern_k : std::min(pp ? 10 : 1000, V - 1);
    check(o.lantern_k >= 0, "--lantern-k must be >= 1");
    check(lp.k <= V - 1, "--lantern-k " + std::to_string(lp.k) + " exceeds the " +
                             std::to_string(V - 1) + " other codes of the vocabulary");
    lp.reference = o.lantern_reference;
    if (pp) {
      check(o.lantern_lambda >= 1.0f, "--lantern-lambda must be >= 1");
      lp.lambda = o.lantern_lambda;
    } else {
      check(o.lantern_delta > 0.0f && o.lantern_delta <= 1.0f,
            "--lantern-delta must be in (0, 1] (a total-variation budget)");
      lp.delta = o.lantern_delta;
    }
    check(o.lantern_metric == "l2" || o.lantern_metric == "cosine",
          "--lantern-metric must be l2 or cosine, got '" + o.lantern_metric + "'");
    auto nb = std::make_shared<const LatentNeighbours>(LatentNeighbours::for_model(
        target_dir, lp.k + 1, o.lantern_metric == "l2" ? LatentMetric::L2 : LatentMetric::Cosine));
    check(nb->vocab() == V, target_dir + "/vq.safetensors: codebook has " +
                                std::to_string(nb->vocab()) + " codes, the GPT's vocabulary " +
                                std::to_string(V));
    m.rule = make_lantern_rule(lp, nb);
  } else if (o.method == "gsd") {
    check(o.gsd_g >= 2, "--gsd-g must be >= 2");
    check(o.gsd_d >= 0.0f, "--gsd-d must be >= 0");
    check(o.gsd_delta >= 0.0f && o.gsd_delta <= 1.0f, "--gsd-delta must be in [0, 1]");
    check(o.gsd_embedding == "tokens" || o.gsd_embedding == "codebook",
          "--gsd-embedding must be tokens or codebook, got '" + o.gsd_embedding + "'");
    int dim = 0;
    auto emb = gsd_embedding(target_dir, o.gsd_embedding, V, &dim);
    m.rule = make_gsd_rule({o.gsd_g, o.gsd_d, o.gsd_delta}, emb, dim);
  } else if (o.method == "uniform-rsd") {
    check(o.rsd_delta > 0.0f, "--rsd-delta must be > 0");
    m.rule = make_uniform_rsd_rule(o.rsd_delta);
  } else if (o.method == "cool-sd") {
    check(o.cool_delta > 0.0f, "--cool-delta must be > 0");
    check(o.cool_nu >= 0.0f, "--cool-nu must be >= 0");
    m.rule = make_cool_sd_rule(o.cool_delta, o.cool_nu);
  } else if (o.method == "amplify") {
    check(o.amplify_k >= 1.0f, "--amplify-k must be >= 1");
    m.rule = make_amplify_rule(o.amplify_k);
  } else if (o.method == "addition") {
    check(o.addition_eps >= 0.0f, "--addition-eps must be >= 0");
    m.rule = make_addition_rule(o.addition_eps);
  }
  // COOL-SD and UniformRSD are defined with G* (seed 004, Alg. 1 line 12); the others with their
  // own papers' residuals.
  const bool relaxed_default_optimal = o.method == "cool-sd" || o.method == "uniform-rsd";
  m.optimal_resampling = o.resample.empty() ? relaxed_default_optimal : o.resample == "optimal";
  if (m.optimal_resampling) m.rule = with_optimal_resampling(std::move(m.rule));
  return m;
}

}  // namespace tessera::speculative
