// Whether a model fits on a device before any of it is uploaded: its weights (as stored) plus,
// for LlamaGen, the KV cache of one image with guidance. The CPU is left to its own checks
// (Session::fits_in_memory, CpuBackend::empty): its weights are read as the run needs them.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/backend.h"
#include "tessera/config.h"

namespace tessera {

// Bytes the model needs on a device at the least.
int64_t device_bytes_needed(const ModelConfig& config, bool load_decoder, int64_t* weights,
                            int64_t* kv);

// Throws ParameterError("device"), "{device} <device>: the model needs N MiB (W MiB of weights,
// K MiB of KV cache for one image) but <device> has F MiB free", when it does not fit.
void check_device_memory(const ModelConfig& config, bool load_decoder, const Backend& backend,
                         const std::string& device);

}  // namespace tessera
