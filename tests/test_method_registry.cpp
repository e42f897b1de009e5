// The method registry (src/speculative/method_registry.h, tessera/methods.h): its descriptions are
// consistent, and every bad parameter is a ParameterError that names the parameter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "speculative/method.h"
#include "speculative/method_registry.h"
#include "tensor/backend.h"
#include "tessera/error.h"
#include "tessera/methods.h"

using namespace tessera;

namespace {

GptConfig target_config() {
  GptConfig c;
  c.vocab_size = 256;
  c.grid = 16;  // 256 tokens: room for the default draft lengths (bounded by the image)
  return c;
}

SpeculativeOptions options(const std::string& method, MethodParams params) {
  SpeculativeOptions o;
  o.method = method;
  o.params = std::move(params);
  return o;
}

// The ParameterError that make_method throws for `o` (fails the test when there is none).
ParameterError discrete_error(const SpeculativeOptions& o) {
  try {
    speculative::make_method(o, "/nonexistent", target_config(), cpu_backend());
  } catch (const ParameterError& e) {
    return e;
  }
  ADD_FAILURE() << "no ParameterError for method " << o.method;
  return ParameterError("none", "none");
}

}  // namespace

TEST(MethodRegistry, NamesAndParametersAreConsistent) {
  std::set<std::string> names;
  std::map<std::string, ParamType> types;
  for (const MethodInfo& m : registered_methods()) {
    EXPECT_TRUE(names.insert(m.name).second) << "duplicate method " << m.name;
    EXPECT_FALSE(m.summary.empty()) << m.name;
    EXPECT_EQ(find_method(m.name), &m);
    std::set<std::string> own;
    for (const ParamInfo& p : m.params) {
      EXPECT_TRUE(own.insert(p.name).second) << m.name << " declares " << p.name << " twice";
      EXPECT_FALSE(p.help.empty()) << p.name;
      EXPECT_FALSE(p.default_value.empty()) << p.name;
      EXPECT_EQ(p.type == ParamType::Choice, !p.choices.empty()) << p.name;
      // One name, one meaning: a parameter shared by methods has one type.
      const auto [it, fresh] = types.emplace(p.name, p.type);
      EXPECT_TRUE(fresh || it->second == p.type) << p.name << " changes type in " << m.name;
      for (char c : p.name)
        EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_')
            << p.name;
    }
  }
  for (const char* m : {"vanilla", "sd", "sjd", "eagle", "medusa", "medusa-typical", "hawk",
                        "hawk-vertical", "lantern", "lantern++", "gsd", "uniform-rsd", "cool-sd",
                        "amplify", "addition", "cspd", "cspd-reference", "cspd-exact"})
    EXPECT_NE(find_method(m), nullptr) << m;
  EXPECT_EQ(find_method("hydra"), nullptr);
}

TEST(MethodRegistry, DescribesDefaultsAndRanges) {
  auto param = [](const std::string& method, const std::string& name) {
    for (const ParamInfo& p : find_method(method)->params)
      if (p.name == name) return p;
    ADD_FAILURE() << method << " has no " << name;
    return ParamInfo{};
  };
  EXPECT_EQ(param("lantern", "lantern.k").default_value,
            "1000 x vocabulary / 16384 (62 for 1024 codes)");
  EXPECT_EQ(param("lantern++", "lantern.lambda_rule").choices,
            (std::vector<std::string>{"paper", "code"}));
  EXPECT_EQ(param("lantern++", "lantern.k").default_value, "10");
  EXPECT_EQ(param("lantern", "lantern.delta").range, "(0, 1]");
  EXPECT_EQ(param("gsd", "gsd.g").range, ">= 2");
  EXPECT_EQ(param("gsd", "gsd.embedding").choices,
            (std::vector<std::string>{"tokens", "codebook"}));
  EXPECT_EQ(param("cool-sd", "cool.nu").default_value, "2.8 / (L - 1) (0.7 at L = 5)");
  EXPECT_EQ(param("cspd-exact", "cspd.test_step").default_value, "half way");
  EXPECT_EQ(param("lantern", "lantern.reference").type, ParamType::Switch);
  EXPECT_EQ(find_method("sd")->drafts, DraftSource::DraftModel);
  EXPECT_EQ(find_method("sjd")->drafts, DraftSource::Jacobi);
  EXPECT_EQ(find_method("cspd")->tokens, TokenKind::Continuous);
}

TEST(MethodRegistry, OutOfRangeValuesNameTheParameter) {
  struct Case {
    std::string method, param;
    ParamValue value;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"gsd", "gsd.g", int64_t{1}, "gsd.g must be >= 2"},
      {"gsd", "gsd.delta", 1.5, "gsd.delta must be in [0, 1]"},
      {"gsd", "gsd.embedding", std::string("clip"),
       "gsd.embedding must be tokens or codebook, got 'clip'"},
      {"lantern", "lantern.k", int64_t{0}, "lantern.k must be >= 1"},
      {"lantern", "lantern.k", int64_t{300}, "lantern.k 300 exceeds the 255 other codes"},
      {"lantern", "lantern.delta", 0.0, "lantern.delta must be in (0, 1]"},
      {"lantern++", "lantern.lambda", 0.0, "lantern.lambda must be > 0"},
      {"uniform-rsd", "rsd.delta", 0.0, "rsd.delta must be > 0"},
      {"cool-sd", "cool.nu", -0.5, "cool.nu must be >= 0"},
      {"amplify", "amplify.k", 0.5, "amplify.k must be >= 1"},
      {"addition", "addition.eps", -0.1, "addition.eps must be >= 0"},
      // The wrong type for the parameter.
      {"lantern", "lantern.k", 2.5, "lantern.k must be an integer"},
      {"gsd", "gsd.d", std::string("far"), "gsd.d must be a number"},
      {"lantern", "lantern.reference", int64_t{1}, "lantern.reference is a switch"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method + " " + c.param);
    const ParameterError e = discrete_error(options(c.method, {{c.param, c.value}}));
    EXPECT_EQ(e.param(), c.param);
    EXPECT_EQ(std::string(e.what()).rfind(c.what, 0), 0u) << e.what();
  }
}

// LANTERN++'s two λ conventions (docs/methods.md): the code's S <= (λ - 1) p(x~) needs λ >= 1.
TEST(MethodRegistry, LambdaConventionBoundsLambda) {
  const ParameterError e = discrete_error(options(
      "lantern++", {{"lantern.lambda", 0.5}, {"lantern.lambda_rule", std::string("code")}}));
  EXPECT_EQ(e.param(), "lantern.lambda");
  EXPECT_EQ(std::string(e.what()).rfind("lantern.lambda must be >= 1 with the code's rule", 0), 0u)
      << e.what();
  EXPECT_EQ(
      discrete_error(options("lantern++", {{"lantern.lambda", 0.5}, {"lantern.reference", true}}))
          .param(),
      "lantern.lambda");  // --lantern-reference implies the code's rule
}

TEST(MethodRegistry, GenericOptionsNameTheirParameter) {
  SpeculativeOptions o = options("sd", {});
  EXPECT_EQ(discrete_error(o).param(), "draft");  // sd needs a draft model
  o.method = "sjd";
  o.draft_len = 1;
  EXPECT_EQ(discrete_error(o).param(), "draft_len");  // a Jacobi window needs 2 positions
  o.draft_len = 0;
  o.resample = "optimal";
  EXPECT_EQ(discrete_error(o).param(), "resample");  // exact rules have no G*
  o = options("cspd", {});
  EXPECT_EQ(discrete_error(o).param(), "method");  // a MAR method on a LlamaGen model
  o.method = "hydra";
  const ParameterError e = discrete_error(o);
  EXPECT_EQ(e.param(), "method");
  EXPECT_NE(std::string(e.what()).find("cool-sd"), std::string::npos) << e.what();
}

// --draft-len auto resolves to the longest length it may choose, capped by the image; a maximum
// outside the image's range names max_auto_len.
TEST(MethodRegistry, AutoDraftLengthResolvesToItsMaximum) {
  SpeculativeOptions o = options("sjd", {});
  o.draft_len = kDraftLenAuto;
  const int n = target_config().n_image_tokens();
  speculative::Method m = speculative::make_method(o, "/x", target_config(), cpu_backend());
  EXPECT_TRUE(m.auto_len);
  EXPECT_EQ(m.draft_len, std::min(32, n));
  o.max_auto_len = 4;
  EXPECT_EQ(speculative::make_method(o, "/x", target_config(), cpu_backend()).draft_len, 4);
  o.max_auto_len = 1;  // a Jacobi window needs 2 positions
  EXPECT_EQ(discrete_error(o).param(), "max_auto_len");
  o = options("sjd", {});
  EXPECT_FALSE(speculative::make_method(o, "/x", target_config(), cpu_backend()).auto_len);
}

TEST(MethodRegistry, OtherMethodsParametersAreIgnoredUnknownOnesRefused) {
  // gsd.g = 1 would be refused by gsd; sjd has no such parameter and ignores it.
  const auto m = speculative::make_method(options("sjd", {{"gsd.g", int64_t{1}}}), "/x",
                                          target_config(), cpu_backend());
  EXPECT_NE(m.rule, nullptr);
  EXPECT_EQ(m.draft_len, 16);
  try {
    speculative::make_method(options("sjd", {{"gsd.gg", int64_t{1}}}), "/x", target_config(),
                             cpu_backend());
    ADD_FAILURE() << "an unknown parameter name was accepted";
  } catch (const ParameterError&) {
    ADD_FAILURE() << "an unknown name is no parameter to name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gsd.gg"), std::string::npos) << e.what();
  }
}

TEST(MethodRegistry, ContinuousMethodsResolveAndValidate) {
  ContinuousSpecOptions o;
  EXPECT_FALSE(speculative::make_cspd_settings(o).has_value());  // vanilla
  o.method = "cspd-exact";
  o.draft_model = "/draft";
  o.params = {{"prefill", 0.25}, {"cspd.test_step", int64_t{30}}};
  const auto s = speculative::make_cspd_settings(o);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->variant, cspd::Variant::Exact);
  EXPECT_FLOAT_EQ(s->prefill, 0.25f);
  EXPECT_EQ(s->test_step, 30);
  EXPECT_EQ(s->draft_len, 8);
  // The exact variant's residual sampler has no cap: the parameter is the lossy variants' only.
  for (const ParamInfo& p : find_method("cspd-exact")->params)
    EXPECT_NE(p.name, "max_resample_tries");
  o.method = "cspd";
  o.params = {{"max_resample_tries", int64_t{7}}};
  EXPECT_EQ(speculative::make_cspd_settings(o)->max_resample_tries, 7);
  auto error_of = [](const ContinuousSpecOptions& c) {
    try {
      speculative::make_cspd_settings(c);
    } catch (const ParameterError& e) {
      return e.param() + ": " + e.what();
    }
    return std::string("no error");
  };
  o.params = {{"prefill", 1.5}};
  EXPECT_EQ(error_of(o), "prefill: prefill must be in [0, 1]");
  o.params = {{"max_resample_tries", int64_t{0}}};
  EXPECT_EQ(error_of(o), "max_resample_tries: max_resample_tries must be >= 1");
  o.method = "cspd-reference";
  o.params = {{"inner_temperature", 0.0}};
  EXPECT_EQ(error_of(o), "inner_temperature: inner_temperature must be > 0");
  o.params = {};
  o.draft_model.clear();
  EXPECT_EQ(error_of(o), "draft: method cspd-reference needs draft DIR");
  o.method = "lantern";
  EXPECT_EQ(error_of(o).rfind("method: ", 0), 0u);
}

TEST(MethodRegistry, ParameterErrorSpellsNamesForAFrontEnd) {
  const ParameterError plain("lantern.k", "must be >= 1");
  EXPECT_STREQ(plain.what(), "lantern.k must be >= 1");
  auto flag = [](const std::string& n) { return "--" + n; };
  EXPECT_EQ(plain.message(flag), "--lantern.k must be >= 1");
  const ParameterError marked("draft", "{method} sd needs {draft} DIR (see {x y} and {})");
  EXPECT_STREQ(marked.what(), "method sd needs draft DIR (see {x y} and {})");
  EXPECT_EQ(marked.message(flag), "--method sd needs --draft DIR (see {x y} and {})");
}

TEST(MethodRegistry, ExactValueTextReadsBackAsTheSameValue) {
  // Settings that must reproduce a run (PNG parameters, --draft-costs) are stored exactly and as
  // short as that allows; the text for people rounds.
  EXPECT_EQ(param_value_text(ParamValue{0.1}, true), "0.1");
  EXPECT_EQ(param_value_text(ParamValue{10.0}, true), "10");
  EXPECT_EQ(param_value_text(ParamValue{1.0 / 3.0}, false), "0.333333");
  for (const double x : {1.0 / 3.0, 0.0017951599998, 1e-300, 123456789.125, -2.5e-7}) {
    const std::string t = param_value_text(ParamValue{x}, true);
    EXPECT_EQ(std::strtod(t.c_str(), nullptr), x) << t;
    EXPECT_LE(t.size(), 24u) << t;
  }
  EXPECT_EQ(param_value_text(ParamValue{int64_t{7}}, true), "7");
  EXPECT_EQ(param_value_text(ParamValue{true}, true), "true");
}
