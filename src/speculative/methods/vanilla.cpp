// vanilla: no drafts, one target forward per token (LlamaGen) or per MAR step (MAR).
#include "speculative/methods/families.h"

namespace tessera::speculative {

std::vector<MethodEntry> vanilla_methods() {
  MethodEntry e;
  e.info = {"vanilla",
            "One target forward per token (LlamaGen's generate.py) or per MAR step (MAR's "
            "sample_tokens); the baseline",
            TokenKind::Any,
            DraftSource::None,
            {}};
  return {e};
}

}  // namespace tessera::speculative
