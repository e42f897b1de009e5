// gsd: grouped speculative decoding (GSD, So et al., 2025, §4, Alg. 3/5) over clusters of the
// target's ranked tokens. The rule is rules/gsd_rule.cpp.
#include "io/safetensors.h"
#include "speculative/method_params.h"
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"
#include "tensor/backend.h"

namespace tessera::speculative {

namespace {

struct GsdOptions {
  int g = 10;  // 14 with gsd.reference when not given (the code's fixed window)
  float d = 0.5f;
  float delta = 0.15f;
  std::string embedding = "tokens";
  bool reference = false;
};

std::vector<ParamSpec<GsdOptions>> specs() {
  using O = GsdOptions;
  return {
      ParamSpec<O>("gsd.g", &O::g, "Cluster size G (sorted ranks around the drafted token's)")
          .in(Range::at_least(2))
          .tune({3, 5, 10})
          .default_shown_as("10 (14 with --gsd-reference)"),
      ParamSpec<O>("gsd.d", &O::d, "Embedding-distance threshold d").in(Range::at_least(0)),
      ParamSpec<O>("gsd.delta", &O::delta, "Probability-gap threshold δ")
          .in(Range::closed(0, 1))
          .tune({0.05, 0.15, 0.3}),
      ParamSpec<O>("gsd.embedding", &O::embedding,
                   "Distance embedding: tokens (the target's input embeddings) or codebook")
          .one_of({"tokens", "codebook"}),
      ParamSpec<O>("gsd.reference", &O::reference,
                   "The published code's window of 14 and strict filters (docs/methods.md)")};
}

// The GSD distance embedding, [V, dim] f32.
std::shared_ptr<const std::vector<float>> gsd_embedding(const std::string& dir,
                                                        const std::string& which, int V, int* dim,
                                                        Backend& be) {
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
    Tensor c = be.upload(e.data(), DType::F32, {V, *dim});
    be.l2_normalize_rows(c, 1e-12f);
    be.download(c, e.data());
  }
  return std::make_shared<const std::vector<float>>(std::move(e));
}

}  // namespace

std::vector<MethodEntry> gsd_methods() {
  MethodEntry e;
  e.info = {"gsd", "Grouped speculative decoding: accept a cluster of like tokens (GSD §4)",
            TokenKind::Discrete, DraftSource::ModelOrJacobi, describe(specs(), GsdOptions{})};
  e.make_rule = [](const MethodParams& given, const TargetModel& target) {
    const GsdOptions o = read_params(specs(), given, GsdOptions{});
    int dim = 0;
    auto emb = gsd_embedding(target.dir, o.embedding, target.config.vocab_size, &dim, target.backend);
    const int g = given.count("gsd.g") || !o.reference ? o.g : 14;
    return make_gsd_rule({g, o.d, o.delta, o.reference}, emb, dim);
  };
  return {e};
}

}  // namespace tessera::speculative
