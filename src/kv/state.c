/* Saved sequence state: the file format of kv/state.h, its writer and its reader, over the
 * contiguous cache of a context and over a sequence of a paged pool.
 *
 * A load reads the file once, from start to end: the header (its own sizes checked against the
 * file's, overflow-checked), the tokens, then the rows, keeping in a temporary buffer only those
 * of the positions it will load and checksumming everything. Only when the checksum, the
 * identity, the KV types and the size all agree does it copy the kept rows into the cache, so a
 * refused file changes nothing (ARCHITECTURE.md rules 4 and 7). */
#include "kv/state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "core/error.h"
#include "kernels/kv_tile.h"
#include "kv/kv.h"
#include "kv/paged.h"
#include "model/model.h"

/* ---- CRC-64/XZ, eight bytes at a time ------------------------------------------------------- */

#define CRC64_POLY 0xc96c5795d7870f42ull /* ECMA-182, reflected */

static uint64_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t c = (uint64_t)i;
        for (int b = 0; b < 8; b++)
            c = c & 1 ? (c >> 1) ^ CRC64_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (int i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint64_t fx_kv_state_crc64(uint64_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w = 0;
        for (int i = 0; i < 8; i++)
            w |= (uint64_t)p[i] << (8 * i);
        c ^= w;
        c = crc_table[7][c & 0xff] ^ crc_table[6][(c >> 8) & 0xff] ^
            crc_table[5][(c >> 16) & 0xff] ^ crc_table[4][(c >> 24) & 0xff] ^
            crc_table[3][(c >> 32) & 0xff] ^ crc_table[2][(c >> 40) & 0xff] ^
            crc_table[1][(c >> 48) & 0xff] ^ crc_table[0][c >> 56];
    }
    for (; n > 0; n--, p++)
        c = (c >> 8) ^ crc_table[0][(c ^ *p) & 0xff];
    return ~c;
}

/* ---- where a sequence's rows live ----------------------------------------------------------- */

/* The rows a file is written from or loaded into: the contiguous cache of a context, or one
 * sequence of a pool. */
enum place_kind { PLACE_CONTIG, PLACE_POOL };

struct place {
    enum place_kind kind;
    union {
        struct fx_kv_contig *kv;
        struct {
            struct fx_kv_pool *pool;
            fx_seq_id seq;
        } pool;
    } u;
    int32_t n_layer, n_head_kv;
    int64_t head_dim; /* of the keys, which the cache keeps in tiles */
    enum fx_type type_k, type_v;
    uint64_t k_row, v_row;
    struct fx_rstate *rs; /* the sequence's recurrent state; n_layer 0 for models without */
};

static struct place place_contig(struct fx_kv_contig *kv, struct fx_rstate *rs) {
    return (struct place){.kind = PLACE_CONTIG,
                          .u.kv = kv,
                          .rs = rs,
                          .n_layer = kv->n_layer,
                          .n_head_kv = kv->n_head_kv,
                          .head_dim = kv->head_dim,
                          .type_k = kv->type_k,
                          .type_v = kv->type_v,
                          .k_row = kv->k_row,
                          .v_row = kv->v_row};
}

static struct place place_pool(struct fx_kv_pool *pool, fx_seq_id seq) {
    return (struct place){.kind = PLACE_POOL,
                          .u.pool = {pool, seq},
                          .rs = &pool->seqs[seq].rs,
                          .n_layer = pool->n_layer,
                          .n_head_kv = pool->n_head_kv,
                          .head_dim = pool->head_dim,
                          .type_k = pool->type_k,
                          .type_v = pool->type_v,
                          .k_row = pool->k_row,
                          .v_row = pool->v_row};
}

/* The V row of head g at position pos of layer il, and in *run how many positions from pos on
 * (at most n - pos) follow it consecutively. */
static uint8_t *value_run(const struct place *p, int il, int g, int32_t pos, int32_t n,
                          int32_t *run) {
    switch (p->kind) {
    case PLACE_CONTIG:
        *run = n - pos;
        return fx_kv_contig_v(p->u.kv, il, g, pos);
    case PLACE_POOL: {
        const struct fx_kv_pool *pl = p->u.pool.pool;
        int32_t end = (pos / pl->block_size + 1) * pl->block_size;
        *run = (end < n ? end : n) - pos;
        return fx_kv_pool_v(pl, p->u.pool.seq, il, g, pos);
    }
    }
    FX_ASSERT(!"unknown place");
    return NULL;
}

/* The key of head g at position pos of layer il: a slot of a key tile. Files keep keys as rows:
 * save gathers each out of its slot, load scatters it in (kernels/kv_tile.h). */
static struct fx_kv_key_at key_at(const struct place *p, int il, int g, int32_t pos) {
    switch (p->kind) {
    case PLACE_CONTIG:
        return fx_kv_contig_key(p->u.kv, il, g, pos);
    case PLACE_POOL:
        return fx_kv_pool_key(p->u.pool.pool, p->u.pool.seq, il, g, pos);
    }
    FX_ASSERT(!"unknown place");
    return (struct fx_kv_key_at){0};
}

/* ---- the header ----------------------------------------------------------------------------- */

#define ARCH_BYTES      32
#define OFF_VERSION     8
#define OFF_ARCH        12
#define OFF_DIMS        44
#define OFF_FINGERPRINT 72
#define OFF_TYPE_K      80
#define OFF_TYPE_V      84
#define OFF_N           88
#define OFF_REC         92

enum { D_LAYER, D_EMBD, D_HEAD, D_HEAD_KV, D_HEAD_DIM, D_HEAD_DIM_V, D_VOCAB, N_DIMS };
static const char *const DIM_NAMES[N_DIMS] = {"n_layer",  "n_embd",     "n_head", "n_head_kv",
                                              "head_dim", "head_dim_v", "n_vocab"};

struct header {
    uint32_t version;
    char arch[ARCH_BYTES];
    uint32_t dims[N_DIMS];
    uint64_t fingerprint;
    uint32_t type_k, type_v;
    uint32_t n;
    uint32_t rec_floats; /* version 3: floats of the recurrent state; 0 in version 1 */
};

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void encode_header(const struct header *h, uint8_t out[FX_KV_STATE_HEADER]) {
    memset(out, 0, FX_KV_STATE_HEADER);
    memcpy(out, FX_KV_STATE_MAGIC, 8);
    put_le32(out + OFF_VERSION, h->version);
    memcpy(out + OFF_ARCH, h->arch, ARCH_BYTES);
    for (int d = 0; d < N_DIMS; d++)
        put_le32(out + OFF_DIMS + 4 * d, h->dims[d]);
    put_le64(out + OFF_FINGERPRINT, h->fingerprint);
    put_le32(out + OFF_TYPE_K, h->type_k);
    put_le32(out + OFF_TYPE_V, h->type_v);
    put_le32(out + OFF_N, h->n);
    put_le32(out + OFF_REC, h->rec_floats);
}

/* Floats of model m's recurrent state (0 for models without one). */
static uint64_t rec_floats(const struct fx_model *m) {
    int64_t conv, ssm;
    fx_rstate_shape(m, &conv, &ssm);
    return (uint64_t)m->hp.n_layer_rec * (uint64_t)(conv + ssm);
}

/* The identity of model m, with the KV types of p and n positions: version 3 with the size of
 * the recurrent state for hybrid models, version 1 for the others. */
static struct header model_header(const struct fx_model *m, const struct place *p, int32_t n) {
    const struct fx_hparams *hp = &m->hp;
    uint64_t r = rec_floats(m);
    struct header h = {.version = r ? 3u : 1u,
                       .dims = {(uint32_t)hp->n_layer_kv, (uint32_t)hp->n_embd,
                                (uint32_t)hp->n_head, (uint32_t)hp->n_head_kv,
                                (uint32_t)hp->head_dim, (uint32_t)hp->head_dim_v,
                                (uint32_t)hp->n_vocab},
                       .fingerprint = fx_model_fingerprint(m),
                       .type_k = (uint32_t)p->type_k,
                       .type_v = (uint32_t)p->type_v,
                       .n = (uint32_t)n,
                       .rec_floats = (uint32_t)r};
    snprintf(h.arch, sizeof h.arch, "%s", m->arch);
    return h;
}

/* ---- writing -------------------------------------------------------------------------------- */

struct out {
    FILE *f;
    uint64_t crc;
    bool ok;
};

static void put(struct out *o, const void *data, uint64_t n) {
    if (!o->ok || n == 0)
        return;
    o->crc = fx_kv_state_crc64(o->crc, data, (size_t)n);
    o->ok = fwrite(data, 1, (size_t)n, o->f) == (size_t)n;
}

/* Every head's key rows of positions 0..n-1, layer by layer, a block of 32 elements at a time
 * out of the tiles (the row's bytes in order). */
static void put_key_rows(struct out *o, const struct place *p, int32_t n) {
    int64_t dim = p->head_dim;
    for (int il = 0; il < p->n_layer; il++)
        for (int g = 0; g < p->n_head_kv; g++)
            for (int32_t pos = 0; pos < n; pos++) {
                struct fx_kv_key_at key = key_at(p, il, g, pos);
                for (int64_t e0 = 0; e0 < dim; e0 += FX_QK) {
                    uint8_t part[FX_QK * sizeof(float)];
                    int64_t elems = dim - e0 < FX_QK ? dim - e0 : FX_QK;
                    uint64_t bytes;
                    fx_type_row_bytes(p->type_k, elems, &bytes);
                    fx_kv_tile_get(p->type_k, dim, key.tile, key.slot, e0, elems, part);
                    put(o, part, bytes);
                }
            }
}

static void put_value_rows(struct out *o, const struct place *p, int32_t n) {
    for (int il = 0; il < p->n_layer; il++)
        for (int g = 0; g < p->n_head_kv; g++)
            for (int32_t pos = 0, run = 0; pos < n; pos += run) {
                const uint8_t *src = value_run(p, il, g, pos, n, &run);
                put(o, src, (uint64_t)run * p->v_row);
            }
}

/* Writes the state of positions 0..n-1 of p (tokens[0..n)) for model m to path, through a
 * temporary file renamed into place. */
static fx_status save(const struct place *p, const struct fx_model *m, const fx_token *tokens,
                      int32_t n, const char *path, struct fx_error *err) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp)
        return fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory writing '%s'", path);
    snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fx_status st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "cannot create '%s': %s", tmp,
                                    strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        return st;
    }

    uint8_t hdr[FX_KV_STATE_HEADER];
    struct header h = model_header(m, p, n);
    encode_header(&h, hdr);
    struct out o = {.f = f, .crc = 0, .ok = true};
    put(&o, hdr, sizeof hdr);
    for (int32_t i = 0; i < n; i++) {
        uint8_t t[4];
        put_le32(t, (uint32_t)tokens[i]);
        put(&o, t, 4);
    }
    put_key_rows(&o, p, n);
    put_value_rows(&o, p, n);
    if (p->rs->n_layer > 0) {
        put(&o, p->rs->conv, (uint64_t)p->rs->n_layer * (uint64_t)p->rs->conv_floats * 4);
        put(&o, p->rs->ssm, (uint64_t)p->rs->n_layer * (uint64_t)p->rs->ssm_floats * 4);
    }
    uint8_t sum[8];
    put_le64(sum, o.crc);
    put(&o, sum, 8);

    bool ok = o.ok && fflush(f) == 0 && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    int saved_errno = errno;
    ok = fclose(f) == 0 && ok;
    if (ok && rename(tmp, path) != 0) {
        saved_errno = errno;
        ok = false;
    }
    fx_status st = FX_OK;
    if (!ok) {
        st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "writing state file '%s': %s", path,
                          strerror(saved_errno ? saved_errno : EIO));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

/* ---- reading -------------------------------------------------------------------------------- */

/* A state file read and checksummed, with the rows of positions 0..keep-1 kept. */
struct state {
    struct header h;
    uint64_t k_row, v_row; /* the file's row sizes */
    fx_token *tokens;      /* [h.n] */
    int32_t keep;
    uint8_t *k; /* [n_layer][n_head_kv][keep][k_row] */
    uint8_t *v; /* [n_layer][n_head_kv][keep][v_row] */
    float *rec; /* [h.rec_floats] the recurrent state, when keep is every position; else NULL */
};

static void state_free(struct state *s) {
    free(s->tokens);
    free(s->k);
    free(s->v);
    free(s->rec);
    *s = (struct state){0};
}

struct in {
    FILE *f;
    uint64_t crc, off, size;
};

#define SKIP_CHUNK (1u << 16)

/* Reads n bytes into dst (NULL: reads and drops them), adding them to the checksum. */
static fx_status get(struct in *r, void *dst, uint64_t n, uint8_t *scratch, struct fx_error *err) {
    while (n > 0) {
        size_t want = dst ? (size_t)n : (size_t)(n < SKIP_CHUNK ? n : SKIP_CHUNK);
        uint8_t *to = dst ? dst : scratch;
        size_t got = fread(to, 1, want, r->f);
        r->crc = fx_kv_state_crc64(r->crc, to, got);
        r->off += got;
        if (got != want)
            return fx_error_set(err, FX_ERR_IO, r->off,
                                "state file could not be read at byte %llu (changed while "
                                "loading?): %s",
                                (unsigned long long)r->off,
                                ferror(r->f) ? strerror(errno) : "unexpected end of file");
        n -= got;
        if (dst)
            dst = (uint8_t *)dst + got;
    }
    return FX_OK;
}

static fx_status parse_header(const uint8_t *b, uint64_t size, struct state *s,
                              struct fx_error *err) {
    struct header *h = &s->h;
    if (memcmp(b, FX_KV_STATE_MAGIC, 8) != 0)
        return fx_error_set(err, FX_ERR_FORMAT, 0, "not a ferrox state file (bad magic)");
    if (size < FX_KV_STATE_HEADER + 8)
        return fx_error_set(err, FX_ERR_FORMAT, size,
                            "state file is truncated: %llu bytes, less than a header",
                            (unsigned long long)size);
    h->version = get_le32(b + OFF_VERSION);
    if (h->version < 1 || h->version > FX_KV_STATE_VERSION)
        return fx_error_set(err, FX_ERR_FORMAT, OFF_VERSION,
                            "state file version %u is not supported (this build reads version %u)",
                            h->version, FX_KV_STATE_VERSION);
    memcpy(h->arch, b + OFF_ARCH, ARCH_BYTES);
    if (!memchr(h->arch, '\0', ARCH_BYTES))
        return fx_error_set(err, FX_ERR_FORMAT, OFF_ARCH,
                            "state file is damaged: its architecture name is not terminated");
    for (char *c = h->arch; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
    for (int d = 0; d < N_DIMS; d++)
        h->dims[d] = get_le32(b + OFF_DIMS + 4 * d);
    h->fingerprint = get_le64(b + OFF_FINGERPRINT);
    h->type_k = get_le32(b + OFF_TYPE_K);
    h->type_v = get_le32(b + OFF_TYPE_V);
    h->n = get_le32(b + OFF_N);
    h->rec_floats = get_le32(b + OFF_REC);
    if (h->version == 1 && h->rec_floats != 0)
        return fx_error_set(err, FX_ERR_FORMAT, OFF_REC,
                            "state file is damaged: reserved field is %u, not 0", h->rec_floats);
    /* Version 2 held the delta-rule states transposed (an older build's layout): read as
     * version 3 they would be wrong, not refused. */
    if (h->version == 2)
        return fx_error_set(err, FX_ERR_FORMAT, OFF_VERSION,
                            "state file version 2 holds a recurrent state in an older build's "
                            "layout, which this build does not read (evaluate the prompt again)");
    if (h->version == 3 && h->rec_floats == 0)
        return fx_error_set(err, FX_ERR_FORMAT, OFF_REC,
                            "state file is damaged: a version 3 file without a recurrent state");
    if (h->n > INT32_MAX)
        return fx_error_set(err, FX_ERR_FORMAT, OFF_N,
                            "state file is damaged: %u positions is more than any context", h->n);
    const uint32_t types[2] = {h->type_k, h->type_v};
    uint64_t *rows[2] = {&s->k_row, &s->v_row};
    const uint32_t dims[2] = {h->dims[D_HEAD_DIM], h->dims[D_HEAD_DIM_V]};
    for (int i = 0; i < 2; i++) {
        struct fx_error e;
        if (types[i] >= FX_TYPE_COUNT ||
            fx_kv_row_bytes((enum fx_type)types[i], dims[i], i ? "V" : "K", rows[i], &e) != FX_OK)
            return fx_error_set(err, FX_ERR_FORMAT, i ? OFF_TYPE_V : OFF_TYPE_K,
                                "state file is damaged: %s type id %u with head size %u is not a "
                                "KV row (f32, f16 or q8_0)",
                                i ? "V" : "K", types[i], dims[i]);
    }
    /* header + 4 n + n_layer * n_head_kv * n * (k_row + v_row) + 4 r + 8, overflow-checked. */
    uint64_t n_rows, row_bytes, total;
    if (fx_mul_overflow_u64((uint64_t)h->dims[D_LAYER] * h->dims[D_HEAD_KV], h->n, &n_rows) ||
        fx_add_overflow_u64(s->k_row, s->v_row, &row_bytes) ||
        fx_mul_overflow_u64(n_rows, row_bytes, &total) ||
        fx_add_overflow_u64(total, 4 * (uint64_t)h->rec_floats, &total) ||
        fx_add_overflow_u64(total, FX_KV_STATE_HEADER + 8 + 4 * (uint64_t)h->n, &total))
        return fx_error_set(err, FX_ERR_FORMAT, OFF_DIMS,
                            "state file is damaged: the size its header describes overflows");
    if (total != size)
        return fx_error_set(err, FX_ERR_FORMAT, size < total ? size : total,
                            "state file is damaged or truncated: it is %llu bytes, its header "
                            "describes %llu",
                            (unsigned long long)size, (unsigned long long)total);
    return FX_OK;
}

/* The longest common prefix of a[0..n) and b[0..m). */
static int32_t common_prefix(const fx_token *a, int32_t n, const fx_token *b, int32_t m) {
    int32_t i = 0;
    while (i < n && i < m && a[i] == b[i])
        i++;
    return i;
}

/* Reads path: its header, its tokens, the rows of positions 0..keep-1 where keep is every
 * position (prompt NULL) or the common prefix with prompt[0..n_prompt), at most n_prompt - 1
 * (prompt not NULL, even when n_prompt is 0), and checks the checksum. Nothing is compared with
 * a model yet. */
static fx_status read_state(const char *path, const fx_token *prompt, int32_t n_prompt,
                            struct state *s, struct fx_error *err) {
    *s = (struct state){0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return fx_error_set(err, errno == ENOENT ? FX_ERR_NOT_FOUND : FX_ERR_IO, FX_NO_OFFSET,
                            "cannot open state file '%s': %s", path, strerror(errno));
    struct stat sb;
    fx_status st = FX_OK;
    uint8_t *scratch = NULL;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = fx_error_set(err, FX_ERR_IO, FX_NO_OFFSET, "state file '%s' is not a regular file",
                          path);
        goto done;
    }
    struct in r = {.f = f, .size = (uint64_t)sb.st_size};
    uint8_t hdr[FX_KV_STATE_HEADER];
    size_t head = r.size < sizeof hdr ? (size_t)r.size : sizeof hdr;
    if (r.size < 8) {
        st = fx_error_set(err, FX_ERR_FORMAT, r.size, "state file is truncated: %llu bytes",
                          (unsigned long long)r.size);
        goto done;
    }
    scratch = malloc(SKIP_CHUNK);
    if (!scratch) {
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory");
        goto done;
    }
    memset(hdr, 0, sizeof hdr);
    if ((st = get(&r, hdr, head, scratch, err)) || (st = parse_header(hdr, r.size, s, err)))
        goto done;

    const struct header *h = &s->h;
    int32_t n = (int32_t)h->n;
    /* Each allocation below is at most the file's size, which the header matches. */
    s->tokens = malloc((size_t)n * sizeof *s->tokens + 1);
    uint8_t *raw = malloc((size_t)n * 4 + 1);
    if (!s->tokens || !raw) {
        free(raw);
        st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET, "out of memory for %d tokens", n);
        goto done;
    }
    st = get(&r, raw, 4 * (uint64_t)n, scratch, err);
    for (int32_t i = 0; i < n && !st; i++)
        s->tokens[i] = (fx_token)get_le32(raw + 4 * (uint64_t)i);
    free(raw);
    if (st)
        goto done;

    int32_t keep = n;
    if (prompt) {
        keep = common_prefix(s->tokens, n, prompt, n_prompt);
        if (keep > n_prompt - 1)
            keep = n_prompt - 1 > 0 ? n_prompt - 1 : 0;
    }
    s->keep = keep;
    uint64_t heads = (uint64_t)h->dims[D_LAYER] * h->dims[D_HEAD_KV];
    uint64_t rows[2] = {s->k_row, s->v_row};
    uint8_t **bufs[2] = {&s->k, &s->v};
    for (int i = 0; i < 2; i++) {
        uint64_t kept = heads * (uint64_t)keep * rows[i]; /* <= the file's size */
        *bufs[i] = malloc((size_t)kept + 1);
        if (!*bufs[i]) {
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                              "out of memory for %llu bytes of saved rows",
                              (unsigned long long)kept);
            goto done;
        }
        for (uint64_t hd = 0; hd < heads && !st; hd++) {
            uint64_t keep_bytes = (uint64_t)keep * rows[i];
            st = get(&r, *bufs[i] + hd * keep_bytes, keep_bytes, scratch, err);
            if (!st)
                st = get(&r, NULL, (uint64_t)(n - keep) * rows[i], scratch, err);
        }
        if (st)
            goto done;
    }
    /* The recurrent state is that of all n positions: kept only with every one of them. */
    if (h->rec_floats > 0) {
        uint64_t bytes = 4 * (uint64_t)h->rec_floats; /* <= the file's size */
        if (keep == n && !(s->rec = malloc((size_t)bytes))) {
            st = fx_error_set(err, FX_ERR_NOMEM, FX_NO_OFFSET,
                              "out of memory for %llu bytes of recurrent state",
                              (unsigned long long)bytes);
            goto done;
        }
        if ((st = get(&r, s->rec, bytes, scratch, err)))
            goto done;
        if (!s->rec)
            s->keep = 0;
    }
    uint64_t computed = r.crc;
    uint8_t sum[8];
    if ((st = get(&r, sum, 8, scratch, err)))
        goto done;
    if (get_le64(sum) != computed)
        st = fx_error_set(err, FX_ERR_FORMAT, r.size - 8,
                          "state file is damaged: its checksum %016llx does not match its "
                          "contents (%016llx)",
                          (unsigned long long)get_le64(sum), (unsigned long long)computed);
done:
    free(scratch);
    fclose(f);
    if (st)
        state_free(s);
    return st;
}

/* Whether a state read from a file belongs to model m and rows of types (type_k, type_v);
 * `what` names the cache ("this context's", "this pool's"). */
static fx_status check_identity(const struct state *s, const struct fx_model *m,
                                enum fx_type type_k, enum fx_type type_v, const char *what,
                                struct fx_error *err) {
    const struct header *h = &s->h;
    struct header want = model_header(m, &(struct place){.type_k = type_k, .type_v = type_v}, 0);
    if (strcmp(h->arch, want.arch) != 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_ARCH,
                            "state file is for another model (architecture %s, this model is %s)",
                            h->arch, want.arch);
    for (int d = 0; d < N_DIMS; d++)
        if (h->dims[d] != want.dims[d])
            return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_DIMS + 4 * (uint64_t)d,
                                "state file is for another model (%s %u, this model has %u)",
                                DIM_NAMES[d], h->dims[d], want.dims[d]);
    if (h->fingerprint != want.fingerprint)
        return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_FINGERPRINT,
                            "state file is for another model (the weights' fingerprint differs: "
                            "%016llx, this model's %016llx)",
                            (unsigned long long)h->fingerprint,
                            (unsigned long long)want.fingerprint);
    if (h->rec_floats != want.rec_floats && h->rec_floats == 0)
        return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_VERSION,
                            "state file (version %u) has no recurrent state, which a %s sequence "
                            "needs",
                            h->version, want.arch);
    if (h->rec_floats != want.rec_floats)
        return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_REC,
                            "state file is for another model (a recurrent state of %u floats, "
                            "this model's has %u)",
                            h->rec_floats, want.rec_floats);
    if (h->type_k != want.type_k || h->type_v != want.type_v)
        return fx_error_set(err, FX_ERR_INVALID_ARG, OFF_TYPE_K,
                            "state file holds K/V rows of types %s/%s, %s cache holds %s/%s",
                            fx_type_name((enum fx_type)h->type_k),
                            fx_type_name((enum fx_type)h->type_v), what, fx_type_name(type_k),
                            fx_type_name(type_v));
    for (uint32_t i = 0; i < h->n; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= m->hp.n_vocab)
            return fx_error_set(err, FX_ERR_FORMAT, FX_KV_STATE_HEADER + 4 * (uint64_t)i,
                                "state file is damaged: token %d at position %u is outside the "
                                "vocabulary of %d",
                                s->tokens[i], i, m->hp.n_vocab);
    return FX_OK;
}

/* Copies the kept rows of s into positions 0..s->keep-1 of p, and its recurrent state (kept only
 * with every position) into p's. */
static void apply(const struct state *s, const struct place *p) {
    int32_t keep = s->keep;
    if (s->rec && keep > 0) {
        const struct fx_rstate *rs = p->rs;
        uint64_t conv = (uint64_t)rs->n_layer * (uint64_t)rs->conv_floats;
        FX_ASSERT(conv + (uint64_t)rs->n_layer * (uint64_t)rs->ssm_floats == s->h.rec_floats);
        memcpy(rs->conv, s->rec, (size_t)conv * sizeof(float));
        memcpy(rs->ssm, s->rec + conv, (size_t)(s->h.rec_floats - conv) * sizeof(float));
    }
    for (int il = 0; il < p->n_layer; il++)
        for (int g = 0; g < p->n_head_kv; g++) {
            uint64_t hd = (uint64_t)il * (uint64_t)p->n_head_kv + (uint64_t)g;
            const uint8_t *k = s->k + hd * (uint64_t)keep * p->k_row;
            for (int32_t pos = 0; pos < keep; pos++) {
                struct fx_kv_key_at key = key_at(p, il, g, pos);
                fx_kv_tile_put(p->type_k, p->head_dim, key.tile, key.slot, 0, p->head_dim,
                               k + (uint64_t)pos * p->k_row);
            }
            const uint8_t *v = s->v + hd * (uint64_t)keep * p->v_row;
            for (int32_t pos = 0, run = 0; pos < keep; pos += run) {
                uint8_t *dst = value_run(p, il, g, pos, keep, &run);
                memcpy(dst, v + (uint64_t)pos * p->v_row, (size_t)((uint64_t)run * p->v_row));
            }
        }
}

static bool tokens_ok(const fx_token *tokens, int32_t n, int32_t n_vocab, int32_t *bad) {
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            *bad = i;
            return false;
        }
    return true;
}

/* ---- the public functions ------------------------------------------------------------------- */

fx_status fx_kv_contig_save(const struct fx_kv_contig *kv, const struct fx_rstate *rs,
                            const struct fx_model *m, const fx_token *tokens, int32_t n,
                            const char *path, struct fx_error *err) {
    if (!path || n < 0 || n > kv->n_filled || (n > 0 && !tokens))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cannot save %d positions of a cache holding %d", n, kv->n_filled);
    if (rs->n_layer > 0 && n != kv->n_filled)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "cannot save %d positions of a %s sequence of %d: its recurrent state "
                            "is that of all of them",
                            n, m->arch, kv->n_filled);
    int32_t bad;
    if (!tokens_ok(tokens, n, m->hp.n_vocab, &bad))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "token %d at index %d is outside the vocabulary of %d", tokens[bad],
                            bad, m->hp.n_vocab);
    struct place p = place_contig((struct fx_kv_contig *)kv, (struct fx_rstate *)rs); /* read */
    return save(&p, m, tokens, n, path, err);
}

fx_status fx_kv_contig_load(struct fx_kv_contig *kv, struct fx_rstate *rs, const struct fx_model *m,
                            const char *path, const fx_token *prompt, int32_t n_prompt,
                            int32_t *n_loaded, struct fx_error *err) {
    if (!path || !n_loaded || n_prompt < 0 || (n_prompt > 0 && !prompt))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "bad arguments to fx_context_state_load");
    struct state s;
    fx_status st = read_state(path, prompt ? prompt : (const fx_token[]){0}, n_prompt, &s, err);
    if (st)
        return st;
    st = check_identity(&s, m, kv->type_k, kv->type_v, "this context's", err);
    if (!st && s.h.n > (uint32_t)kv->n_ctx)
        st = fx_error_set(err, FX_ERR_CAPACITY, OFF_N,
                          "state file holds %u positions, more than the context of %d", s.h.n,
                          kv->n_ctx);
    if (!st) {
        struct place p = place_contig(kv, rs);
        apply(&s, &p);
        kv->n_filled = s.keep;
        *n_loaded = s.keep;
    }
    state_free(&s);
    return st;
}

/* Whether pool was made for model m. */
static fx_status pool_matches(const struct fx_kv_pool *pool, const struct fx_model *m,
                              struct fx_error *err) {
    const struct fx_hparams *hp = &m->hp;
    if (pool->n_layer != hp->n_layer_kv || pool->n_head_kv != hp->n_head_kv ||
        pool->head_dim != hp->head_dim || pool->head_dim_v != hp->head_dim_v ||
        (pool->recurrent && pool->model != m))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "the pool (%d layers of %d KV heads) was not made for this model (%d "
                            "layers of %d)",
                            pool->n_layer, pool->n_head_kv, hp->n_layer_kv, hp->n_head_kv);
    return FX_OK;
}

fx_status fx_kv_seq_save(const struct fx_kv_pool *pool, fx_seq_id seq, const struct fx_model *m,
                         const char *path, struct fx_error *err) {
    if (!pool || !m || !path)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "bad arguments to fx_kv_seq_save");
    if (!fx_kv_pool_seq_live(pool, seq))
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET, "sequence %d is not alive", seq);
    fx_status st = pool_matches(pool, m, err);
    if (st)
        return st;
    const struct fx_kv_seq *s = &pool->seqs[seq];
    struct place p = place_pool((struct fx_kv_pool *)pool, seq); /* only read */
    return save(&p, m, s->tokens, s->len, path, err);
}

fx_status fx_kv_seq_load(struct fx_kv_pool *pool, const struct fx_model *m, const char *path,
                         fx_seq_id *out, struct fx_error *err) {
    if (!pool || !m || !path || !out)
        return fx_error_set(err, FX_ERR_INVALID_ARG, FX_NO_OFFSET,
                            "bad arguments to fx_kv_seq_load");
    fx_status st = pool_matches(pool, m, err);
    if (st)
        return st;
    struct state s;
    if ((st = read_state(path, NULL, 0, &s, err)))
        return st;
    fx_seq_id seq = -1;
    if ((st = check_identity(&s, m, pool->type_k, pool->type_v, "this pool's", err)) ||
        (st = fx_kv_seq_create(pool, &seq, err)))
        goto done;
    /* Every block first: a file that does not fit leaves the pool as it was. */
    if ((st = fx_kv_seq_reserve(pool, seq, s.keep, NULL, err))) {
        fx_kv_seq_free(pool, seq);
        goto done;
    }
    struct place p = place_pool(pool, seq);
    apply(&s, &p);
    for (int32_t i = 0; i < s.keep; i++)
        fx_kv_pool_commit_row(pool, seq, s.tokens[i]);
    *out = seq;
done:
    state_free(&s);
    return st;
}
