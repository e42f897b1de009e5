// The method families, one file each in this directory, listed by the registry
// (method_registry.cpp) in documentation order.
#pragma once

#include <vector>

#include "speculative/method_registry.h"

namespace tessera::speculative {

std::vector<MethodEntry> vanilla_methods();        // vanilla
std::vector<MethodEntry> exact_methods();          // sd, sjd, eagle
std::vector<MethodEntry> medusa_methods();         // medusa, medusa-typical
std::vector<MethodEntry> hawk_methods();           // hawk, hawk-vertical
std::vector<MethodEntry> lantern_methods();        // lantern, lantern++
std::vector<MethodEntry> gsd_methods();            // gsd
std::vector<MethodEntry> relaxed_ratio_methods();  // uniform-rsd, cool-sd, amplify, addition
std::vector<MethodEntry> cspd_methods();           // cspd, cspd-reference, cspd-exact

}  // namespace tessera::speculative
