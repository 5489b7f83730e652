/* The chat page served at / (src/server/page.html, embedded in the binary by page.c). */
#ifndef FX_SERVER_PAGE_H
#define FX_SERVER_PAGE_H

#include <stddef.h>

/* The page's bytes (UTF-8 HTML, served as text/html; charset=utf-8), static and immutable for the
 * life of the process; safe to call from any thread. *len (may be NULL) gets the length without
 * the NUL that follows the bytes. */
const char *fx_serve_page_html(size_t *len);

#endif
