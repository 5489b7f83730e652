/* The chat page, embedded at build time.
 *
 * page.html is edited and tested as the plain HTML file it is; the assembler's .incbin copies it
 * into .rodata as it stands, so there is no generator step and no C-string escaping of JavaScript
 * to keep in sync (a C literal would need every quote and backslash escaped, and would split the
 * page into hundreds of quoted lines that no browser or HTML tool can read). The path is relative
 * to the directory the compiler runs in, the repository root for every Makefile rule; the Makefile
 * makes page.o depend on page.html, which the compiler's -MMD cannot see. A NUL follows the bytes
 * so the page is also a C string. */
#include "server/page.h"

__asm__(".pushsection .rodata, \"a\", @progbits\n"
        ".balign 16\n"
        ".type fx_serve_page_start, @object\n"
        ".hidden fx_serve_page_start\n"
        ".globl fx_serve_page_start\n"
        "fx_serve_page_start:\n"
        ".incbin \"src/server/page.html\"\n"
        ".type fx_serve_page_end, @object\n"
        ".hidden fx_serve_page_end\n"
        ".globl fx_serve_page_end\n"
        "fx_serve_page_end:\n"
        ".byte 0\n"
        ".size fx_serve_page_start, fx_serve_page_end - fx_serve_page_start + 1\n"
        ".balign 8\n"
        ".type fx_serve_page_size, @object\n"
        ".hidden fx_serve_page_size\n"
        ".globl fx_serve_page_size\n"
        "fx_serve_page_size:\n"
        ".quad fx_serve_page_end - fx_serve_page_start\n"
        ".size fx_serve_page_size, 8\n"
        ".popsection\n");

/* Defined by the block above: the page's first byte and its length without the NUL. */
extern const char fx_serve_page_start[] __attribute__((visibility("hidden")));
extern const size_t fx_serve_page_size __attribute__((visibility("hidden")));

const char *fx_serve_page_html(size_t *len) {
    if (len)
        *len = fx_serve_page_size;
    return fx_serve_page_start;
}
