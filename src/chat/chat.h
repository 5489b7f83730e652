/* Chat templates (internal): the built-in template table behind fx_chat_template_builtin. */
#ifndef FX_CHAT_CHAT_H
#define FX_CHAT_CHAT_H

#include <stddef.h>

struct fx_chat_builtin {
    const char *name;   /* what --chat-template takes */
    const char *origin; /* the model repository whose tokenizer_config.json it comes from */
    const char *source; /* the template text, verbatim */
};

extern const struct fx_chat_builtin fx_chat_builtins[];
extern const size_t fx_chat_n_builtins;

/* The gpt-oss template text (chat_builtin_harmony.c). */
extern const char fx_chat_tmpl_gpt_oss[];

#endif
