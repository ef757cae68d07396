// pocketfft's C++ header (pocketfft_hdronly.h, BSD-3) behind a C entry point, for bench_fft.c.
#include <complex>
#include <cstdint>

#include "pocketfft_hdronly.h"

template <typename T>
static int c2c(const T *in, T *out, int64_t rows, int64_t n, int inverse, int nthreads) {
    try {
        pocketfft::shape_t shape{(size_t)rows, (size_t)n};
        ptrdiff_t c = sizeof(std::complex<T>);
        pocketfft::stride_t stride{(ptrdiff_t)n * c, c};
        pocketfft::c2c(
            shape, stride, stride, {1}, !inverse, reinterpret_cast<const std::complex<T> *>(in),
            reinterpret_cast<std::complex<T> *>(out), T(inverse ? 1.0 / n : 1.0), (size_t)nthreads);
        return 0;
    } catch (...) {
        return -1;
    }
}

extern "C" int pf_c2c_f64(const double *in, double *out, int64_t rows, int64_t n, int inverse,
                          int nthreads) {
    return c2c(in, out, rows, n, inverse, nthreads);
}

extern "C" int pf_c2c_f32(const float *in, float *out, int64_t rows, int64_t n, int inverse,
                          int nthreads) {
    return c2c(in, out, rows, n, inverse, nthreads);
}
