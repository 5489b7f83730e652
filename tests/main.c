/* Runs every registered FX_TEST as one cmocka group (see fx_test.h). */
#include "fx_test.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct registered {
    const char *name;
    fx_test_fn fn;
};

static struct registered *tests;
static size_t n_tests, cap_tests;

void fx_test_register(const char *name, fx_test_fn fn) {
    if (n_tests == cap_tests) {
        cap_tests = cap_tests ? 2 * cap_tests : 256;
        tests = realloc(tests, cap_tests * sizeof *tests);
        if (!tests) {
            fputs("test registration: out of memory\n", stderr);
            exit(1);
        }
    }
    tests[n_tests++] = (struct registered){name, fn};
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const struct registered *)a)->name, ((const struct registered *)b)->name);
}

/* FX_TEST_FILTER: comma-separated globs; empty or unset selects everything. */
static bool selected(const char *filter, const char *name) {
    if (!filter || !*filter)
        return true;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", filter);
    for (char *save = NULL, *pat = strtok_r(buf, ",", &save); pat; pat = strtok_r(NULL, ",", &save))
        if (fnmatch(pat, name, 0) == 0)
            return true;
    return false;
}

/* ---- fixtures ------------------------------------------------------------------------------ */

#define RING 16
static char ring[RING][PATH_MAX];
static unsigned ring_next;

static char *ring_slot(void) {
    return ring[__atomic_fetch_add(&ring_next, 1, __ATOMIC_RELAXED) % RING];
}

static bool in_ci(void) {
    const char *ci = getenv("CI");
    return ci && strcmp(ci, "true") == 0;
}

static const char *under(const char *env, const char *fallback, const char *rel) {
    const char *dir = getenv(env);
    if (!dir || !*dir)
        dir = fallback;
    char *path = ring_slot();
    snprintf(path, PATH_MAX, "%s/%s", dir, rel);
    if (access(path, R_OK) != 0) {
        if (in_ci())
            fail_msg("required test data missing under CI=true: %s (set %s)", path, env);
        print_message("skipping: test data not found: %s (set %s)\n", path, env);
        skip();
    }
    return path;
}

const char *fx_test_fixture(const char *rel) {
    return under("FERROX_FIXTURES", "../shared/fixtures", rel);
}

const char *fx_test_model(const char *rel) {
    return under("FERROX_MODELS", "../shared/models", rel);
}

static char tmpdir[PATH_MAX];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tmpdir(void) {
    if (tmpdir[0])
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fx_test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/ferrox-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir))
            fail_msg("mkdtemp %s: %s", tmpdir, strerror(errno));
        atexit(remove_tmpdir);
    }
    return tmpdir;
}

/* path = the temporary directory / name, refusing what does not fit in PATH_MAX bytes. */
static void tmp_path(char *path, const char *name) {
    if (snprintf(path, PATH_MAX, "%s/%s", fx_test_tmpdir(), name) >= PATH_MAX)
        fail_msg("temporary path too long for %s", name);
}

const char *fx_test_tmpfile(const char *name) {
    char *path = ring_slot();
    tmp_path(path, name);
    return path;
}

char *fx_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = 2 * (len + 65536 + 1);
            char *grown = realloc(buf, cap);
            assert_non_null(grown);
            buf = grown;
        }
        size_t got = fread(buf + len, 1, 65536, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    buf[len] = '\0';
    if (size)
        *size = len;
    return buf;
}

void fx_test_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

int fx_test_run_cli(const char *const *args, const char *stdin_text, char **out, char **err) {
    return fx_test_run_program("FERROX_BIN", args, stdin_text, out, err);
}

int fx_test_run_program(const char *bin_var, const char *const *args, const char *stdin_text,
                        char **out, char **err) {
    const char *bin = getenv(bin_var);
    if (!bin || !*bin)
        fail_msg("%s is not set; run the tests with 'make test'", bin_var);
    static unsigned serial;
    char in_path[PATH_MAX], out_path[PATH_MAX], err_path[PATH_MAX];
    unsigned id = __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED);
    char name[32];
    snprintf(name, sizeof name, "cli-%u.in", id);
    tmp_path(in_path, name);
    snprintf(name, sizeof name, "cli-%u.out", id);
    tmp_path(out_path, name);
    snprintf(name, sizeof name, "cli-%u.err", id);
    tmp_path(err_path, name);
    fx_test_write_file(in_path, stdin_text ? stdin_text : "", stdin_text ? strlen(stdin_text) : 0);

    size_t n = 0;
    while (args[n])
        n++;
    char **argv = calloc(n + 2, sizeof *argv);
    assert_non_null(argv);
    argv[0] = (char *)bin;
    for (size_t i = 0; i < n; i++)
        argv[i + 1] = (char *)args[i];

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, in_path, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    free(argv);
    if (rc != 0)
        fail_msg("cannot run %s: %s", bin, strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            fail_msg("waitpid: %s", strerror(errno));
    if (out)
        *out = fx_test_read_file(out_path, NULL);
    if (err)
        *err = fx_test_read_file(err_path, NULL);
    if (WIFSIGNALED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* ---- random numbers ------------------------------------------------------------------------ */

uint64_t fx_test_rng_u64(struct fx_test_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double fx_test_rng_f64(struct fx_test_rng *r) {
    return (double)(fx_test_rng_u64(r) >> 11) * 0x1.0p-53;
}

double fx_test_rng_normal(struct fx_test_rng *r) {
    double u1 = fx_test_rng_f64(r), u2 = fx_test_rng_f64(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int main(void) {
    qsort(tests, n_tests, sizeof *tests, by_name);
    const char *filter = getenv("FX_TEST_FILTER");
    struct CMUnitTest *group = calloc(n_tests ? n_tests : 1, sizeof *group);
    if (!group)
        return 1;
    size_t n = 0;
    for (size_t i = 0; i < n_tests; i++) {
        if (i > 0 && strcmp(tests[i].name, tests[i - 1].name) == 0) {
            fprintf(stderr, "duplicate test name %s\n", tests[i].name);
            return 1;
        }
        if (selected(filter, tests[i].name))
            group[n++] = (struct CMUnitTest){.name = tests[i].name, .test_func = tests[i].fn};
    }
    if (n == 0) {
        fprintf(stderr, "no test matches FX_TEST_FILTER='%s'\n", filter ? filter : "");
        return 1;
    }
    int failed = _cmocka_run_group_tests("ferrox", group, n, NULL, NULL);
    free(group);
    free(tests);
    return failed ? 1 : 0;
}
