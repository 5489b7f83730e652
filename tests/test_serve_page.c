/* The chat page at / (src/server/page.html, embedded by src/server/page.c): the embedded bytes are
 * the file's and keep the page's rules, and Debian's headless Chromium, driven by
 * tests/page/chat_page.mjs (playwright-core), chats with a real `ferrox serve` on 127.0.0.1 (a
 * random-weight smollm2-135m): a streamed answer, a second one stopped half-way (the server's
 * sequence cancelled), and a screenshot. The browser test skips, or fails under CI=true, when
 * chromium, node or tests/page/node_modules is missing. */
#include "fx_test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server/page.h"

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool in_ci(void) {
    const char *ci = getenv("CI");
    return ci && strcmp(ci, "true") == 0;
}

/* A missing tool skips the test on a developer's machine and fails it in CI, which installs them.
 */
static void need(bool have, const char *what) {
    if (have)
        return;
    if (in_ci())
        fail_msg("%s is missing under CI=true", what);
    print_message("skipping: %s is missing\n", what);
    skip();
}

/* Whether NAME is an executable file, itself when it holds a '/', else in one of PATH's
 * directories. */
static bool have_program(const char *name) {
    if (strchr(name, '/'))
        return access(name, X_OK) == 0;
    const char *path = getenv("PATH");
    char dir[4096];
    while (path && *path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + strlen(name) + 2 <= sizeof dir) {
            memcpy(dir, path, n);
            dir[n] = '/';
            strcpy(dir + n + 1, name);
            if (access(dir, X_OK) == 0)
                return true;
        }
        path += n + (path[n] == ':');
    }
    return false;
}

/* Waits for PID up to LIMIT seconds; past it kills its process group (the browser with it) and
 * returns -2. Otherwise the waitpid status. */
static int wait_for(pid_t pid, double limit, bool group) {
    int status = 0;
    for (double t0 = now_s(); waitpid(pid, &status, WNOHANG) == 0; sleep_ms(20)) {
        if (now_s() - t0 > limit) {
            kill(group ? -pid : pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -2;
        }
    }
    return status;
}

/* ---- the embedded page ----------------------------------------------------------------------- */

FX_TEST(serve_page_embedded) {
    size_t len = 0, size = 0;
    const char *html = fx_serve_page_html(&len);
    assert_non_null(fx_serve_page_html(NULL));
    char *file = fx_test_read_file("src/server/page.html", &size);
    assert_int_equal(len, size);
    assert_memory_equal(html, file, len);
    assert_int_equal(html[len], '\0');
    assert_int_equal(strncmp(html, "<!doctype html>", 15), 0);
    /* Self-contained: nothing fetched from another origin (no CDN, no web fonts). */
    assert_null(strstr(html, "http://"));
    assert_null(strstr(html, "https://"));
    assert_null(strstr(html, "@import"));
    /* Model text reaches the document through textContent only: no HTML parsing of strings. */
    assert_null(strstr(html, "innerHTML"));
    assert_null(strstr(html, "outerHTML"));
    assert_null(strstr(html, "insertAdjacentHTML"));
    assert_null(strstr(html, "document.write"));
    free(file);
}

/* ---- the page in a browser ------------------------------------------------------------------- */

FX_TEST(serve_page_chat_in_chromium) {
    const char *chromium = getenv("FX_CHROMIUM");
    if (!chromium || !*chromium)
        chromium = "/usr/bin/chromium";
    const char *node = getenv("FERROX_NODE");
    if (!node || !*node)
        node = "node";
    struct stat st;
    need(have_program(chromium), "chromium (Debian package chromium; or set FX_CHROMIUM)");
    need(have_program(node), "node (Debian package nodejs)");
    need(stat("tests/page/node_modules/playwright-core/package.json", &st) == 0,
         "tests/page/node_modules/playwright-core (cd tests/page && npm ci)");
    const char *bin = getenv("FERROX_BIN");
    if (!bin)
        fail_msg("FERROX_BIN is not set (run the tests with make test)");
    /* A random-weight smollm2-135m: slow enough on a CPU (tens of tokens/s) for the answer to be
     * seen arriving and to be stopped half-way, where stories260K's whole answer comes in one or
     * two events. Its text is nonsense, which the test does not read. */
    char model[512];
    snprintf(model, sizeof model, "%s", fx_test_tmpfile("page-smollm2-135m.gguf"));
    const char *synth[] = {"synth", "--shape", "smollm2-135m", "--type", "Q8_0", "-o", model, NULL};
    char *serr = NULL;
    if (fx_test_run_cli(synth, NULL, NULL, &serr) != 0)
        fail_msg("ferrox synth failed: %s", serr);
    free(serr);

    /* The server, on a port of its choosing, which it prints. */
    char log[512], out[512], shot[512];
    snprintf(log, sizeof log, "%s", fx_test_tmpfile("page_serve.log"));
    snprintf(out, sizeof out, "%s", fx_test_tmpfile("page_node.log"));
    const char *keep = getenv("FX_PAGE_SCREENSHOT"); /* where to keep the screenshot, if anywhere */
    snprintf(shot, sizeof shot, "%s", keep && *keep ? keep : fx_test_tmpfile("chat_page.png"));
    unlink(shot);
    /* Chat requests go through the model's own template (chatml when it has none). */
    const char *sargv[] = {
        bin, "serve", "-m", model, "--port", "0", "-t", "2", "--shutdown-timeout", "2", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t server;
    int rc = posix_spawn(&server, bin, &fa, NULL, (char *const *)sargv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        fail_msg("cannot start %s: %s", bin, strerror(rc));
    const char *mark = "listening on http://127.0.0.1:";
    int port = 0;
    size_t size;
    for (double t0 = now_s(); port == 0 && now_s() - t0 < 60; sleep_ms(20)) {
        char *text = fx_test_read_file(log, &size);
        const char *p = strstr(text, mark);
        if (p)
            port = atoi(p + strlen(mark));
        free(text);
        int status;
        if (port == 0 && waitpid(server, &status, WNOHANG) == server)
            fail_msg("ferrox serve exited at start:\n%s", fx_test_read_file(log, &size));
    }
    if (port == 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        fail_msg("ferrox serve did not print its port within 60 s");
    }

    /* The browser, in its own process group so that a timeout takes Chromium down with node. */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    const char *nargv[] = {node, "tests/page/chat_page.mjs", url, shot, NULL};
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    pid_t browser;
    rc = posix_spawnp(&browser, node, &fa, &attr, (char *const *)nargv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    int status = rc == 0 ? wait_for(browser, 180, true) : -1;

    /* The server stops cleanly whatever the browser did. */
    kill(server, SIGTERM);
    int sstatus = wait_for(server, 20, false);
    char *text = fx_test_read_file(out, &size);
    if (rc != 0)
        fail_msg("cannot run %s: %s", node, strerror(rc));
    if (status == -2)
        fail_msg("chat_page.mjs did not finish within 180 s:\n%s", text);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("chat_page.mjs failed (status %d):\n%s\nserver log:\n%s",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, text, fx_test_read_file(log, &size));
    print_message("chat_page.mjs: %s", text);
    free(text);
    if (sstatus == -2 || !WIFEXITED(sstatus) || WEXITSTATUS(sstatus) != 0)
        fail_msg("ferrox serve did not exit 0 within 20 s of SIGTERM:\n%s",
                 fx_test_read_file(log, &size));

    /* The screenshot: a PNG of some size. */
    assert_int_equal(stat(shot, &st), 0);
    assert_true(st.st_size > 4096);
    char *png = fx_test_read_file(shot, &size);
    assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
    free(png);
}
