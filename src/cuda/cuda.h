/* The CUDA backend's C interface (built with `make CUDA=1`, which defines FX_HAVE_CUDA): device
 * discovery, device memory, and the device kernels of the operation contract of
 * kernels/kernels.h. The implementation is CUDA C++ in the .cu files of src/cuda/; nothing of CUDA
 * leaks through this header, so C11 code includes it like any other.
 *
 * Pointers named d_* are device memory (fx_cuda_alloc). Every kernel entry point enqueues work on
 * `stream` (a cudaStream_t, NULL for the default stream) and returns at once: FX_OK means the
 * launch was accepted; errors of the work itself show up at the next fx_cuda_sync. No entry point
 * allocates memory.
 *
 * The reference for every result is the generic CPU table (kernels/generic*.c); the tests
 * (tests/test_cuda_*.c) state how close each operation comes to it and why. */
#ifndef FX_CUDA_CUDA_H
#define FX_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferrox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices and memory (device.cu) -------------------------------------------------------- */

struct fx_cuda_info {
    char name[256];
    int cc_major, cc_minor; /* compute capability */
    int n_sm;               /* streaming multiprocessors */
    uint64_t mem_bytes;     /* global memory */
};

/* The number of usable devices; 0 when there is none, no driver, or the driver is older than
 * the runtime this was built with, and then `why` (may be NULL) says which in words. Never
 * fails otherwise: a machine without a GPU is an ordinary answer, not an error. */
int fx_cuda_device_count(char *why, size_t why_size);
fx_status fx_cuda_device_info(int device, struct fx_cuda_info *out, struct fx_error *err);
/* Makes `device` current for the calling thread (every later call of that thread uses it). */
fx_status fx_cuda_use_device(int device, struct fx_error *err);

/* Device memory; NULL with err set when there is not enough. fx_cuda_free(NULL) is a no-op. */
void *fx_cuda_alloc(size_t bytes, struct fx_error *err);
void fx_cuda_free(void *d_ptr);
/* Synchronous copies between host and device memory. */
fx_status fx_cuda_upload(void *d_dst, const void *src, size_t bytes, struct fx_error *err);
fx_status fx_cuda_download(void *dst, const void *d_src, size_t bytes, struct fx_error *err);
/* Waits for all work of the current device; reports the first error of that work. */
fx_status fx_cuda_sync(struct fx_error *err);

/* Streams, page-locked host memory and graphs: what a decode step replayed as one CUDA graph is
 * made of. A graph is captured from the work enqueued on a stream between capture_begin and
 * capture_end (nothing runs meanwhile), then launched any number of times; the values it reads
 * from device or page-locked memory are read at each launch, which is how one graph serves
 * every position. */
void *fx_cuda_stream_create(struct fx_error *err); /* NULL with err set on failure */
void fx_cuda_stream_free(void *stream);
fx_status fx_cuda_stream_sync(void *stream, struct fx_error *err);
void *fx_cuda_host_alloc(size_t bytes, struct fx_error *err); /* page-locked */
void fx_cuda_host_free(void *p);
/* An asynchronous copy in any direction (host pointers page-locked for it to be asynchronous
 * and capturable). */
fx_status fx_cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream,
                             struct fx_error *err);
/* A synchronous copy of `rows` rows of `width` bytes between any two memories, rows dst_pitch
 * and src_pitch bytes apart (a strided block, e.g. one layer's KV rows of every head). */
fx_status fx_cuda_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                          size_t width, size_t rows, struct fx_error *err);
struct fx_cuda_graph;
fx_status fx_cuda_capture_begin(void *stream, struct fx_error *err);
/* Ends the capture and instantiates it: *out, or NULL and an error. */
fx_status fx_cuda_capture_end(void *stream, struct fx_cuda_graph **out, struct fx_error *err);
fx_status fx_cuda_graph_launch(struct fx_cuda_graph *g, void *stream, struct fx_error *err);
void fx_cuda_graph_free(struct fx_cuda_graph *g);

/* ---- weights: dequantization and matmul (matmul.cu) ---------------------------------------- */

/* The weight formats with device kernels: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K..Q6_K, MXFP4. (IQ4_NL and IQ4_XS have none yet.) */
bool fx_cuda_type_supported(enum fx_type type);

/* d_dst[i] = element i of n elements (a whole number of blocks) of `type` at d_src: bit for bit
 * the generic table's to_float. */
fx_status fx_cuda_dequantize(enum fx_type type, const void *d_src, int64_t n, float *d_dst,
                             void *stream, struct fx_error *err);

/* The same decoders (src/cuda/blocks.cuh) compiled for the host, on host memory: how a machine
 * without a GPU checks them against the generic table. Not for production use (one element at a
 * time). */
fx_status fx_cuda_dequantize_host(enum fx_type type, const void *src, int64_t n, float *dst,
                                  struct fx_error *err);

/* A weight matrix in device memory: ne1 rows of ne0 elements of `type`, rows row_bytes apart
 * (the file's layout, as struct fx_mat without a packed copy). */
struct fx_cuda_mat {
    enum fx_type type;
    int64_t ne0, ne1;
    uint64_t row_bytes;
    const void *d_data;
};

/* out = act * W^T: d_out[j * out_stride + r] = dot(W row r, d_act row j) for 0 <= r < ne1 and
 * 0 <= j < n_act; activation rows are f32, act_stride floats apart (the device does not quantize
 * activations as the CPU tables do: see the tests for what that costs against them). Each weight
 * element is decoded once per launch and group of 8 activation rows. Row j of the result is bit
 * for bit the same whatever n_act (n_act = 1 is the decode matvec). */
fx_status fx_cuda_matmul(const struct fx_cuda_mat *w, const float *d_act, int64_t act_stride,
                         int64_t n_act, float *d_out, int64_t out_stride, void *stream,
                         struct fx_error *err);

/* d_out[r][0..ne0) = row d_ids[r] of w, decoded as fx_cuda_dequantize does (the embedding
 * lookup); the ids are device memory and must be rows of w. */
fx_status fx_cuda_get_rows(const struct fx_cuda_mat *w, const int32_t *d_ids, int64_t n_ids,
                           float *d_out, void *stream, struct fx_error *err);

/* ---- row operations (rows.cu) -------------------------------------------------------------- */

/* For each of n_rows rows of n floats (rows `stride` floats apart, in and out alike):
 * out = x / sqrt(mean(x^2) + eps) * w (d_w NULL for none); d_out may be d_x. */
fx_status fx_cuda_rms_norm(float *d_out, const float *d_x, const float *d_w, int64_t n_rows,
                           int64_t n, int64_t stride, float eps, void *stream,
                           struct fx_error *err);
/* The generic table's rope on n_rows rows (row_stride floats apart) of n_heads heads
 * (head_stride floats apart). d_cs is a table of angles [n_pos][n_dims/2][2] (cos, sin) from
 * fx_rope_cache, which holds every scaling variant (linear, YaRN, llama3 frequency factors); row
 * r is turned by entry d_pos[r] (device memory, each < n_pos), or entry r when d_pos is NULL.
 * Bit for bit the generic table's result. */
fx_status fx_cuda_rope(float *d_x, int64_t n_rows, int64_t row_stride, int64_t n_heads,
                       int64_t head_stride, int32_t n_dims, int neox, const float *d_cs,
                       const int32_t *d_pos, void *stream, struct fx_error *err);
/* d_out[i] = silu(d_g[i]) * d_u[i] for n elements; d_out may be d_g or d_u. */
fx_status fx_cuda_swiglu(float *d_out, const float *d_g, const float *d_u, int64_t n, void *stream,
                         struct fx_error *err);
/* d_out[i] = d_a[i] + d_b[i]; d_out may be either input. */
fx_status fx_cuda_add(float *d_out, const float *d_a, const float *d_b, int64_t n, void *stream,
                      struct fx_error *err);
/* Stores n_rows rows of new keys (or values), each n_head_kv heads of dim floats, into a cache
 * [n_head_kv][n_ctx][dim] of kv_type (F32 as is, F16 rounded to nearest even as the CPU's
 * kv_store) at positions d_pos[r] (device memory, each < n_ctx). */
fx_status fx_cuda_kv_store(enum fx_type kv_type, const float *d_src, int64_t n_rows,
                           int64_t n_head_kv, int64_t dim, void *d_cache, int64_t n_ctx,
                           const int32_t *d_pos, void *stream, struct fx_error *err);

/* ---- decode attention (attn.cu) ------------------------------------------------------------ */

/* One query row (one new token) of n_head heads against a contiguous KV cache of one layer:
 * d_k is [n_head_kv][k_ctx][dim_k] and d_v [n_head_kv][v_ctx][dim_v] of kv_type (F32 or F16),
 * of which positions 0 .. n_keys-1 are filled (the query's own key last); with d_pos (device
 * memory) the query is at position *d_pos instead and n_keys only bounds it (the host checked it
 * is below n_keys). Query head h reads KV
 * head h / (n_head / n_head_kv) (GQA). Keys seen: all, or with window > 0 the last `window`
 * positions (a sliding-window layer). Scores: scale * (q . k), then softcap * tanh(s / softcap)
 * when softcap > 0; d_sinks NULL or [n_head] logits that join the denominator only.
 * d_q is [n_head][dim_k], d_out [n_head][dim_v]. dim_v <= FX_CUDA_ATTN_MAX_DIM. */
#define FX_CUDA_ATTN_MAX_DIM 512
struct fx_cuda_attn {
    enum fx_type kv_type;
    int64_t n_head, n_head_kv, dim_k, dim_v;
    int64_t k_ctx, v_ctx; /* positions allocated per KV head (the cache's n_ctx) */
    int64_t n_keys, window;
    float scale, softcap;
};
fx_status fx_cuda_attn_decode(const struct fx_cuda_attn *a, const int32_t *d_pos, const float *d_q,
                              const void *d_k, const void *d_v, const float *d_sinks, float *d_out,
                              void *stream, struct fx_error *err);

/* ---- selection (select.cu) ----------------------------------------------------------------- */

/* The k largest of n floats, largest first, ties to the lower index, NaN never chosen:
 * d_idx[0..k-1] and d_val[0..k-1]; where fewer than k elements are not NaN, the rest of d_idx
 * is -1. k = 1 is greedy argmax (the CPU's argmax answers 0 where everything is NaN; this
 * answers -1). 1 <= k <= FX_CUDA_TOP_K_MAX. */
#define FX_CUDA_TOP_K_MAX 256
fx_status fx_cuda_top_k(const float *d_x, int64_t n, int k, int32_t *d_idx, float *d_val,
                        void *stream, struct fx_error *err);

#ifdef __cplusplus
}
#endif

#endif
