#include "speculative/method_registry.h"

#include "speculative/methods/families.h"

namespace tessera::speculative {

const std::vector<MethodEntry>& method_registry() {
  static const std::vector<MethodEntry> all = [] {
    std::vector<MethodEntry> v;
    for (auto family : {vanilla_methods, exact_methods, medusa_methods, hawk_methods,
                        lantern_methods, gsd_methods, relaxed_ratio_methods, cspd_methods})
      for (MethodEntry& e : family()) {
        e.info.lossless = e.exact || e.info.drafts == DraftSource::None;
        v.push_back(std::move(e));
      }
    return v;
  }();
  return all;
}

const MethodEntry* find_method_entry(const std::string& name) {
  for (const MethodEntry& e : method_registry())
    if (e.info.name == name) return &e;
  return nullptr;
}

void check_param_names(const MethodParams& params) {
  for (const auto& [name, value] : params) {
    bool known = false;
    for (const MethodEntry& e : method_registry())
      for (const ParamInfo& p : e.info.params) known = known || p.name == name;
    check(known, "unknown method parameter '" + name + "' (tessera/methods.h lists them)");
  }
}

}  // namespace tessera::speculative

namespace tessera {

const std::vector<MethodInfo>& registered_methods() {
  static const std::vector<MethodInfo> infos = [] {
    std::vector<MethodInfo> v;
    for (const auto& e : speculative::method_registry()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

const MethodInfo* find_method(const std::string& name) {
  for (const MethodInfo& m : registered_methods())
    if (m.name == name) return &m;
  return nullptr;
}

}  // namespace tessera
