/* libFuzzer target for the load generator's HTTP response reader (tools/loadgen/stream.c): the
 * first byte picks a streamed (event lines) or a whole body and the size of the pieces the rest is
 * fed in, the rest is the response. Whatever the bytes, the reader must not crash, leak or read
 * past its bounds, must end in at most one of done and error, and must read the response the same
 * whether it arrives in one piece or in many (each event's payload, the body, the status, and
 * where it stopped). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/loadgen/stream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool cond) {
    if (!cond)
        abort();
}

/* The events' payloads, each as its length then its bytes. */
struct events {
    uint8_t *bytes;
    size_t len;
};

static void on_event(void *user, const char *payload, size_t len) {
    struct events *e = user;
    check(len < LG_EVENT_LINE_MAX);
    uint8_t *grown = realloc(e->bytes, e->len + sizeof len + len);
    check(grown != NULL);
    e->bytes = grown;
    memcpy(e->bytes + e->len, &len, sizeof len);
    memcpy(e->bytes + e->len + sizeof len, payload, len);
    e->len += sizeof len + len;
}

struct reading {
    struct lg_stream s;
    struct events events;
    size_t fed; /* bytes taken before the reader stopped asking for more */
};

static void read_all(struct reading *r, bool streamed, const uint8_t *p, size_t n, size_t piece) {
    memset(r, 0, sizeof *r);
    check(lg_stream_init(&r->s, streamed ? on_event : NULL, &r->events));
    bool more = true;
    while (more && r->fed < n) {
        size_t take = n - r->fed < piece ? n - r->fed : piece;
        more = lg_stream_feed(&r->s, (const char *)p + r->fed, take);
        r->fed += take;
    }
    if (more)
        lg_stream_closed(&r->s);
    check(!(r->s.done && r->s.error[0]));
    check(r->s.done || r->s.error[0]);
    check(r->s.status == 0 || (r->s.status >= 100 && r->s.status <= 999));
    check(r->s.body_len <= LG_BODY_MAX);
    check(!r->s.body || r->s.body[r->s.body_len] == '\0');
}

static void free_reading(struct reading *r) {
    lg_stream_free(&r->s);
    free(r->events.bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (4 << 20))
        return 0;
    bool streamed = data[0] & 1;
    size_t piece = 1 + (data[0] >> 1) % 17; /* 1..17 bytes a read */
    struct reading whole, pieces;
    read_all(&whole, streamed, data + 1, size - 1, size);
    read_all(&pieces, streamed, data + 1, size - 1, piece);
    check(whole.s.status == pieces.s.status);
    check(whole.s.done == pieces.s.done);
    check(strcmp(whole.s.error, pieces.s.error) == 0);
    check(whole.s.body_len == pieces.s.body_len);
    check(whole.s.body_len == 0 || memcmp(whole.s.body, pieces.s.body, whole.s.body_len) == 0);
    check(whole.events.len == pieces.events.len);
    check(whole.events.len == 0 ||
          memcmp(whole.events.bytes, pieces.events.bytes, whole.events.len) == 0);
    free_reading(&whole);
    free_reading(&pieces);
    return 0;
}
