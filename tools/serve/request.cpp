#include "request.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/methods.h"

namespace tessera::serve {

namespace {

using json = nlohmann::json;

// A method parameter's value from JSON, by the parameter's type (tessera/methods.h).
ParamValue param_value(const ParamInfo& p, const json& v) {
  const std::string field = "params." + p.name;
  switch (p.type) {
    case ParamType::Switch:
      if (!v.is_boolean()) throw HttpError{400, field + " must be true or false", field};
      return v.get<bool>();
    case ParamType::Int:
      if (!v.is_number_integer()) throw HttpError{400, field + " must be an integer", field};
      return v.get<int64_t>();
    case ParamType::Real:
      if (!v.is_number()) throw HttpError{400, field + " must be a number", field};
      return v.get<double>();
    case ParamType::Choice:
      if (!v.is_string()) throw HttpError{400, field + " must be a string", field};
      return v.get<std::string>();
  }
  throw HttpError{400, field + ": unknown type", field};
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> served_methods(const ServeOptions& o) {
  std::vector<std::string> out;
  for (const auto& [m, draft] : o.methods) out.push_back(m);
  if (out.empty()) out.push_back(o.gen.spec.method);
  return out;
}

std::shared_ptr<Job> parse_request(const std::string& body, const RequestContext& c) {
  const ServeOptions& o = c.options;
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw HttpError{400, "the body is not valid JSON", ""};
  if (!j.is_object()) throw HttpError{400, "the body must be a JSON object", ""};
  auto field = [&](const char* k) -> const json* {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  auto job = std::make_shared<Job>();
  int n = 1;
  if (const json* v = field("n")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > o.max_n)
      throw HttpError{400, "n must be an integer in [1, " + std::to_string(o.max_n) + "]", "n"};
    n = v->get<int>();
  }
  uint64_t seed = 0;
  if (const json* v = field("seed")) {
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      throw HttpError{400, "seed must be a non-negative integer", "seed"};
    seed = v->get<uint64_t>();
  }
  if (const json* v = field("size")) {
    const std::string want = std::to_string(c.image_size) + "x" + std::to_string(c.image_size);
    if (!v->is_string() || v->get<std::string>() != want)
      throw HttpError{400, "size: this model makes " + want + " images", "size"};
  }
  if (const json* v = field("response_format"))
    if (!v->is_string() || v->get<std::string>() != "b64_json")
      throw HttpError{400, "response_format: only b64_json is served", "response_format"};
  if (const json* v = field("stream")) {
    if (!v->is_boolean()) throw HttpError{400, "stream must be true or false", "stream"};
    job->stream = v->get<bool>();
  }

  // The settings: the server's, with what the request changes. Another method than the server's
  // starts from that method's defaults (the server's parameters and resampling are for its own
  // method); one that drafts with the server's drafter drafts as the server's method does (its
  // draft length and tree), so that their requests share a batch (Generation::joins).
  GenerateOptions& g = job->opts;
  g = o.gen;
  g.progress = nullptr;
  g.on_image = nullptr;
  g.cancel = nullptr;
  if (const json* v = field("method")) {
    const std::vector<std::string> methods = served_methods(o);
    if (!v->is_string() ||
        std::find(methods.begin(), methods.end(), v->get<std::string>()) == methods.end())
      throw HttpError{400, "method: this server runs " + joined(methods), "method"};
    const std::string m = v->get<std::string>();
    if (m != o.gen.spec.method) {
      const SpeculativeOptions& own = o.gen.spec;
      g.spec = SpeculativeOptions{};
      g.spec.method = m;
      g.spec.draft_model = o.methods.at(m);
      if (own.method != "vanilla" && g.spec.draft_model == own.draft_model && m != "vanilla") {
        g.spec.draft_len = own.draft_len;
        g.spec.max_auto_len = own.max_auto_len;
        g.spec.auto_costs = own.auto_costs;
        g.spec.auto_hold = own.auto_hold;
        g.spec.tree = own.tree;
        g.spec.max_rounds = own.max_rounds;
      }
    }
  }
  if (const json* v = field("params")) {
    if (!v->is_object()) throw HttpError{400, "params must be an object", "params"};
    const MethodInfo* info = find_method(g.spec.method);
    for (const auto& [name, value] : v->items()) {
      const ParamInfo* p = nullptr;
      for (const ParamInfo& q : info->params)
        if (q.name == name) p = &q;
      if (!p) {
        std::vector<std::string> names;
        for (const ParamInfo& q : info->params) names.push_back(q.name);
        throw HttpError{400,
                        "params." + name + ": method " + g.spec.method + " has " +
                            (names.empty() ? "no parameters" : "parameters " + joined(names)),
                        "params." + name};
      }
      const ParamValue pv = param_value(*p, value);
      try {
        p->check(pv);
      } catch (const ParameterError& e) {
        throw HttpError{400, e.message([](const std::string& s) { return "params." + s; }),
                        "params." + name};
      }
      g.spec.params[name] = pv;
    }
  }
  if (const json* v = field("draft_len")) {
    if (v->is_string() && v->get<std::string>() == "auto") {
      g.spec.draft_len = kDraftLenAuto;
    } else if (v->is_number_integer() && v->get<int64_t>() >= 1 && v->get<int64_t>() <= 64) {
      g.spec.draft_len = v->get<int>();
      g.spec.auto_hold = 0;  // the server's hold is for its auto lengths
    } else {
      throw HttpError{400, "draft_len must be an integer in [1, 64] or \"auto\"", "draft_len"};
    }
  }
  if (const json* v = field("draft_costs")) {
    // As a response gives them (tessera.draft_costs): the seconds of one draft step and of the
    // target forwards of 1, 2, ... positions; the batch then skips its calibration.
    const std::string shape =
        "draft_costs must be {\"draft_step\": seconds, \"verify\": [seconds of 1, 2, ... "
        "positions]}, as a response's tessera.draft_costs";
    if (g.spec.draft_len != kDraftLenAuto)
      throw HttpError{400, "draft_costs applies to draft_len \"auto\"", "draft_costs"};
    if (!v->is_object() || !v->contains("verify") || !(*v)["verify"].is_array() ||
        (*v)["verify"].empty() || !v->contains("draft_step"))
      throw HttpError{400, shape, "draft_costs"};
    DraftCosts costs;
    for (const json& x : (*v)["verify"]) {
      if (!x.is_number() || !(x.get<double>() > 0.0) || !std::isfinite(x.get<double>()))
        throw HttpError{400, "draft_costs.verify must hold positive seconds", "draft_costs"};
      costs.verify.push_back(x.get<double>());
    }
    // Required: a draft step left at 0 would make drafting look free (the longest drafts).
    const json& d = (*v)["draft_step"];
    if (!d.is_number() || !(d.get<double>() >= 0.0) || !std::isfinite(d.get<double>()))
      throw HttpError{400, "draft_costs.draft_step must be non-negative seconds", "draft_costs"};
    costs.draft_step = d.get<double>();
    for (const auto& [k, x] : v->items())
      if (k != "verify" && k != "draft_step") throw HttpError{400, shape, "draft_costs"};
    g.spec.auto_costs = std::move(costs);
  }
  if (const json* v = field("draft_hold")) {
    // As a response gives it (tessera.draft_hold): with the costs, the lengths repeat.
    if (g.spec.draft_len != kDraftLenAuto)
      throw HttpError{400, "draft_hold applies to draft_len \"auto\"", "draft_hold"};
    if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > kMaxDraftHold)
      throw HttpError{
          400,
          "draft_hold must be an integer in [1, " + std::to_string(kMaxDraftHold) + "] (rounds)",
          "draft_hold"};
    g.spec.auto_hold = v->get<int>();
  }
  // As the CLI refuses --draft-len there: a method that drafts nothing has no draft length.
  if (field("draft_len") && find_method(g.spec.method)->drafts == DraftSource::None)
    throw HttpError{
        400, "draft_len is for speculative methods; method " + g.spec.method + " drafts nothing",
        "draft_len"};
  // Sampling: guidance, temperature, top-k, top-p; the engine checks the rest of each range.
  SamplingOptions& s = g.sampling;
  s = resolve_sampling(s, c.config.sampling);
  if (const json* v = field("cfg")) {
    if (!v->is_number() || v->get<double>() < 0.0 || v->get<double>() > 100.0)
      throw HttpError{400, "cfg must be a number in [0, 100]", "cfg"};
    s.cfg_scale = v->get<float>();
  }
  if (const json* v = field("temperature")) {
    if (!v->is_number() || v->get<double>() <= 0.0 || v->get<double>() > 100.0)
      throw HttpError{400, "temperature must be a number in (0, 100]", "temperature"};
    s.temperature = v->get<float>();
  }
  if (const json* v = field("top_k")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > c.config.gpt.vocab_size)
      throw HttpError{400,
                      "top_k must be an integer in [0, " + std::to_string(c.config.gpt.vocab_size) +
                          "] (0: off)",
                      "top_k"};
    s.top_k = v->get<int>();
  }
  if (const json* v = field("top_p")) {
    if (!v->is_number() || v->get<double>() <= 0.0 || v->get<double>() > 1.0)
      throw HttpError{400, "top_p must be a number in (0, 1] (1: off)", "top_p"};
    s.top_p = v->get<float>();
  }
  json params = json::object();
  for (const auto& [k, v] : g.spec.params) params[k] = param_value_text(v, true);
  // The batch's key: the method and its parameters, and whether the sampling guides and is
  // greedy (they shape the batch); the sampling values themselves are each image's own, so
  // requests that differ only in them share forwards.
  job->settings = json{
      {"method", g.spec.method},
      {"draft", g.spec.draft_model},
      {"draft_len", g.spec.draft_len},
      {"draft_costs",
       {{"draft_step", g.spec.auto_costs.draft_step}, {"verify", g.spec.auto_costs.verify}}},
      {"draft_hold", g.spec.auto_hold},
      {"tree", g.spec.tree},
      {"resample", g.spec.resample},
      {"params", params},
      {"guided", s.cfg_scale > 1.0f},
      {"greedy",
       s.temperature <=
           0.0f}}.dump();

  int class_id = -1;
  std::string label;
  const json* prompt = field("prompt");
  const json* cls = field("class");
  const int classes = c.config.gpt.num_classes;
  if (prompt && cls) throw HttpError{400, "give prompt or class, not both", "class"};
  if (cls) {
    if (!cls->is_number_integer() || cls->get<int64_t>() < 0 || cls->get<int64_t>() >= classes)
      throw HttpError{400, "class must be an integer in [0, " + std::to_string(classes) + ")",
                      "class"};
    class_id = cls->get<int>();
    label = c.names ? c.names->label(class_id) : "class " + std::to_string(class_id);
  } else if (prompt && !c.config.gpt.is_c2i()) {
    // A text-conditional model: the engine thread encodes the prompt with the text encoder
    // (Generation::add), so the device is used by that thread alone.
    if (!prompt->is_string() || prompt->get<std::string>().empty())
      throw HttpError{400, "prompt must be a non-empty string", "prompt"};
    if (field("style"))
      throw HttpError{400, "style picks a class's drawing; this is a t2i model", "style"};
    const std::string text = prompt->get<std::string>();
    for (int i = 0; i < n; ++i) {
      job->images.push_back({Condition::text(text), seed, static_cast<uint64_t>(i), s, g.spec});
      job->labels.push_back(text);
    }
  } else if (prompt) {
    if (!prompt->is_string() || prompt->get<std::string>().empty())
      throw HttpError{400, "prompt must be a non-empty string", "prompt"};
    if (!c.names)
      throw HttpError{400, "this model has no class names (classes.json): give class", "prompt"};
    std::string style;
    if (const json* v = field("style")) {
      if (!v->is_string()) throw HttpError{400, "style must be a string", "style"};
      style = v->get<std::string>();
    }
    try {
      class_id = c.names->match(prompt->get<std::string>(), style).class_id;
    } catch (const Error& e) {
      throw HttpError{400, e.what(), "prompt"};
    }
    label = c.names->label(class_id);
  } else {
    throw HttpError{400, "give prompt (or class)", "prompt"};
  }
  const bool by_class = job->images.empty();  // a typed prompt's images are in already
  for (int i = 0; by_class && i < n; ++i) {
    job->images.push_back({Condition::label(class_id), seed, static_cast<uint64_t>(i), s, g.spec});
    job->labels.push_back(label);
  }
  job->tokens.resize(n);
  job->stats.resize(n);
  job->previewed.resize(n);
  return job;
}

}  // namespace tessera::serve
