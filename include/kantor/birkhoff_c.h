/* C API of the batched Birkhoff projection (CUDA engine): raw device pointers and a
 * cudaStream_t passed as void*, no C++ types across the boundary, so a training framework can
 * call forward and backward from its own stream. Every function returns a kantor_status; on
 * failure kantor_birkhoff_last_error() returns a message (per calling thread).
 * Layout: batch contiguous row-major n x n matrices, 2 <= n <= 16; dtype float32 or bfloat16
 * (raw 16-bit patterns); math in float32. Example: docs/birkhoff.md.
 * The calls are project_birkhoff / project_birkhoff_backward of kantor/birkhoff.hpp on the CUDA
 * engine: same defaults, checks and results. Arguments are checked before any CUDA call (a bad
 * argument is KANTOR_STATUS_INVALID_ARGUMENT on any build and machine). The current CUDA device
 * is the one of the pointers and the stream; each calling thread keeps a few small contexts, one
 * per (device, stream) it used, created on the first call with that pair (they borrow the stream
 * and hold no device memory and no thread). */
#ifndef KANTOR_BIRKHOFF_C_H_
#define KANTOR_BIRKHOFF_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kantor_status {
  KANTOR_STATUS_OK = 0,
  KANTOR_STATUS_INVALID_ARGUMENT = 1, /* bad shape, dtype, option or null pointer */
  KANTOR_STATUS_NOT_COMPILED = 2,     /* this build has no CUDA engine */
  KANTOR_STATUS_CUDA_ERROR = 3,       /* a CUDA call or launch failed, or no CUDA device is
                                         visible */
  KANTOR_STATUS_OUT_OF_MEMORY = 4,
  KANTOR_STATUS_INTERNAL_ERROR = 5
} kantor_status;

/* The two range markers make every int a value of the type (a C caller may pass any int; the C++
   side then reads it without undefined behaviour and refuses it with INVALID_ARGUMENT). */
typedef enum kantor_dtype {
  KANTOR_DTYPE_FLOAT32 = 0,
  KANTOR_DTYPE_BFLOAT16 = 1,
  KANTOR_DTYPE_RANGE_MIN_ = -2147483647 - 1,
  KANTOR_DTYPE_RANGE_MAX_ = 2147483647
} kantor_dtype;

typedef enum kantor_birkhoff_method {
  KANTOR_BIRKHOFF_NEWTON = 0,   /* converged projection (tolerance) */
  KANTOR_BIRKHOFF_SINKHORN = 1, /* `iterations` exact Sinkhorn sweeps */
  KANTOR_BIRKHOFF_DEEPSEEK = 2  /* DeepSeek's truncated map (repeat = iterations) */
} kantor_birkhoff_method;

typedef struct kantor_birkhoff_options {
  int method;                /* kantor_birkhoff_method */
  int column_first;          /* sinkhorn: 0 row-first, 1 column-first */
  int iterations;            /* sinkhorn sweeps / deepseek repeat; 0 = 20 */
  double tolerance;          /* Err threshold; 0 = 1e-5 (float32), 3e-2 (bfloat16) */
  int max_newton_iterations; /* newton cap, 1..1000; 0 = 30 */
  int unrolled_gradient;     /* backward: 0 implicit at P, 1 exact gradient of the truncated map */
} kantor_birkhoff_options;

typedef struct kantor_birkhoff_stats {
  double worst_error;     /* max Err = |P1-1|_1 + |P^T1-1|_1 of the stored output */
  double median_error;    /* median Err to a 0.25-decade histogram bin (bin centre) */
  int64_t not_converged;  /* matrices with Err > tolerance or no projection */
  int64_t invalid_inputs; /* matrices with NaN / +inf logits or a row, column or whole matrix
                             of -inf (their output is 0) */
  int64_t first_invalid;  /* smallest index of an invalid matrix, -1 when none */
} kantor_birkhoff_stats;

/* Fills *options with the defaults (newton, row-first, 20 iterations, default tolerance). */
void kantor_birkhoff_default_options(kantor_birkhoff_options* options);

/* Forward: out = projection of logits (device pointers, same dtype). stream: a cudaStream_t or
 * NULL for the default stream. stats == NULL: asynchronous on the stream. stats != NULL: the
 * error statistics are reduced on the device and the call synchronizes the stream. options ==
 * NULL: the defaults. batch == 0: nothing is read or written (pointers may be NULL). */
kantor_status kantor_birkhoff_forward(const void* logits, void* out, int64_t batch, int n,
                                      kantor_dtype dtype, const kantor_birkhoff_options* options,
                                      void* stream, kantor_birkhoff_stats* stats);

/* Backward: grad_logits = dL/dlogits from grad_P = dL/dP. Implicit gradient: needs P (the
 * forward output), logits may be NULL. Unrolled gradient (sinkhorn/deepseek only): needs the
 * logits, P may be NULL. Asynchronous on the stream. */
kantor_status kantor_birkhoff_backward(const void* P, const void* logits, const void* grad_P,
                                       void* grad_logits, int64_t batch, int n, kantor_dtype dtype,
                                       const kantor_birkhoff_options* options, void* stream);

/* Message of the last failed call on this thread ("" when none). Valid until the next call. */
const char* kantor_birkhoff_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* KANTOR_BIRKHOFF_C_H_ */
