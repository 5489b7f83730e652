/* Devices, memory, streams and graphs: discovery that answers "no device" as an ordinary result (a
 * machine without a GPU, or without a driver, is the common case), and thin wrappers over the
 * runtime's allocation and copies that report through struct fx_error. */
#include <stdlib.h>
#include <string.h>

#include "cuda/internal.cuh"

int fx_cuda_device_count(char *why, size_t why_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        if (why && why_size)
            snprintf(why, why_size, "no CUDA device: %s",
                     e != cudaSuccess ? cudaGetErrorString(e) : "the driver lists none");
        (void)cudaGetLastError(); /* the error is an answer here, not a pending failure */
        return 0;
    }
    if (why && why_size)
        why[0] = '\0';
    return n;
}

fx_status fx_cuda_device_info(int device, struct fx_cuda_info *out, struct fx_error *err) {
    cudaDeviceProp p;
    fx_status st = fx_cuda_status(cudaGetDeviceProperties(&p, device), "device properties", err);
    if (st != FX_OK)
        return st;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->n_sm = p.multiProcessorCount;
    out->mem_bytes = p.totalGlobalMem;
    return FX_OK;
}

fx_status fx_cuda_use_device(int device, struct fx_error *err) {
    return fx_cuda_status(cudaSetDevice(device), "set device", err);
}

void *fx_cuda_alloc(size_t bytes, struct fx_error *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fx_cuda_fail(err, e == cudaErrorMemoryAllocation ? FX_ERR_NOMEM : FX_ERR_UNSUPPORTED,
                     "cuda: allocating %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

void fx_cuda_free(void *d_ptr) {
    if (d_ptr)
        cudaFree(d_ptr);
}

fx_status fx_cuda_upload(void *d_dst, const void *src, size_t bytes, struct fx_error *err) {
    return fx_cuda_status(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "upload", err);
}

fx_status fx_cuda_download(void *dst, const void *d_src, size_t bytes, struct fx_error *err) {
    return fx_cuda_status(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "download", err);
}

fx_status fx_cuda_sync(struct fx_error *err) {
    return fx_cuda_status(cudaDeviceSynchronize(), "synchronize", err);
}

void *fx_cuda_stream_create(struct fx_error *err) {
    cudaStream_t s = NULL;
    if (fx_cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream", err))
        return NULL;
    return s;
}

void fx_cuda_stream_free(void *stream) {
    if (stream)
        cudaStreamDestroy(fx_cuda_stream(stream));
}

fx_status fx_cuda_stream_sync(void *stream, struct fx_error *err) {
    return fx_cuda_status(cudaStreamSynchronize(fx_cuda_stream(stream)), "stream sync", err);
}

void *fx_cuda_host_alloc(size_t bytes, struct fx_error *err) {
    void *p = NULL;
    if (fx_cuda_status(cudaMallocHost(&p, bytes ? bytes : 1), "page-locked allocation", err))
        return NULL;
    return p;
}

void fx_cuda_host_free(void *p) {
    if (p)
        cudaFreeHost(p);
}

fx_status fx_cuda_copy_async(void *dst, const void *src, size_t bytes, void *stream,
                             struct fx_error *err) {
    return fx_cuda_status(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, fx_cuda_stream(stream)), "copy", err);
}

struct fx_cuda_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

fx_status fx_cuda_capture_begin(void *stream, struct fx_error *err) {
    /* Relaxed: other threads' unrelated CUDA calls (allocations) do not break the capture. */
    return fx_cuda_status(
        cudaStreamBeginCapture(fx_cuda_stream(stream), cudaStreamCaptureModeThreadLocal),
        "begin capture", err);
}

fx_status fx_cuda_capture_end(void *stream, struct fx_cuda_graph **out, struct fx_error *err) {
    *out = NULL;
    cudaGraph_t graph = NULL;
    fx_status st =
        fx_cuda_status(cudaStreamEndCapture(fx_cuda_stream(stream), &graph), "end capture", err);
    if (st != FX_OK)
        return st;
    cudaGraphExec_t exec = NULL;
    st = fx_cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiate graph", err);
    if (st != FX_OK) {
        cudaGraphDestroy(graph);
        return st;
    }
    struct fx_cuda_graph *g = (struct fx_cuda_graph *)malloc(sizeof *g);
    if (!g) {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        return fx_cuda_fail(err, FX_ERR_NOMEM, "cuda: graph: out of memory");
    }
    g->graph = graph;
    g->exec = exec;
    *out = g;
    return FX_OK;
}

fx_status fx_cuda_graph_launch(struct fx_cuda_graph *g, void *stream, struct fx_error *err) {
    return fx_cuda_status(cudaGraphLaunch(g->exec, fx_cuda_stream(stream)), "graph launch", err);
}

void fx_cuda_graph_free(struct fx_cuda_graph *g) {
    if (!g)
        return;
    cudaGraphExecDestroy(g->exec);
    cudaGraphDestroy(g->graph);
    free(g);
}

fx_status fx_cuda_copy_2d(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                          size_t width, size_t rows, struct fx_error *err) {
    return fx_cuda_status(
        cudaMemcpy2D(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault), "copy", err);
}
