/* An HTTP/1.1 response read as it arrives, for the load generator (loadgen.c): the status line,
 * the headers it needs (Content-Length, Transfer-Encoding: chunked) and the body, whether its
 * length is declared, chunked or ended by the close. A streamed body (Server-Sent Events) is cut
 * into lines and each `data:` line's payload goes to a callback the moment its line is complete;
 * any other body is kept whole. Every buffer is bounded: a line or body past its bound, a bad
 * chunk size or a malformed status line ends the stream with an error saying which. */
#ifndef FERROX_TOOLS_LOADGEN_STREAM_H
#define FERROX_TOOLS_LOADGEN_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_HEAD_LINE_MAX  8192      /* a status, header, chunk-size or trailer line */
#define LG_EVENT_LINE_MAX (1 << 16) /* a line of a streamed body */
#define LG_BODY_MAX       (1 << 20) /* a body kept whole */

typedef void (*lg_data_fn)(void *user, const char *data, size_t len);

struct lg_stream {
    /* What the response said so far. */
    int status;      /* the status line's code; 0 until it has been read */
    bool done;       /* the body ended where the response said it would */
    char error[160]; /* not empty: the response was malformed; nothing more is read */
    char *body;      /* a body kept whole (on_data NULL), NUL-terminated; NULL if empty */
    size_t body_len;

    /* Set by lg_stream_init. */
    lg_data_fn on_data; /* NULL: keep the body whole */
    void *user;

    /* The reader's place. */
    int phase;
    bool chunked, has_length;
    int64_t left; /* bytes left in the declared body or in the current chunk */
    char head[LG_HEAD_LINE_MAX];
    size_t head_len;
    char *event; /* [LG_EVENT_LINE_MAX]: the streamed body's current line */
    size_t event_len;
};

/* A reader for one response; on_data NULL keeps the body whole. Returns false when out of
 * memory. */
bool lg_stream_init(struct lg_stream *s, lg_data_fn on_data, void *user);
void lg_stream_free(struct lg_stream *s);

/* Reads n more bytes of the response. Returns true while more are expected; false once the body
 * has ended (done) or the response was found malformed (error). */
bool lg_stream_feed(struct lg_stream *s, const char *p, size_t n);

/* The connection closed: this ends a body delimited by the close (done); anywhere else the
 * response was cut short (error). */
void lg_stream_closed(struct lg_stream *s);

#endif
