// `tessera bench --kernels`: the CPU linear kernel at decode and verification shapes.
#pragma once

namespace tessera::cli {

void bench_kernels(int repeat, bool json);

}  // namespace tessera::cli
