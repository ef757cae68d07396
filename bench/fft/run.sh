#!/usr/bin/env bash
# Builds bench_fft.c with every FFT library found into /tmp and runs it: `bash bench/fft/run.sh`.
# FFTW: Debian libfftw3-dev. KISS FFT (float only in Debian): libkissfft-dev. pocketfft (not
# packaged in Debian 12; libpocketfft-dev from Debian 13): POCKETFFT_DIR names a folder holding
# pocketfft_hdronly.h (C++) and/or pocketfft.c + pocketfft.h (C, NumPy 1.x's copy).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=/tmp/cascade_bench_fft
mkdir -p "$out"
POCKETFFT_DIR=${POCKETFFT_DIR:-/usr/include}
flags=(-O3)  # no -march=native: the drivers are built for any x86-64
defs=() srcs=(c_src/drivers/cpu/fft.c) libs=(-lm)
probe() { printf '#include <%s>\nint main(void) { return 0; }\n' "$1" | cc -x c - -o /dev/null "${@:2}" 2>/dev/null; }
if probe fftw3.h -lfftw3 -lfftw3f; then defs+=(-DHAVE_FFTW); libs+=(-lfftw3f -lfftw3); fi
if probe kissfft/kiss_fft.h -lkissfft-float; then defs+=(-DHAVE_KISS); libs+=(-lkissfft-float); fi
if [ -f "$POCKETFFT_DIR/pocketfft_hdronly.h" ]; then
  g++ -std=c++17 -O3 -I"$POCKETFFT_DIR" -c bench/fft/pocketfft_shim.cc -o "$out/shim.o"
  defs+=(-DHAVE_POCKETFFT) srcs+=("$out/shim.o") libs+=(-lstdc++ -lpthread)
fi
if [ -f "$POCKETFFT_DIR/pocketfft.c" ]; then
  cc -O3 -c "$POCKETFFT_DIR/pocketfft.c" -o "$out/pocketfft_c.o"
  defs+=(-DHAVE_POCKETFFT_C -I"$POCKETFFT_DIR") srcs+=("$out/pocketfft_c.o")
fi
echo "built with: ${defs[*]}"
cc -std=gnu11 "${flags[@]}" "${defs[@]}" -o "$out/bench_fft" bench/fft/bench_fft.c "${srcs[@]}" "${libs[@]}"
"$out/bench_fft"
