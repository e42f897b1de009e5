// A model's validated method settings (config.json "quality", docs/quality.md) as that model's
// defaults, and the note for a lossy method run outside them. The registry stays model-agnostic:
// the pipeline passes the section in.
#pragma once

#include <string>

#include "tessera/config.h"
#include "tessera/tessera.h"

namespace tessera::speculative {

// Throws an Error starting with `where` when a validated setting names an unknown or MAR method, a
// lossless one, a parameter its method does not have, or a value of the wrong type or range.
void check_validated_settings(const QualitySection& q, const std::string& where);

// o with the validated setting of o.method filled in for every parameter o leaves unset (an
// explicit value wins). The draft length applies only when the setting was measured with the
// same kind of drafts (a draft model, or Jacobi iteration).
SpeculativeOptions with_model_defaults(const SpeculativeOptions& o, const QualitySection& q);

// One line when a lossy method runs outside the validated setting (a given parameter differs from
// it, other drafts) or has none for the model `model`; "" for lossless methods and inside it.
// given: the options as the caller set them, before with_model_defaults.
std::string validated_settings_note(const SpeculativeOptions& given, const QualitySection& q,
                                    const std::string& model);

}  // namespace tessera::speculative
