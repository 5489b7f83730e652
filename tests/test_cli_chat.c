/* ferrox chat through a pseudo-terminal, as a person types into it: every turn renders what the
 * template gives for the conversation and prefills only what the KV cache does not hold; Ctrl-C
 * stops an answer and the chat goes on; /clear starts over; end of input exits 0.
 *
 * No fixture model with weights carries a chat template, so the tests write a copy of
 * stories260K with tokenizer.chat_template set. The template prints bos_token itself and ends
 * every message with eos_token, so it also checks that no second BOS is added and that special
 * tokens written by the template are read as such. */
#include "fx_test.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ferrox.h"
#include "gguf_copy.h"

static const char TEMPLATE[] =
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

static void set_template(void *user, struct fx_gguf_writer *w) {
    (void)user;
    struct fx_error e;
    assert_int_equal(fx_gguf_writer_set_str(w, "tokenizer.chat_template", TEMPLATE, &e), FX_OK);
}

/* stories260K with TEMPLATE as its chat template. */
static const char *chat_model(void) {
    static char path[PATH_MAX];
    const char *src = fx_test_model("stories260K.gguf");
    snprintf(path, sizeof path, "%s", fx_test_tmpfile("stories260K-chat.gguf"));
    struct fx_test_gguf_edit edit = {.metadata = set_template};
    fx_test_gguf_copy(src, path, &edit);
    return path;
}

/* ---- a program on a pseudo-terminal --------------------------------------------------------- */

struct session {
    pid_t pid;
    int fd;    /* the terminal's master side: what we type, what the program shows */
    char *out; /* everything shown so far (the program's stdout and the terminal's echo) */
    size_t len, cap, mark;
    char err_path[PATH_MAX]; /* the program's stderr */
};

static void session_start(struct session *s, const char *const *args) {
    static unsigned serial;
    const char *bin = getenv("FERROX_BIN");
    if (!bin || !*bin)
        fail_msg("FERROX_BIN is not set; run the tests with 'make test'");
    *s = (struct session){.cap = 1 << 16};
    s->out = malloc(s->cap);
    assert_non_null(s->out);
    snprintf(s->err_path, sizeof s->err_path, "%s/chat-%u.err", fx_test_tmpdir(), serial++);
    int err_fd = open(s->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(err_fd >= 0);
    size_t n = 0;
    while (args[n])
        n++;
    char **argv = calloc(n + 2, sizeof *argv);
    assert_non_null(argv);
    argv[0] = (char *)bin;
    for (size_t i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];
    struct winsize ws = {.ws_row = 40, .ws_col = 200};
    s->pid = forkpty(&s->fd, NULL, NULL, &ws);
    if (s->pid == 0) {
        dup2(err_fd, STDERR_FILENO);
        execv(bin, argv);
        _exit(127);
    }
    free(argv);
    close(err_fd);
    if (s->pid < 0)
        fail_msg("forkpty: %s", strerror(errno));
}

/* Reads what the program shows, for at most `ms` milliseconds; false once it closed the terminal
 * (it exited). */
static bool session_read(struct session *s, int ms) {
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    int r = poll(&p, 1, ms);
    if (r <= 0)
        return true;
    if (s->cap - s->len < 4096) {
        s->cap *= 2;
        s->out = realloc(s->out, s->cap);
        assert_non_null(s->out);
    }
    ssize_t n = read(s->fd, s->out + s->len, s->cap - s->len - 1);
    if (n <= 0)
        return false; /* EIO: the other side is closed */
    s->len += (size_t)n;
    s->out[s->len] = '\0';
    return true;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits until `text` appears after the mark and moves the mark past it. */
static void session_expect(struct session *s, const char *text) {
    double deadline = now() + 60;
    for (;;) {
        const char *at = s->len > s->mark ? strstr(s->out + s->mark, text) : NULL;
        if (at) {
            s->mark = (size_t)(at - s->out) + strlen(text);
            return;
        }
        if (now() > deadline || !session_read(s, 100))
            fail_msg("waiting for '%s'; the terminal shows:\n%s", text, s->len ? s->out : "");
    }
}

/* Waits until the program shows at least n more bytes after the mark. */
static void session_expect_bytes(struct session *s, size_t n) {
    double deadline = now() + 60;
    while (s->len < s->mark + n)
        if (now() > deadline || !session_read(s, 100))
            fail_msg("waiting for output; the terminal shows:\n%s", s->len ? s->out : "");
}

static void session_type(struct session *s, const char *text) {
    size_t n = strlen(text);
    assert_int_equal(write(s->fd, text, n), (ssize_t)n);
}

/* Waits for the program to exit after reading what it still shows; its exit status, or -1 when
 * a signal ended it. The caller frees *err (its stderr). */
static int session_end(struct session *s, char **err) {
    double deadline = now() + 60;
    while (session_read(s, 100))
        if (now() > deadline)
            fail_msg("the program did not exit; the terminal shows:\n%s", s->out);
    int status;
    while (waitpid(s->pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    close(s->fd);
    *err = fx_test_read_file(s->err_path, NULL);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- what ferrox chat --verbose reports per turn --------------------------------------------- */

struct turn {
    int n_prompt, cached, prefilled, n_answer, cache;
    char ended[32];
    fx_token *prompt, *answer; /* [n_prompt], [n_answer] */
};

static fx_token *parse_ids(const char *p, int n) {
    fx_token *ids = calloc((size_t)n + 1, sizeof *ids);
    assert_non_null(ids);
    for (int i = 0; i < n; i++) {
        char *end;
        ids[i] = (fx_token)strtol(p, &end, 10);
        assert_true(end != p);
        p = end;
    }
    assert_true(*p == '\n' || *p == '\0');
    return ids;
}

/* Parses the "chat: ..." lines of stderr into turns[0..*n). */
static void parse_turns(const char *err, struct turn *turns, int max, int *n) {
    *n = 0;
    for (const char *line = err; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        struct turn *t = &turns[*n];
        if (sscanf(line, "chat: prompt %d tokens: %d from the cache, %d prefilled", &t->n_prompt,
                   &t->cached, &t->prefilled) == 3) {
            assert_true(*n < max);
        } else if (strncmp(line, "chat: prompt ids:", 17) == 0) {
            t->prompt = parse_ids(line + 17, t->n_prompt);
        } else if (sscanf(line,
                          "chat: answer %d tokens in %*f ms (%*f tokens/s), ended by %31[^;]; "
                          "cache %d",
                          &t->n_answer, t->ended, &t->cache) == 3) {
        } else if (strncmp(line, "chat: answer ids:", 17) == 0) {
            t->answer = parse_ids(line + 17, t->n_answer);
            (*n)++;
        }
    }
}

static void free_turns(struct turn *turns, int n) {
    for (int i = 0; i < n; i++) {
        free(turns[i].prompt);
        free(turns[i].answer);
    }
}

/* Text with each "\n" as the terminal shows it ("\r\n"). */
static char *as_shown(const char *text) {
    char *out = malloc(2 * strlen(text) + 1), *o = out;
    assert_non_null(out);
    for (const char *p = text; *p; p++) {
        if (*p == '\n')
            *o++ = '\r';
        *o++ = *p;
    }
    *o = '\0';
    return out;
}

/* ---- the tests ------------------------------------------------------------------------------ */

/* The reference: what the template renders for the conversation, tokenized as the template
 * wants (it prints bos_token itself, so no BOS is added; its special tokens are parsed). */
static void expected_prompt(const struct fx_chat_template *t, const struct fx_vocab *v,
                            const struct fx_chat_msg *msgs, size_t n_msgs, fx_token *ids,
                            size_t *n) {
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    struct fx_chat_text text = {0};
    struct fx_error e;
    assert_int_equal(fx_chat_render(t, msgs, n_msgs, &p, &text, &e), FX_OK);
    assert_int_equal(fx_tokenize(v, text.data, text.len, false, true, ids, 2048, n, &e), FX_OK);
    fx_chat_text_free(&text);
}

FX_TEST(chat_cli_three_turns_render_the_template_and_prefill_only_new_tokens) {
    const char *model = chat_model();
    const char *system = "You are a storyteller.";
    const char *users[] = {"Tell me about a cat.", "What did the cat eat?", "Thank you.",
                           "Hello again."};
    const char *args[] = {"chat", "-m", model, "--system", system, "--temp", "0",
                          "-n",   "12", "-t",  "2",        "-v",   NULL};
    struct session s;
    session_start(&s, args);
    session_expect(&s, "> ");
    for (int k = 0; k < 3; k++) {
        session_type(&s, users[k]);
        session_type(&s, "\n");
        session_expect(&s, "\r\n> ");
    }
    session_type(&s, "/clear\n");
    session_expect(&s, "/clear\r\n> ");
    session_type(&s, users[3]);
    session_type(&s, "\n");
    session_expect(&s, "\r\n> ");
    session_type(&s, "\x04"); /* end of input (Ctrl-D) */
    char *err;
    assert_int_equal(session_end(&s, &err), 0);

    struct turn turns[8] = {0};
    int n_turns;
    parse_turns(err, turns, 8, &n_turns);
    if (n_turns != 4)
        fail_msg("expected 4 turns in stderr:\n%s", err);
    struct fx_vocab *v;
    struct fx_chat_template *t;
    struct fx_error e;
    assert_int_equal(fx_vocab_load_file(model, &v, &e), FX_OK);
    assert_int_equal(fx_chat_template_create(TEMPLATE, strlen(TEMPLATE), &t, &e), FX_OK);
    struct fx_chat_msg msgs[8] = {{"system", system}};
    char *answers[4] = {0};
    size_t n_msgs = 1;
    fx_token *want = malloc(2048 * sizeof *want);
    fx_token *cache = malloc(4096 * sizeof *cache);
    assert_non_null(want);
    assert_non_null(cache);
    int n_cache = 0;
    for (int k = 0; k < 4; k++) {
        const struct turn *tk = &turns[k];
        if (k == 3) { /* after /clear: the system message alone, nothing in the cache */
            n_msgs = 1;
            n_cache = 0;
        }
        msgs[n_msgs++] = (struct fx_chat_msg){"user", users[k]};
        size_t n_want;
        expected_prompt(t, v, msgs, n_msgs, want, &n_want);
        assert_int_equal(tk->n_prompt, (int)n_want);
        assert_memory_equal(tk->prompt, want, n_want * sizeof *want);
        assert_int_equal(want[0], 1);
        assert_int_not_equal(want[1], 1); /* one BOS, the template's */
        /* Reused: the longest common prefix with what the cache held (all of it but the last
         * token when the whole prompt is cached); the rest is prefilled. */
        int lcp = 0;
        while (lcp < n_cache && lcp < (int)n_want && cache[lcp] == want[lcp])
            lcp++;
        if (lcp == (int)n_want)
            lcp--;
        assert_int_equal(tk->cached, lcp);
        assert_int_equal(tk->prefilled, (int)n_want - lcp);
        if (k == 1 || k == 2) /* only the new turn is prefilled: the old prompt is all reused */
            assert_true(lcp >= turns[k - 1].n_prompt);
        if (k == 0 || k == 3)
            assert_int_equal(lcp, 0);
        /* The cache now holds the prompt and the answer tokens that were evaluated: all but the
         * last of the 12 (the token limit). */
        assert_string_equal(tk->ended, "token limit (-n)");
        assert_int_equal(tk->n_answer, 12);
        assert_int_equal(tk->cache, tk->n_prompt + tk->n_answer - 1);
        memcpy(cache, want, n_want * sizeof *want);
        memcpy(cache + n_want, tk->answer, (size_t)(tk->n_answer - 1) * sizeof *cache);
        n_cache = tk->cache;
        /* The answer as shown, and as it joins the conversation. */
        char text[1024];
        size_t len;
        assert_int_equal(fx_detokenize(v, tk->answer, (size_t)tk->n_answer, FX_DETOK_CONTINUE, text,
                                       sizeof text, &len, &e),
                         FX_OK);
        char *shown = as_shown(text);
        if (!strstr(s.out, shown))
            fail_msg("answer '%s' not on the terminal:\n%s", text, s.out);
        free(shown);
        answers[k] = strdup(text);
        msgs[n_msgs++] = (struct fx_chat_msg){"assistant", answers[k]};
    }
    for (int k = 0; k < 4; k++)
        free(answers[k]);
    free(want);
    free(cache);
    fx_chat_template_free(t);
    fx_vocab_free(v);
    free_turns(turns, n_turns);
    free(err);
    free(s.out);
}

FX_TEST(chat_cli_ctrl_c_stops_the_answer_not_the_program) {
    const char *model = chat_model();
    /* Without an end: each answer would run for the whole 8192-token context. */
    const char *args[] = {"chat",         "-m", model,  "--temp", "0",
                          "--ignore-eos", "-c", "8192", "-v",     NULL};
    struct session s;
    session_start(&s, args);
    session_expect(&s, "> ");
    for (int k = 0; k < 2; k++) {
        session_type(&s, k == 0 ? "Tell me a long story.\n" : "And then?\n");
        session_expect(&s, k == 0 ? "Tell me a long story.\r\n" : "And then?\r\n");
        session_expect_bytes(&s, 8); /* the answer is coming */
        session_type(&s, "\x03");    /* Ctrl-C */
        session_expect(&s, "\r\n> ");
    }
    /* Ctrl-C at the prompt clears the line and says how to leave. */
    session_type(&s, "half a line\x03");
    session_expect(&s, "(Ctrl-D or /exit to quit)\r\n> ");
    session_type(&s, "\x04");
    char *err;
    assert_int_equal(session_end(&s, &err), 0);
    struct turn turns[4] = {0};
    int n_turns;
    parse_turns(err, turns, 4, &n_turns);
    if (n_turns != 2)
        fail_msg("expected 2 turns in stderr:\n%s", err);
    for (int k = 0; k < 2; k++) {
        assert_string_equal(turns[k].ended, "interrupted");
        assert_true(turns[k].n_answer >= 1 && turns[k].n_prompt + turns[k].n_answer < 8192);
        /* Every token shown is in the cache: the answer went on to the next token each time. */
        assert_int_equal(turns[k].cache, turns[k].n_prompt + turns[k].n_answer);
    }
    /* The interrupted answer stays in the conversation and in the cache. */
    assert_true(turns[1].cached >= turns[0].n_prompt);
    free_turns(turns, n_turns);
    free(err);
    free(s.out);
}

FX_TEST(chat_cli_end_of_input_exits_and_errors_are_clear) {
    const char *model = chat_model();
    char *out, *err;
    /* Input from a pipe: no prompt is printed; the answer ends with a newline. */
    const char *args[] = {"chat", "-m", model, "--temp", "0", "-n", "6", NULL};
    assert_int_equal(fx_test_run_cli(args, "Hello\n", &out, &err), 0);
    assert_true(strlen(out) > 1 && out[strlen(out) - 1] == '\n');
    assert_null(strstr(out, "> "));
    free(out);
    free(err);
    const char *no_template[] = {"chat", "-m", fx_test_model("stories260K.gguf"), NULL};
    assert_int_equal(fx_test_run_cli(no_template, "Hello\n", NULL, &err), 1);
    assert_non_null(strstr(err, "no chat template"));
    assert_non_null(strstr(err, "--chat-template NAME"));
    free(err);
    /* A built-in template by name works for such a model; an unknown name lists the choices. */
    const char *builtin[] = {"chat",
                             "-m",
                             fx_test_model("stories260K.gguf"),
                             "--chat-template",
                             "chatml",
                             "-n",
                             "4",
                             "--temp",
                             "0",
                             NULL};
    assert_int_equal(fx_test_run_cli(builtin, "Hello\n", NULL, &err), 0);
    assert_non_null(strstr(err, "template chatml"));
    free(err);
    const char *unknown[] = {"chat", "-m", model, "--chat-template", "nosuch", NULL};
    assert_int_equal(fx_test_run_cli(unknown, "", NULL, &err), 1);
    assert_non_null(strstr(err, "nosuch"));
    assert_non_null(strstr(err, "chatml"));
    free(err);
    /* A conversation that cannot fit the context is refused with a clear message; the chat
     * goes on (and ends with the input). */
    const char *small[] = {"chat", "-m", model, "-c", "16", "-n", "4", NULL};
    assert_int_equal(fx_test_run_cli(small, "Tell me a very long story about a cat.\n", NULL, &err),
                     0);
    assert_non_null(strstr(err, "the context is full"));
    assert_non_null(strstr(err, "/clear"));
    free(err);
}
