#include "method_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.h"
#include "tessera/methods.h"

namespace tessera::cli {

namespace {

// One flag: a parameter and the methods that have it, with their defaults.
struct FlagParam {
  ParamInfo info;
  std::vector<std::pair<std::string, std::string>> defaults;  // (method, default)
};

std::vector<FlagParam> flag_params() {
  std::vector<FlagParam> out;
  for (const MethodInfo& m : registered_methods())
    for (const ParamInfo& p : m.params) {
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const FlagParam& f) { return f.info.name == p.name; });
      if (it == out.end()) it = out.insert(out.end(), {p, {}});
      it->defaults.emplace_back(m.name, p.default_value);
    }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "Help (lantern, lantern++; >= 1; default 1000 for lantern, 10 for lantern++)", with the model's
// validated setting in place of the registry's default where it has one, since that is what runs:
// "default 30 for lantern (the model's validated setting; 62 without one), 10 for lantern++".
std::string flag_help(const FlagParam& f, const QualitySection& q) {
  std::vector<std::string> methods, values;
  for (const auto& [m, d] : f.defaults) {
    methods.push_back(m);
    std::string value = d;
    if (const auto s = q.methods.find(m); s != q.methods.end())
      if (const auto v = s->second.params.find(f.info.name); v != s->second.params.end())
        if (const std::string t = param_value_text(v->second); t != d)
          value = t + " (the model's validated setting; " + d + " without one)";
    values.push_back(value);
  }
  std::string h = f.info.help + " (" + join(methods, ", ");
  if (!f.info.range.empty()) h += "; " + f.info.range;
  if (f.info.type != ParamType::Switch) {
    const bool same = std::all_of(values.begin(), values.end(),
                                  [&](const std::string& v) { return v == values.front(); });
    std::vector<std::string> each;
    for (size_t i = 0; i < values.size(); ++i) each.push_back(values[i] + " for " + methods[i]);
    h += "; default " + (same ? values.front() : join(each, ", "));
  }
  return h + ")";
}

std::string methods_for(TokenKind tokens) {
  std::vector<std::string> names;
  for (const MethodInfo& m : registered_methods())
    if (m.tokens == tokens || m.tokens == TokenKind::Any) names.push_back(m.name);
  return join(names, "|");
}

std::string family(TokenKind t) {
  return t == TokenKind::Continuous ? "MAR" : "LlamaGen";
}

}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& names) {
  // Levenshtein distance; a name within a third of its length (at least 1, at most 3) or one the
  // word is a prefix of counts as meant.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& n : names) {
    const size_t d = n.rfind(word, 0) == 0 && word.size() >= 3 ? 1 : distance(word, n);
    if (d < best_d) {
      best = n;
      best_d = d;
    }
  }
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  return best_d <= limit ? best : "";
}

std::string param_text(const ParamValue& v) {
  return param_value_text(v, true);
}

std::vector<std::string> given_method_flags(const CLI::App& cmd) {
  std::vector<std::string> out;
  for (const char* f : {"--draft", "--draft-len", "--draft-hold", "--resample", "--tree"})
    if (cmd.count(f) > 0) out.push_back(f);
  for (const FlagParam& f : flag_params())
    if (cmd.count(flag_of(f.info.name)) > 0) out.push_back(flag_of(f.info.name));
  return out;
}

void check_method_flags(const CLI::App& cmd, const std::vector<std::string>& methods, bool mar,
                        const std::string& what) {
  const TokenKind kind = mar ? TokenKind::Continuous : TokenKind::Discrete;
  std::vector<const MethodInfo*> infos;
  std::vector<std::string> all;
  for (const MethodInfo& m : registered_methods()) all.push_back(m.name);
  for (const std::string& name : methods) {
    const MethodInfo* m = find_method(name);
    if (!m) {
      const std::string guess = closest(name, all);
      throw Error(what + " " + name + ": unknown method" +
                  (guess.empty() ? "" : " (did you mean " + guess + "?)") + "; " + family(kind) +
                  " methods: " + methods_for(kind));
    }
    if (m->tokens != TokenKind::Any && m->tokens != kind)
      throw Error(what + " " + name + " is for " + family(m->tokens) + " models only; this is a " +
                  family(kind) + " model (its methods: " + methods_for(kind) + ")");
    infos.push_back(m);
  }
  const bool any_drafts = std::any_of(infos.begin(), infos.end(), [](const MethodInfo* m) {
    return m->drafts != DraftSource::None;
  });
  std::string names = join(methods, ",");
  // The speculative flags a command has (bench has no --draft-costs).
  for (const char* f :
       {"--draft", "--draft-len", "--draft-costs", "--draft-hold", "--resample", "--tree"}) {
    const CLI::Option* given = cmd.get_option_no_throw(f);
    if (!given || given->count() == 0) continue;
    if (!any_drafts)
      throw Error(std::string(f) + " is for speculative methods; " + what + " " + names +
                  " drafts nothing");
    if (mar && std::string(f) == "--resample")
      throw Error("--resample is for LlamaGen methods; MAR's cspd methods resample their own way");
    if (mar && std::string(f) == "--tree")
      throw Error("--tree is for LlamaGen methods; MAR's cspd methods draft continuous windows");
    if (mar && std::string(f) == "--draft-costs")
      throw Error("--draft-costs is for LlamaGen methods; MAR's --draft-len auto is 8 steps");
    if (mar && std::string(f) == "--draft-hold")
      throw Error("--draft-hold is for LlamaGen methods; MAR's --draft-len auto is 8 steps");
  }
  for (const FlagParam& f : flag_params()) {
    const std::string flag = flag_of(f.info.name);
    if (cmd.count(flag) == 0) continue;
    const bool used = std::any_of(infos.begin(), infos.end(), [&](const MethodInfo* m) {
      return std::any_of(m->params.begin(), m->params.end(),
                         [&](const ParamInfo& p) { return p.name == f.info.name; });
    });
    if (!used) {
      std::vector<std::string> owners;
      for (const auto& [m, d] : f.defaults) owners.push_back(m);
      throw Error(flag + " is a parameter of " + join(owners, ", ") + "; " + what + " " + names +
                  " does not use it");
    }
  }
}

std::string flag_of(const std::string& param) {
  if (param == "auto_costs") return "--draft-costs";  // the library's name for them
  if (param == "auto_hold") return "--draft-hold";
  std::string f = "--" + param;
  std::replace(f.begin(), f.end(), '.', '-');
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

void throw_sweep_error(const std::string& m, const ParameterError& e, bool swept_draft_lens,
                       bool swept_batches, bool swept_trees) {
  throw Error("--methods " + m + ": " + e.message([&](const std::string& p) {
    if (p == "draft_len" && swept_draft_lens) return std::string("--draft-lens");
    if (p == "batch" && swept_batches) return std::string("--batches");
    if (p == "tree" && swept_trees) return std::string("--trees");
    return flag_of(p);
  }));
}

int parse_draft_len(const std::string& v, const char* flag) {
  if (v == "auto") return kDraftLenAuto;
  try {
    return parse_int(v, flag);
  } catch (const Error&) {
    throw Error(std::string(flag) + ": '" + v + "' is neither auto nor a positive integer");
  }
}

std::string draft_len_text(int draft_len) {
  return draft_len == kDraftLenAuto ? "auto"
         : draft_len > 0            ? std::to_string(draft_len)
                                    : "default";
}

DraftCosts parse_draft_costs(const std::string& v, const char* flag) {
  auto bad = [&](const std::string& why) {
    return Error(std::string(flag) + " '" + v + "': " + why +
                 " (D:V1,V2,...: the seconds of one draft step, then of the target forwards of "
                 "1, 2, ... positions)");
  };
  auto number = [&](const std::string& text) {
    char* end = nullptr;
    const double x = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(x))
      throw bad("'" + text + "' is not a number");
    return x;
  };
  const size_t colon = v.find(':');
  if (colon == std::string::npos) throw bad("no ':' after the draft step's seconds");
  DraftCosts c;
  c.draft_step = number(v.substr(0, colon));
  for (size_t at = colon + 1;;) {
    const size_t comma = v.find(',', at);
    c.verify.push_back(number(v.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return c;
}

std::string draft_costs_text(const DraftCosts& costs) {
  std::string s = param_value_text(costs.draft_step, /*exact=*/true) + ":";
  for (size_t i = 0; i < costs.verify.size(); ++i)
    s += (i ? "," : "") + param_value_text(costs.verify[i], /*exact=*/true);
  return s;
}

bool uses_draft_model(const std::string& method) {
  const MethodInfo* m = find_method(method);
  return m && (m->drafts == DraftSource::DraftModel || m->drafts == DraftSource::ModelOrJacobi);
}

void add_method_flags(CLI::App* cmd, SpeculativeOptions& o, const ModelDefaults& md) {
  cmd->add_option(
         "--method", o.method,
         "Decoding method (docs/methods.md); LlamaGen: " + methods_for(TokenKind::Discrete) +
             "; MAR: " + methods_for(TokenKind::Continuous))
      ->capture_default_str();
  cmd->add_option(
         "--draft", o.draft_model,
         "Draft model directory (same VQ vocabulary) for the methods that draft with a "
         "model, or Medusa's or Hawk's heads for this target (that method's rule on their "
         "trees, e.g. lantern++: Hawk's \"Medusa with LANTERN++\"); none: Jacobi iteration (the "
         "target drafts for itself); default: " +
             (md.draft.empty() ? std::string("the draft the model's config.json names, else Jacobi "
                                             "iteration")
                               : md.draft + ", named in the model's config.json"))
      ->type_name("DIR|none");
  o.draft_len = kDraftLenAuto;  // the CLI's default: cost-aware lengths
  cmd->add_option_function<std::string>(
         "--draft-len",
         [&o](const std::string& v) {
           try {
             o.draft_len = parse_draft_len(v, "--draft-len");
           } catch (const Error& e) {  // a parse error: reported like CLI11's own
             throw CLI::ValidationError(e.what());
           }
         },
         "auto (default): each round drafts the length with the most expected tokens per second, "
         "from this machine's measured forward costs (cached in ~/.cache/tessera) and the "
         "image's acceptance so far (up to 16 drafts; Jacobi: a 32-token window); or drafts per "
         "round (with Jacobi drafts the window incl. the last token); MAR: steps per draft "
         "window (auto: 8)")
      ->type_name("auto|INT");
  cmd->add_option("--draft-hold", o.auto_hold,
                  "The most rounds --draft-len auto holds a chosen length for, doubling while the "
                  "choice repeats (spans are powers of two up to this, each ending on a multiple "
                  "of its length; default: 32 where rounds run in bursts on the device loop: a "
                  "draft model's chains, Jacobi windows; else 1); generate stores the one it used "
                  "with each image, so --from-png repeats its lengths on either loop")
      ->check(CLI::Range(1, kMaxDraftHold));
  cmd->add_option("--resample", o.resample,
                  "Resampling at a rejection: vanilla (the method's own) or optimal (G*, COOL-SD "
                  "Eq. 5); default: optimal for cool-sd/uniform-rsd, vanilla otherwise");
  cmd->add_option(
         "--tree", o.tree,
         "Draft a tree and verify it in one target forward (any method with a draft model, "
         "EAGLE drafter or Medusa heads; every rule; medusa's default: the chain of its heads' "
         "top-1 tokens): a static one, chain:N, kary:B1,B2,..., naive_extend_57 (LANTERN++), "
         "mc_sim_7b_63 (EAGLE-1), medusa_2_7b_63, or a JSON file of EAGLE choices; or EAGLE-2's "
         "dynamic tree (not Medusa), dynamic[:DEPTH,TOPK,TOTAL] (default 4,10,58: the root's "
         "TOPK children, DEPTH expansions of the TOPK most likely paths, the TOTAL best nodes "
         "kept); --draft-len N cuts it at depth N, auto cuts each round's at the depth with the "
         "most expected tokens per second (a dynamic tree: then keeps, of its best nodes, those "
         "whose values, EAGLE-2's path confidences, pay for their verification)")
      ->type_name("SPEC");
  MethodParams& params = o.params;
  for (const FlagParam& f : flag_params()) {
    const std::string name = f.info.name, flag = flag_of(name), help = flag_help(f, md.quality);
    switch (f.info.type) {
      case ParamType::Switch:
        cmd->add_flag_function(
            flag, [&params, name](int64_t count) { params[name] = count > 0; }, help);
        break;
      case ParamType::Int:
        cmd->add_option_function<int64_t>(
            flag, [&params, name](const int64_t& v) { params[name] = v; }, help);
        break;
      case ParamType::Real:
        cmd->add_option_function<double>(
            flag, [&params, name](const double& v) { params[name] = v; }, help);
        break;
      case ParamType::Choice:
        cmd->add_option_function<std::string>(
               flag, [&params, name](const std::string& v) { params[name] = v; }, help)
            ->type_name(join(f.info.choices, "|"));
        break;
    }
  }
}

}  // namespace tessera::cli
