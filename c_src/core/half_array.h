/* f16/bf16 <-> f32 over arrays, rounding to nearest even, NaN to the canonical quiet NaN. */
#ifndef CX_HALF_ARRAY_H
#define CX_HALF_ARRAY_H

#include <stdbool.h>
#include <stdint.h>

void cx_f16_to_f32_array(const uint16_t *h, float *f, int64_t n);
void cx_f32_to_f16_array(const float *f, uint16_t *h, int64_t n);
void cx_bf16_to_f32_array(const uint16_t *b, float *f, int64_t n);
void cx_f32_to_bf16_array(const float *f, uint16_t *b, int64_t n);
/* Whether f16 conversion runs on the processor's F16C instructions. */
bool cx_f16_hardware(void);

#endif
