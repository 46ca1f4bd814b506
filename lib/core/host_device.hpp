// KANTOR_HOST_DEVICE: marks the ground floor's inline math for both engines (host C++ and CUDA
// device code).
#pragma once

#if defined(__CUDACC__)
#define KANTOR_HOST_DEVICE __host__ __device__
#else
#define KANTOR_HOST_DEVICE
#endif
