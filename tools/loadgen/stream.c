/* An HTTP/1.1 response read as it arrives (stream.h). */
#include "stream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum phase {
    PHASE_STATUS,     /* the status line */
    PHASE_HEADERS,    /* header lines up to the empty one */
    PHASE_BODY,       /* a body of declared length (left) or ended by the close (left < 0) */
    PHASE_CHUNK_SIZE, /* a chunk's size line */
    PHASE_CHUNK_DATA, /* left bytes of the chunk */
    PHASE_CHUNK_END,  /* the empty line after a chunk's data */
    PHASE_TRAILER,    /* trailer lines after the last chunk, up to the empty one */
    PHASE_END,
};

#define CHUNK_SIZE_MAX ((int64_t)1 << 40)

bool lg_stream_init(struct lg_stream *s, lg_data_fn on_data, void *user) {
    memset(s, 0, sizeof *s);
    s->on_data = on_data;
    s->user = user;
    s->phase = PHASE_STATUS;
    if (on_data && !(s->event = malloc(LG_EVENT_LINE_MAX)))
        return false;
    return true;
}

void lg_stream_free(struct lg_stream *s) {
    free(s->event);
    free(s->body);
    s->event = NULL;
    s->body = NULL;
}

__attribute__((format(printf, 2, 3))) static bool fail(struct lg_stream *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    s->phase = PHASE_END;
    return false;
}

static bool finish(struct lg_stream *s) {
    s->done = true;
    s->phase = PHASE_END;
    return false;
}

/* One line of a streamed body (without its line end): a `data:` line's payload, after the colon
 * and one optional space, goes to on_data; events' other fields and comments are not needed. */
static void event_line(struct lg_stream *s, const char *line, size_t len) {
    if (len >= 5 && memcmp(line, "data:", 5) == 0) {
        size_t skip = len > 5 && line[5] == ' ' ? 6 : 5;
        s->on_data(s->user, line + skip, len - skip);
    }
}

/* n bytes of the body, decoded from any chunking. */
static bool body_bytes(struct lg_stream *s, const char *p, size_t n) {
    if (!s->on_data) {
        if (n > LG_BODY_MAX - s->body_len)
            return fail(s, "the body is over %d bytes", LG_BODY_MAX);
        char *grown = realloc(s->body, s->body_len + n + 1);
        if (!grown)
            return fail(s, "out of memory for the body");
        s->body = grown;
        memcpy(s->body + s->body_len, p, n);
        s->body_len += n;
        s->body[s->body_len] = '\0';
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n') {
            if (s->event_len == LG_EVENT_LINE_MAX)
                return fail(s, "a line of the event stream is over %d bytes", LG_EVENT_LINE_MAX);
            s->event[s->event_len++] = p[i];
            continue;
        }
        size_t len = s->event_len;
        if (len > 0 && s->event[len - 1] == '\r')
            len--;
        event_line(s, s->event, len);
        s->event_len = 0;
    }
    return true;
}

/* "HTTP/1.1 200 OK" */
static bool status_line(struct lg_stream *s, const char *line) {
    int code;
    if (strncmp(line, "HTTP/1.", 7) != 0 || sscanf(line + 7, "%*1[01] %3d", &code) != 1 ||
        code < 100 || code > 999)
        return fail(s, "not an HTTP/1.x status line: \"%.60s\"", line);
    s->status = code;
    s->phase = PHASE_HEADERS;
    return true;
}

static bool header_line(struct lg_stream *s, char *line) {
    if (!*line) { /* the head's end */
        if (s->chunked)
            s->phase = PHASE_CHUNK_SIZE;
        else if (s->has_length && s->left == 0)
            return finish(s);
        else {
            s->phase = PHASE_BODY;
            if (!s->has_length)
                s->left = -1;
        }
        return true;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        return fail(s, "a header line without a colon: \"%.60s\"", line);
    *colon = '\0';
    const char *value = colon + 1 + strspn(colon + 1, " \t");
    if (strcasecmp(line, "transfer-encoding") == 0) {
        s->chunked = strcasestr(value, "chunked") != NULL;
    } else if (strcasecmp(line, "content-length") == 0) {
        char *end;
        long long len = strtoll(value, &end, 10);
        if (end == value || len < 0 || len > LG_BODY_MAX * 1024LL)
            return fail(s, "Content-Length \"%.40s\" is not a size", value);
        s->has_length = true;
        s->left = len;
    }
    return true;
}

/* "1a2b" or "1a2b;extension" */
static bool chunk_size_line(struct lg_stream *s, const char *line) {
    int64_t size = 0;
    const char *c = line;
    for (; *c && *c != ';' && *c != ' ' && *c != '\t'; c++) {
        int digit = *c >= '0' && *c <= '9'   ? *c - '0'
                    : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10
                    : *c >= 'A' && *c <= 'F' ? *c - 'A' + 10
                                             : -1;
        if (digit < 0 || size > CHUNK_SIZE_MAX)
            return fail(s, "not a chunk size: \"%.40s\"", line);
        size = size * 16 + digit;
    }
    if (c == line)
        return fail(s, "an empty chunk size line");
    s->left = size;
    s->phase = size == 0 ? PHASE_TRAILER : PHASE_CHUNK_DATA;
    return true;
}

/* A complete line of the head or of the chunk framing, without its line end. */
static bool framing_line(struct lg_stream *s, char *line) {
    switch (s->phase) {
    case PHASE_STATUS:
        return status_line(s, line);
    case PHASE_HEADERS:
        return header_line(s, line);
    case PHASE_CHUNK_SIZE:
        return chunk_size_line(s, line);
    case PHASE_CHUNK_END:
        if (*line)
            return fail(s, "a chunk's data runs past its size");
        s->phase = PHASE_CHUNK_SIZE;
        return true;
    default: /* PHASE_TRAILER */
        return *line ? true : finish(s);
    }
}

bool lg_stream_feed(struct lg_stream *s, const char *p, size_t n) {
    while (n > 0 && s->phase != PHASE_END) {
        if (s->phase == PHASE_BODY || s->phase == PHASE_CHUNK_DATA) {
            size_t take = s->left >= 0 && (uint64_t)s->left < n ? (size_t)s->left : n;
            if (!body_bytes(s, p, take))
                return false;
            p += take;
            n -= take;
            if (s->left < 0)
                continue;
            s->left -= (int64_t)take;
            if (s->left == 0) {
                if (s->phase == PHASE_BODY)
                    return finish(s);
                s->phase = PHASE_CHUNK_END;
            }
            continue;
        }
        char ch = *p++;
        n--;
        if (ch != '\n') {
            if (s->head_len == LG_HEAD_LINE_MAX - 1)
                return fail(s, "a head or chunk line is over %d bytes", LG_HEAD_LINE_MAX - 1);
            s->head[s->head_len++] = ch;
            continue;
        }
        if (s->head_len > 0 && s->head[s->head_len - 1] == '\r')
            s->head_len--;
        s->head[s->head_len] = '\0';
        s->head_len = 0;
        if (!framing_line(s, s->head))
            return false;
    }
    return s->phase != PHASE_END;
}

void lg_stream_closed(struct lg_stream *s) {
    if (s->phase == PHASE_END)
        return;
    if (s->phase == PHASE_BODY && s->left < 0) {
        if (s->on_data && s->event_len > 0) /* a last line without its line end */
            event_line(s, s->event, s->event_len);
        finish(s);
        return;
    }
    fail(s, s->status ? "the connection closed before the body's end"
                      : "the connection closed before a status line");
}
