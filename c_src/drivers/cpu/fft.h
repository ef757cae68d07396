/* Complex FFTs over contiguous rows, the portable reference (fft.c). */
#ifndef CX_CPU_FFT_H
#define CX_CPU_FFT_H

#include <stdint.h>

/* rows transforms of length n (n >= 1, any n) over contiguous rows; complex numbers interleaved
 * (re, im). inverse computes the unnormalised backward transform then divides by n (as NumPy's
 * ifft and Nx's). in and out do not alias. Computed in double; c64 rounds once to float at the
 * end. Returns 0, or -1 when memory runs out. */
int cpu_fft_c128(const double *in, double *out, int64_t rows, int64_t n, int inverse);
int cpu_fft_c64(const float *in, float *out, int64_t rows, int64_t n, int inverse);

#endif
