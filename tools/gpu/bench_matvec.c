/* ferrox-cuda-bench (make CUDA=1): how fast the device matmul reads weights, per format, on the
 * matrix shapes of the benchmark models. The decode step's floor is reading every weight once
 * per token, so GB/s of the one-row matvec against the GPU's memory bandwidth (H200: 4.8 TB/s)
 * is the figure issue 18's 70% target is about; the 512-row figure is a hint for prefill.
 *
 *   ferrox-cuda-bench [TYPE...]      (default: Q4_K Q6_K Q8_0 F16)
 *
 * Weights are 64 rows quantized by the generic table's reference encoder, repeated to fill the
 * matrix (valid blocks; the kernels' speed does not depend on the values). Host timing: a
 * warm-up, then many launches and one synchronisation, so launch overhead counts as it would in
 * a step that is not yet a CUDA graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda.h"
#include "kernels/kernels.h"

struct shape {
    const char *what;
    int64_t rows, cols;
};

/* llama-3.2-1b (n_embd 2048, n_ff 8192, 8 KV heads of 64, vocabulary 128256) and qwen3-0.6b
 * (1024, 3072, 8 KV heads of 128, 151936). */
static const struct shape shapes[] = {
    {"llama-1b attn_q/o", 2048, 2048},      {"llama-1b attn_k/v", 512, 2048},
    {"llama-1b ffn_gate/up", 8192, 2048},   {"llama-1b ffn_down", 2048, 8192},
    {"llama-1b output", 128256, 2048},      {"qwen3-0.6b attn_q", 2048, 1024},
    {"qwen3-0.6b ffn_gate/up", 3072, 1024}, {"qwen3-0.6b ffn_down", 1024, 3072},
    {"qwen3-0.6b output", 151936, 1024},
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const struct fx_error *err) {
    fprintf(stderr, "ferrox-cuda-bench: %s\n", err->msg);
    exit(1);
}

/* Seconds per launch of out = act * W^T over n_act rows: the mean of `reps` launches. */
static double time_matmul(const struct fx_cuda_mat *w, const float *d_act, int64_t n_act,
                          float *d_out, int reps) {
    struct fx_error err = {0};
    for (int i = 0; i < 3; i++)
        if (fx_cuda_matmul(w, d_act, w->ne0, n_act, d_out, w->ne1, NULL, &err) != FX_OK)
            die(&err);
    if (fx_cuda_sync(&err) != FX_OK)
        die(&err);
    double t0 = now();
    for (int i = 0; i < reps; i++)
        if (fx_cuda_matmul(w, d_act, w->ne0, n_act, d_out, w->ne1, NULL, &err) != FX_OK)
            die(&err);
    if (fx_cuda_sync(&err) != FX_OK)
        die(&err);
    return (now() - t0) / reps;
}

static void bench_type(enum fx_type type) {
    const struct fx_kernels *g = fx_kernels_named("generic");
    struct fx_error err = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const struct shape *sh = &shapes[s];
        int64_t be = fx_type_block_elems(type);
        uint64_t row_bytes = (uint64_t)(sh->cols / be * fx_type_block_bytes(type));
        size_t bytes = (size_t)row_bytes * (size_t)sh->rows;
        enum { SEED_ROWS = 64 };
        float *x = malloc((size_t)sh->cols * SEED_ROWS * sizeof(float));
        uint8_t *w = malloc(bytes);
        if (!x || !w) {
            fprintf(stderr, "ferrox-cuda-bench: out of host memory\n");
            exit(1);
        }
        uint64_t state = 0x9e3779b97f4a7c15ull;
        for (int64_t i = 0; i < sh->cols * SEED_ROWS; i++) { /* uniform in [-1, 1) */
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)(state >> 40) / (float)(1 << 23) - 1.0f;
        }
        for (int r = 0; r < SEED_ROWS; r++)
            g->types[type].from_float(x + r * sh->cols, w + r * row_bytes, sh->cols);
        for (int64_t r = SEED_ROWS; r < sh->rows; r++)
            memcpy(w + (size_t)r * row_bytes, w + (size_t)(r % SEED_ROWS) * row_bytes, row_bytes);

        enum { N_BATCH = 512 };
        void *d_w = fx_cuda_alloc(bytes, &err);
        float *d_act = fx_cuda_alloc((size_t)(N_BATCH * sh->cols) * sizeof(float), &err);
        float *d_out = fx_cuda_alloc((size_t)(N_BATCH * sh->rows) * sizeof(float), &err);
        if (!d_w || !d_act || !d_out)
            die(&err);
        if (fx_cuda_upload(d_w, w, bytes, &err) != FX_OK)
            die(&err);
        float *act = calloc((size_t)(N_BATCH * sh->cols), sizeof(float));
        if (!act) {
            fprintf(stderr, "ferrox-cuda-bench: out of host memory\n");
            exit(1);
        }
        for (int64_t i = 0; i < N_BATCH * sh->cols; i++)
            act[i] = x[i % (sh->cols * SEED_ROWS)];
        if (fx_cuda_upload(d_act, act, (size_t)(N_BATCH * sh->cols) * sizeof(float), &err) != FX_OK)
            die(&err);

        struct fx_cuda_mat m = {type, sh->cols, sh->rows, row_bytes, d_w};
        double t1 = time_matmul(&m, d_act, 1, d_out, 100);
        double tb = time_matmul(&m, d_act, N_BATCH, d_out, 3);
        printf("| %-6s | %-24s | %6lld x %-5lld | %8.1f MB | %9.1f us | %8.1f GB/s | %9.2f ms | "
               "%7.1f TFLOP/s |\n",
               fx_type_name(type), sh->what, (long long)sh->rows, (long long)sh->cols,
               (double)bytes / 1e6, t1 * 1e6, (double)bytes / t1 / 1e9, tb * 1e3,
               2.0 * (double)sh->rows * (double)sh->cols * N_BATCH / tb / 1e12);
        fflush(stdout);
        fx_cuda_free(d_w), fx_cuda_free(d_act), fx_cuda_free(d_out);
        free(x), free(w), free(act);
    }
}

int main(int argc, char **argv) {
    char why[256];
    if (fx_cuda_device_count(why, sizeof why) == 0) {
        fprintf(stderr, "ferrox-cuda-bench: %s\n", why);
        return 2;
    }
    struct fx_cuda_info info;
    struct fx_error err = {0};
    if (fx_cuda_device_info(0, &info, &err) != FX_OK)
        die(&err);
    printf("device 0: %s, compute %d.%d, %d SMs, %.1f GiB\n\n", info.name, info.cc_major,
           info.cc_minor, info.n_sm, (double)info.mem_bytes / (1u << 30));
    printf("| type   | matrix                   | rows x cols    | weights     | matvec       | "
           "read rate     | 512 rows     | 512 rows          |\n"
           "|--------|--------------------------|----------------|-------------|--------------|"
           "---------------|--------------|-------------------|\n");
    static const char *const defaults[] = {"Q4_K", "Q6_K", "Q8_0", "F16"};
    int n = argc > 1 ? argc - 1 : (int)(sizeof defaults / sizeof defaults[0]);
    for (int i = 0; i < n; i++) {
        const char *name = argc > 1 ? argv[i + 1] : defaults[i];
        enum fx_type t;
        if (!fx_type_from_name(name, &t) || !fx_cuda_type_supported(t)) {
            fprintf(stderr, "ferrox-cuda-bench: no device kernel for type '%s'\n", name);
            return 1;
        }
        bench_type(t);
    }
    return 0;
}
