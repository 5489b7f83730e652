/* The expert cache: slots, reads around the page cache, checksums and the read-ahead threads
 * (see expert_cache.h for the policy and why). */
#include "model/expert_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

/* Read-ahead threads: enough to keep a disk's queue busy with one layer's predictions. */
#define N_IO_THREADS 4

enum slot_state { SLOT_EMPTY, SLOT_LOADING, SLOT_READY, SLOT_FAILED };

struct slot {
    int32_t key;       /* il * n_expert + e, or -1 when empty */
    int32_t pins;      /* users that read it or fill it now; never evicted while > 0 */
    uint8_t state;     /* enum slot_state */
    bool demand;       /* claimed by fx_xcache_acquire (a miss) rather than by read-ahead */
    uint64_t last_use; /* tick of its last pin */
};

/* One of an expert's three matrices in one layer. */
struct xmat {
    struct fx_mat per;  /* type and shape; data and packed unset */
    uint64_t file_off;  /* file offset of expert 0's bytes */
    uint64_t raw_bytes; /* one expert's bytes in the file, and their distance */
    uint64_t slot_off;  /* where its copy starts in a slot */
    bool packed;        /* the slot holds the table's packed layout, else the file's bytes */
};

/* LFU counts are halved every this many steps (tokens of a decode, or batches) of the model, so
 * that what a stretch of text uses outranks what an earlier one used: without the decay, experts
 * that a long-running server's earlier requests used often would stay cached while the current
 * requests' experts were evicted and read again at every use. */
#define LFU_HALF_LIFE 32

struct fx_xcache {
    const struct fx_kernels *k;
    char *path;
    int fd;
    bool direct; /* fd was opened with O_DIRECT */
    struct stat at_open;
    int32_t n_layer, n_expert;
    struct xmat *mats; /* [n_layer][3]: gate, up, down */
    uint64_t slot_bytes, stage_bytes;
    int32_t n_slots, quota;
    enum fx_moe_evict evict;
    int32_t ahead_max;   /* read-ahead pins at most this many slots at once */
    int32_t ahead_now;   /* slots read-ahead is filling now */
    uint8_t *mem;        /* [n_slots][slot_bytes] */
    struct slot *slots;  /* [n_slots] */
    int32_t *where;      /* [n_layer * n_expert] the slot of each key, or -1 */
    int32_t *held;       /* [n_layer] slots holding each layer's experts */
    uint64_t *sum;       /* [n_layer * n_expert] checksum of each expert's first read */
    uint8_t *summed;     /* [n_layer * n_expert] nonzero once sum is recorded */
    uint32_t *uses;      /* [n_layer * n_expert] layer steps that used each expert (LFU),
                          * halved every LFU_HALF_LIFE steps of the model */
    uint64_t tick;       /* grows with every pin */
    uint64_t layer_tick; /* tick when the current layer began: read-ahead never evicts newer */
    int32_t layer_now;   /* the layer that began then */
    bool told_streaming;
    char fail_msg[256]; /* why the latest failed slot failed */

    bool synced; /* mu and the conditions are initialised */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a slot was filled, failed or unpinned */
    pthread_cond_t work;    /* the read-ahead queue was refilled, or stop */
    int32_t *queue;         /* [n_expert] keys to read ahead, taken from the front */
    int32_t q_head, q_len;
    bool stop;
    int n_io;
    pthread_t io[N_IO_THREADS];
    uint8_t *io_stage; /* [N_IO_THREADS][stage_bytes] */

    struct fx_moe_stats stats;
};

static uint64_t round_up(uint64_t v, uint64_t to) {
    return (v + to - 1) / to * to;
}

/* A cheap 64-bit checksum: four independent multiply-xor lanes over 8-byte words (about one
 * cycle per word), folded with the length. Not cryptographic: it catches a file that changed
 * under a running model, not an adversary. */
static uint64_t checksum(const uint8_t *p, uint64_t n, uint64_t h) {
    const uint64_t mul = 0x9e3779b97f4a7c15ull;
    uint64_t a[4] = {h, h ^ 1, h ^ 2, h ^ 3};
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * j, 8);
            a[j] = (a[j] ^ w) * mul;
        }
    for (; i < n; i++)
        a[0] = (a[0] ^ p[i]) * mul;
    return (a[0] ^ (a[1] << 17 | a[1] >> 47) ^ (a[2] << 31 | a[2] >> 33) ^
            (a[3] << 47 | a[3] >> 17) ^ n) *
           mul;
}

/* ---- reading ----------------------------------------------------------------------------- */

/* Reads file bytes [off, off + len) into stage, in FX_XCACHE_ALIGN-aligned pieces (what O_DIRECT
 * requires), and points *out at them. The page cache keeps nothing of what was read. */
static bool read_range(struct fx_xcache *c, uint64_t off, uint64_t len, uint8_t *stage,
                       const uint8_t **out, char *msg, size_t msg_size) {
    uint64_t a0 = off / FX_XCACHE_ALIGN * FX_XCACHE_ALIGN;
    uint64_t need = off + len - a0, want = round_up(need, FX_XCACHE_ALIGN), got = 0;
    while (got < need) {
        ssize_t r = pread(c->fd, stage + got, (size_t)(want - got), (off_t)(a0 + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(msg, msg_size, "cannot read %llu bytes at offset %llu: %s",
                     (unsigned long long)len, (unsigned long long)off, strerror(errno));
            return false;
        }
        if (r == 0) {
            snprintf(msg, msg_size, "file ends at byte %llu, before the %llu bytes at offset %llu",
                     (unsigned long long)(a0 + got), (unsigned long long)len,
                     (unsigned long long)off);
            return false;
        }
        got += (uint64_t)r;
    }
    if (!c->direct)
        (void)posix_fadvise(c->fd, (off_t)a0, (off_t)want, POSIX_FADV_DONTNEED);
    *out = stage + (off - a0);
    return true;
}

/* The file still is the one the model was loaded from, as far as its size and time tell. */
static bool file_unchanged(const struct fx_xcache *c, char *msg, size_t msg_size) {
    struct stat st;
    if (fstat(c->fd, &st) != 0) {
        snprintf(msg, msg_size, "cannot stat: %s", strerror(errno));
        return false;
    }
    if (st.st_size != c->at_open.st_size || st.st_mtim.tv_sec != c->at_open.st_mtim.tv_sec ||
        st.st_mtim.tv_nsec != c->at_open.st_mtim.tv_nsec) {
        snprintf(msg, msg_size, "the file changed since it was loaded (%lld bytes then, %lld now)",
                 (long long)c->at_open.st_size, (long long)st.st_size);
        return false;
    }
    return true;
}

void fx_xcache_fill(struct fx_xcache *c, int32_t slot, uint8_t *stage) {
    int64_t t0 = fx_now_ns();
    pthread_mutex_lock(&c->mu);
    int32_t key = c->slots[slot].key;
    pthread_mutex_unlock(&c->mu);
    int32_t il = key / c->n_expert, e = key % c->n_expert;
    uint8_t *dst = c->mem + (uint64_t)slot * c->slot_bytes;
    char msg[200] = "";
    uint64_t sum = 0, bytes = 0;
    bool ok = file_unchanged(c, msg, sizeof msg);
    for (int i = 0; i < 3 && ok; i++) {
        const struct xmat *x = &c->mats[il * 3 + i];
        const uint8_t *raw;
        ok = read_range(c, x->file_off + (uint64_t)e * x->raw_bytes, x->raw_bytes, stage, &raw, msg,
                        sizeof msg);
        if (!ok)
            break;
        bytes += x->raw_bytes;
        sum = checksum(raw, x->raw_bytes, sum);
        if (x->packed) {
            struct fx_mat src = x->per;
            src.data = raw;
            fx_mat_pack(c->k, &src, dst + x->slot_off, 0, 1);
        } else {
            memcpy(dst + x->slot_off, raw, (size_t)x->raw_bytes);
        }
    }
    uint64_t dt = (uint64_t)(fx_now_ns() - t0);

    pthread_mutex_lock(&c->mu);
    if (ok && c->summed[key] && c->sum[key] != sum) {
        ok = false;
        snprintf(msg, sizeof msg, "its bytes differ from their first read (the file changed)");
    }
    if (ok && !c->summed[key]) {
        c->sum[key] = sum;
        c->summed[key] = 1;
    }
    struct slot *s = &c->slots[slot];
    s->state = ok ? SLOT_READY : SLOT_FAILED;
    if (!ok)
        snprintf(c->fail_msg, sizeof c->fail_msg, "%s: expert %d of layer %d: %s", c->path, e, il,
                 msg);
    c->stats.bytes_read += bytes;
    c->stats.io_ns += dt;
    if (!s->demand)
        c->stats.prefetches++;
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

/* ---- slots --------------------------------------------------------------------------------- */

/* Empties slot i (held, unpinned). A failed slot's key may have moved on to another slot
 * meanwhile (acquired again while a reader still pinned the failure), which keeps it. */
static void drop(struct fx_xcache *c, int32_t i) {
    struct slot *s = &c->slots[i];
    if (s->key >= 0) {
        if (c->where[s->key] == i)
            c->where[s->key] = -1;
        c->held[s->key / c->n_expert]--;
    }
    s->key = -1;
    s->state = SLOT_EMPTY;
}

/* The order in which the policy gives up slot s for an expert of layer il: lower first, ties to
 * the least recently used. The quota rule of expert_cache.h ranks by class (the layer's own once at
 * quota, a layer over quota, any); LFU ranks by uses. */
static uint64_t evict_rank(const struct fx_xcache *c, const struct slot *s, int32_t il) {
    int32_t layer = s->key / c->n_expert;
    switch (c->evict) {
    case FX_MOE_EVICT_LRU:
        return 0;
    case FX_MOE_EVICT_LFU:
        return c->uses[s->key];
    case FX_MOE_EVICT_QUOTA:
        break;
    }
    return layer == il && c->held[il] >= c->quota ? 0 : c->held[layer] > c->quota ? 1 : 2;
}

/* The slot an expert of layer il may take, or -1 when every slot is pinned: an empty one, else by
 * the policy. Read-ahead (ahead) never evicts what the current layer touched, nor an expert of a
 * layer that comes before il (predicted earlier, needed sooner). */
static int32_t victim(struct fx_xcache *c, int32_t il, bool ahead) {
    int32_t best = -1;
    uint64_t best_rank = UINT64_MAX;
    for (int32_t i = 0; i < c->n_slots; i++) {
        const struct slot *s = &c->slots[i];
        if (s->pins > 0)
            continue;
        if (s->key < 0 || s->state == SLOT_FAILED)
            return i;
        int32_t layer = s->key / c->n_expert;
        if (ahead && (s->last_use >= c->layer_tick || (layer > c->layer_now && layer < il)))
            continue;
        uint64_t rank = evict_rank(c, s, il);
        if (rank < best_rank || (rank == best_rank && s->last_use < c->slots[best].last_use)) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

/* Gives slot i to key, pinned once and LOADING. */
static void claim(struct fx_xcache *c, int32_t i, int32_t key, bool demand) {
    drop(c, i);
    struct slot *s = &c->slots[i];
    s->key = key;
    s->pins = 1;
    s->state = SLOT_LOADING;
    s->demand = demand;
    s->last_use = ++c->tick;
    c->where[key] = i;
    c->held[key / c->n_expert]++;
}

int32_t fx_xcache_acquire(struct fx_xcache *c, int32_t il, const int32_t *experts, int32_t n,
                          int32_t begin, int32_t *slots, int32_t *reads, int32_t *n_reads) {
    pthread_mutex_lock(&c->mu);
    if (begin == 0) {
        c->layer_tick = c->tick + 1;
        c->layer_now = il;
        c->stats.layer_steps++;
        c->stats.experts_used += (uint64_t)n;
        for (int32_t i = 0; i < n; i++)
            c->uses[il * c->n_expert + experts[i]]++;
        if (c->stats.layer_steps % ((uint64_t)LFU_HALF_LIFE * (uint64_t)c->n_layer) == 0)
            for (int64_t key = 0; key < (int64_t)c->n_layer * c->n_expert; key++)
                c->uses[key] /= 2;
    }
    *n_reads = 0;
    int32_t i = begin;
    while (i < n) {
        int32_t key = il * c->n_expert + experts[i];
        int32_t s = c->where[key];
        if (s >= 0 && c->slots[s].state != SLOT_FAILED) {
            c->slots[s].pins++;
            c->slots[s].last_use = ++c->tick;
        } else {
            s = victim(c, il, false);
            if (s < 0) {
                if (i > begin)
                    break;
                pthread_cond_wait(&c->changed, &c->mu);
                continue;
            }
            claim(c, s, key, true);
            reads[(*n_reads)++] = i;
            c->stats.misses++;
        }
        slots[i++] = s;
    }
    if (i < n && begin == 0) {
        c->stats.streamed_layers++;
        if (!c->told_streaming) {
            c->told_streaming = true;
            FX_WARN("%s: the expert cache (%d experts) holds fewer than a step uses (%d in layer "
                    "%d); experts stream through it",
                    c->path, c->n_slots, n, il);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return i;
}

fx_status fx_xcache_wait(struct fx_xcache *c, const int32_t *slots, int32_t n, bool *waited,
                         struct fx_error *err) {
    fx_status st = FX_OK;
    *waited = false;
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < n; i++) {
        while (c->slots[slots[i]].state == SLOT_LOADING) {
            *waited = true;
            pthread_cond_wait(&c->changed, &c->mu);
        }
        if (c->slots[slots[i]].state == SLOT_FAILED && !st)
            st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "%s", c->fail_msg);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

void fx_xcache_release(struct fx_xcache *c, const int32_t *slots, int32_t n) {
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < n; i++) {
        struct slot *s = &c->slots[slots[i]];
        if (--s->pins == 0 && s->state == SLOT_FAILED)
            drop(c, slots[i]);
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->mu);
}

struct fx_mat fx_xcache_mat(const struct fx_xcache *c, int32_t slot, int32_t il, int which) {
    const struct xmat *x = &c->mats[il * 3 + which];
    struct fx_mat m = x->per;
    const uint8_t *p = c->mem + (uint64_t)slot * c->slot_bytes + x->slot_off;
    if (x->packed)
        fx_mat_set_packed(c->k, &m, p);
    else
        m.data = p;
    return m;
}

/* ---- read-ahead ---------------------------------------------------------------------------- */

void fx_xcache_prefetch(struct fx_xcache *c, int32_t il, const uint8_t *want) {
    pthread_mutex_lock(&c->mu);
    c->q_head = c->q_len = 0;
    for (int32_t e = 0; e < c->n_expert; e++) {
        int32_t key = il * c->n_expert + e;
        if (want[e] && c->where[key] < 0)
            c->queue[c->q_len++] = key;
    }
    if (c->q_len > 0)
        pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
}

struct io_arg {
    struct fx_xcache *c;
    uint8_t *stage;
};

static void *io_main(void *arg) {
    struct fx_xcache *c = ((struct io_arg *)arg)->c;
    uint8_t *stage = ((struct io_arg *)arg)->stage;
    free(arg);
    pthread_mutex_lock(&c->mu);
    while (!c->stop) {
        if (c->q_head == c->q_len) {
            pthread_cond_wait(&c->work, &c->mu);
            continue;
        }
        int32_t key = c->queue[c->q_head++];
        if (c->where[key] >= 0 || c->ahead_now >= c->ahead_max)
            continue;
        int32_t s = victim(c, key / c->n_expert, true);
        if (s < 0)
            continue; /* nothing may be evicted for a guess */
        claim(c, s, key, false);
        c->ahead_now++;
        pthread_mutex_unlock(&c->mu);
        fx_xcache_fill(c, s, stage);
        pthread_mutex_lock(&c->mu);
        c->ahead_now--;
        struct slot *sl = &c->slots[s];
        if (--sl->pins == 0 && sl->state == SLOT_FAILED)
            drop(c, s);
        pthread_cond_broadcast(&c->changed);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- counters ------------------------------------------------------------------------------ */

void fx_xcache_note(struct fx_xcache *c, int32_t n_checked, int32_t n_predicted, uint64_t wait_ns) {
    pthread_mutex_lock(&c->mu);
    c->stats.lookahead_checked += (uint64_t)n_checked;
    c->stats.lookahead_hits += (uint64_t)n_predicted;
    c->stats.wait_ns += wait_ns;
    pthread_mutex_unlock(&c->mu);
}

void fx_xcache_stats(struct fx_xcache *c, struct fx_moe_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

uint64_t fx_xcache_stage_bytes(const struct fx_xcache *c) {
    return c->stage_bytes;
}

/* ---- life ---------------------------------------------------------------------------------- */

/* The three matrices of layer il's experts: where they are in the file and in a slot; returns
 * the slot bytes they need. */
static uint64_t plan_layer(struct fx_xcache *c, const struct fx_model *m, int32_t il) {
    const struct fx_layer *l = &m->layers[il];
    const struct fx_experts *stacks[3] = {&l->gate_exps, &l->up_exps, &l->down_exps};
    const struct fx_gguf *g = m->file;
    const struct fx_tensor_view *t0 = fx_gguf_tensor_at(g, 0);
    const uint8_t *data0 = (const uint8_t *)t0->data - t0->offset; /* the data section */
    uint64_t off = 0;
    for (int i = 0; i < 3; i++) {
        struct xmat *x = &c->mats[il * 3 + i];
        x->per = stacks[i]->per;
        x->per.data = NULL;
        fx_mat_set_packed(c->k, &x->per, NULL);
        x->file_off =
            fx_gguf_data_offset(g) + (uint64_t)((const uint8_t *)stacks[i]->per.data - data0);
        x->raw_bytes = stacks[i]->expert_bytes;
        uint64_t packed = fx_mat_pack_bytes(c->k, &stacks[i]->per);
        x->packed = packed != 0;
        x->slot_off = off;
        off += round_up(x->packed ? packed : x->raw_bytes, 64);
        uint64_t stage = round_up(x->raw_bytes + 2 * FX_XCACHE_ALIGN, FX_XCACHE_ALIGN);
        if (stage > c->stage_bytes)
            c->stage_bytes = stage;
    }
    return off;
}

fx_status fx_xcache_create(const struct fx_model *m, const char *path, uint64_t bytes,
                           enum fx_moe_evict evict, struct fx_xcache **out, struct fx_error *err) {
    *out = NULL;
    struct fx_xcache *c = calloc(1, sizeof *c);
    if (!c)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
    c->fd = -1;
    c->k = fx_kernels();
    c->n_layer = m->hp.n_layer + m->hp.n_nextn; /* the MTP blocks' experts too */
    c->n_expert = m->hp.n_expert;
    c->evict = evict;
    fx_status st = FX_OK;
    uint64_t n_keys = (uint64_t)c->n_layer * (uint64_t)c->n_expert;
    c->path = strdup(path);
    c->mats = calloc((size_t)c->n_layer * 3, sizeof *c->mats);
    c->where = malloc((size_t)n_keys * sizeof *c->where);
    c->held = calloc((size_t)c->n_layer, sizeof *c->held);
    c->sum = calloc((size_t)n_keys, sizeof *c->sum);
    c->summed = calloc((size_t)n_keys, 1);
    c->uses = calloc((size_t)n_keys, sizeof *c->uses);
    c->queue = calloc((size_t)c->n_expert, sizeof *c->queue);
    if (!c->path || !c->mats || !c->where || !c->held || !c->sum || !c->summed || !c->uses ||
        !c->queue) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n_keys; i++)
        c->where[i] = -1;
    for (int32_t il = 0; il < c->n_layer; il++) {
        uint64_t need = plan_layer(c, m, il);
        if (need > c->slot_bytes)
            c->slot_bytes = need;
    }
    if (bytes < c->slot_bytes) {
        st = fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                          "an expert cache of %llu bytes cannot hold one expert: the minimum is "
                          "%llu bytes (%.1f MiB)",
                          (unsigned long long)bytes, (unsigned long long)c->slot_bytes,
                          (double)c->slot_bytes / (1024.0 * 1024.0));
        goto fail;
    }
    uint64_t n_slots = bytes / c->slot_bytes;
    if (n_slots > n_keys)
        n_slots = n_keys; /* more slots than experts would stay empty */
    c->n_slots = (int32_t)n_slots;
    c->quota = c->n_slots / c->n_layer > 0 ? c->n_slots / c->n_layer : 1;
    /* Read-ahead leaves a token's experts of a layer to demand reads, so that a step never waits
     * for a guess to finish before it can claim a slot for what it needs. */
    c->ahead_max = c->n_slots - m->hp.n_expert_used;
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    c->mem = fx_alloc_streamed(n_slots * c->slot_bytes);
    c->io_stage = aligned_alloc(FX_XCACHE_ALIGN, (size_t)(N_IO_THREADS * c->stage_bytes));
    if (!c->slots || !c->mem || !c->io_stage) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                          "out of memory for an expert cache of %llu bytes",
                          (unsigned long long)(n_slots * c->slot_bytes));
        goto fail;
    }
    for (int32_t i = 0; i < c->n_slots; i++)
        c->slots[i].key = -1;

    /* O_DIRECT where the file system takes it (not tmpfs, for one); else buffered reads whose
     * pages are dropped after each read. */
    c->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    c->direct = c->fd >= 0;
    if (c->fd < 0)
        c->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0 || fstat(c->fd, &c->at_open) != 0) {
        st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "cannot open '%s' for expert reads: %s",
                          path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)c->at_open.st_size != fx_gguf_file_size(m->file)) {
        st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET,
                          "'%s' changed while it was loaded (%llu bytes mapped, %lld now)", path,
                          (unsigned long long)fx_gguf_file_size(m->file),
                          (long long)c->at_open.st_size);
        goto fail;
    }
    c->stats.cache_bytes = bytes;
    c->stats.n_slots = c->n_slots;

    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->changed, NULL);
    pthread_cond_init(&c->work, NULL);
    c->synced = true;
    for (; c->n_io < N_IO_THREADS; c->n_io++) {
        struct io_arg *a = malloc(sizeof *a);
        if (a)
            *a = (struct io_arg){c, c->io_stage + (uint64_t)c->n_io * c->stage_bytes};
        if (!a || pthread_create(&c->io[c->n_io], NULL, io_main, a) != 0) {
            free(a);
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "cannot start an I/O thread");
            goto fail;
        }
    }
    *out = c;
    return FX_OK;
fail:
    fx_xcache_free(c);
    return st;
}

void fx_xcache_free(struct fx_xcache *c) {
    if (!c)
        return;
    if (c->synced) {
        pthread_mutex_lock(&c->mu);
        c->stop = true;
        pthread_cond_broadcast(&c->work);
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < c->n_io; i++)
            pthread_join(c->io[i], NULL);
        pthread_cond_destroy(&c->work);
        pthread_cond_destroy(&c->changed);
        pthread_mutex_destroy(&c->mu);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->io_stage);
    free(c->mem);
    free(c->slots);
    free(c->queue);
    free(c->uses);
    free(c->summed);
    free(c->sum);
    free(c->held);
    free(c->where);
    free(c->mats);
    free(c->path);
    free(c);
}
