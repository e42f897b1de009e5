// TESSERA_HD marks functions that nvcc compiles for both host and device (a no-op for g++).
#pragma once
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif
