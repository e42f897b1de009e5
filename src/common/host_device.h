// TESSERA_HD marks functions compiled for both the host and CUDA devices (a no-op without nvcc).
#pragma once
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif
