/* The one list of weight formats with device kernels: fx_cuda_with_type calls f with the type
 * as a compile-time constant (std::integral_constant), so every kernel template is instantiated
 * for exactly these formats and a format is added here once. Returns false for any other. */
#ifndef FX_CUDA_TYPES_CUH
#define FX_CUDA_TYPES_CUH

#include <type_traits>

#include "ferrox.h"

template <class F> static bool fx_cuda_with_type(enum fx_type type, F &&f) {
#define FX_CUDA_CASE(t)                                                                            \
    case t:                                                                                        \
        f(std::integral_constant<int, t>{});                                                       \
        return true
    switch (type) {
        FX_CUDA_CASE(FX_TYPE_F32);
        FX_CUDA_CASE(FX_TYPE_F16);
        FX_CUDA_CASE(FX_TYPE_BF16);
        FX_CUDA_CASE(FX_TYPE_Q4_0);
        FX_CUDA_CASE(FX_TYPE_Q4_1);
        FX_CUDA_CASE(FX_TYPE_Q5_0);
        FX_CUDA_CASE(FX_TYPE_Q5_1);
        FX_CUDA_CASE(FX_TYPE_Q8_0);
        FX_CUDA_CASE(FX_TYPE_Q2_K);
        FX_CUDA_CASE(FX_TYPE_Q3_K);
        FX_CUDA_CASE(FX_TYPE_Q4_K);
        FX_CUDA_CASE(FX_TYPE_Q5_K);
        FX_CUDA_CASE(FX_TYPE_Q6_K);
        FX_CUDA_CASE(FX_TYPE_MXFP4);
    default:
        return false;
    }
#undef FX_CUDA_CASE
}

#endif
