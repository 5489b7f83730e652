/* The Jinja interpreter behind chat templates: whitespace control as transformers configures it,
 * statements, expressions with Python semantics, filters, methods, errors with positions, and
 * hostile templates that must fail cleanly and quickly. Expected strings are what Jinja2 (with
 * trim_blocks and lstrip_blocks) prints for the same source. */
#include "fx_test.h"

#include <string.h>
#include <time.h>

#include "ferrox.h"

/* Renders src with no messages and the given variables; returns the status, fills out. */
static fx_status try_render(const char *src, const char *vars, const struct fx_chat_params *p,
                            struct fx_chat_text *out, struct fx_error *err) {
    struct fx_chat_template *t;
    fx_status st = fx_chat_template_create(src, strlen(src), &t, err);
    if (st != FX_OK)
        return st;
    struct fx_chat_params defaults;
    if (!p) {
        fx_chat_default_params(&defaults);
        defaults.vars_json = vars;
        p = &defaults;
    }
    st = fx_chat_render_json(t, "[]", 2, p, out, err);
    fx_chat_template_free(t);
    return st;
}

static void expect_vars(const char *src, const char *vars, const char *expect) {
    struct fx_chat_text out = {0};
    struct fx_error err = {0};
    if (try_render(src, vars, NULL, &out, &err) != FX_OK)
        fail_msg("%s\n  failed: %s", src, err.msg);
    if (strcmp(out.data, expect) != 0)
        fail_msg("%s\n  expected [%s]\n  rendered [%s]", src, expect, out.data);
    fx_chat_text_free(&out);
}

static void expect(const char *src, const char *result) {
    expect_vars(src, NULL, result);
}

/* Fails with `code` and a message containing `needle`; returns the error offset. */
static uint64_t expect_error(const char *src, fx_status code, const char *needle) {
    struct fx_chat_text out = {0};
    struct fx_error err = {0};
    fx_status st = try_render(src, NULL, NULL, &out, &err);
    if (st != code)
        fail_msg("%s\n  status %s, expected %s (%s)", src, fx_status_name(st), fx_status_name(code),
                 err.msg);
    if (!strstr(err.msg, needle))
        fail_msg("%s\n  message [%s] lacks [%s]", src, err.msg, needle);
    fx_chat_text_free(&out);
    return err.offset;
}

FX_TEST(chat_jinja_whitespace_control) {
    /* trim_blocks drops the newline after a block tag, lstrip_blocks the indentation before. */
    expect("{% if true %}\n  a\n{% endif %}\nb", "  a\nb");
    expect("  {% if true %}\n    a\n  {% endif %}\nb", "    a\nb");
    /* "-" strips every whitespace character on its side, newlines included. */
    expect("a  \n  {%- if true -%}  \n  b  \n  {%- endif %}", "ab");
    expect("a\n{{- 1 -}}\nb", "a1b");
    /* Expression tags are not lstripped and keep the newline after them. */
    expect("  {{ 1 }}\n", "  1");
    expect("x\n  {{ 1 }}\ny", "x\n  1\ny");
    /* "+" turns lstrip and trim off for that tag. */
    expect("  {%+ if true %}a{% endif +%}\nb", "  a\nb");
    /* Only indentation that starts a line is stripped. */
    expect("x  {% if true %}y{% endif %}", "x  y");
    /* Comments are stripped like blocks. */
    expect("a\n  {# note #}\nb", "a\nb");
    expect("a {#- note -#} b", "ab");
    /* One trailing newline of the template is dropped (keep_trailing_newline off); \r\n counts
     * as \n. */
    expect("a\n\n", "a\n");
    expect("a\r\nb\r\n", "a\nb");
    expect("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
}

FX_TEST(chat_jinja_loops) {
    expect("{% for i in [10, 20, 30] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
           "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
           "10TrueFalse332;21FalseFalse321;32FalseTrue310;");
    expect("{% for i in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-"
           "{{ loop.cycle('a', 'b') }},{% endfor %}",
           "-2-a,1-3-b,2--a,");
    expect("{% for i in range(10) if i is odd %}{{ i }}/{{ loop.length }} {% endfor %}",
           "1/5 3/5 5/5 7/5 9/5 ");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    expect("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy");
    expect("{% for c in 'hé!' %}[{{ c }}]{% endfor %}", "[h][é][!]");
    expect("{% for i in [] %}x{% else %}empty{% endfor %}", "empty");
    expect("{% for i in range(9) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           "012");
    expect("{% for i in range(6) %}{% if i is even %}{% continue %}{% endif %}{{ i }}"
           "{% endfor %}",
           "135");
    /* A set inside a loop lives for one iteration: Jinja's scoping, the reason for namespace. */
    expect("{% set x = 5 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}",
           "5675");
    expect("{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }} "
           "{% endfor %}{{ loop.index }}|{% endfor %}",
           "1x1 1y2 1|2x1 2y2 2|");
    expect("{% if 0 %}a{% elif 0 %}b{% elif 1 %}c{% else %}d{% endif %}", "c");
}

FX_TEST(chat_jinja_namespace_and_set) {
    expect("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
           "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}",
           "6 0123 False");
    expect("{% set ns = namespace() %}{% set ns.a = [1] %}{{ ns }}", "<Namespace {'a': [1]}>");
    expect("{% set a, b = [1, 2] %}{{ b }}{{ a }}", "21");
    expect("{% set t = 1, 'x' %}{{ t }}", "(1, 'x')");
    expect("{% set block %}x{{ 1 + 1 }}y{% endset %}[{{ block }}]", "[x2y]");
    expect_error("{% set n = 1 %}{% set n.a = 2 %}", FX_ERR_FORMAT, "non-namespace");
}

FX_TEST(chat_jinja_expressions) {
    expect("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 7 / 2 }}",
           "7 9 3 -4 -2 3.5");
    expect("{{ 2 ** 3 ** 2 }} {{ 1.5 + 1 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }}",
           "64 2.5 1000.0 0.30000000000000004 1e+20 1e-05");
    expect("{{ 'a' ~ 1 ~ none ~ true ~ undefined_name }} {{ 'ab' * 3 }} {{ [1] + [2] }}",
           "a1NoneTrue ababab [1, 2]");
    expect("{{ [1, 'a', none, true, 1.0, {'k': (1,)}] }} {{ () }} {{ \"it's\" }} {{ [\"it's\"] }}",
           "[1, 'a', None, True, 1.0, {'k': (1,)}] () it's [\"it's\"]");
    expect("{{ 1 < 2 < 3 }}{{ 3 > 2 > 5 }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}"
           "{{ [1, 2] < [1, 3] }}",
           "TrueFalseTrueTrueTrueTrue");
    expect("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}"
           "{{ not 1 }}{{ not none }}",
           "TrueTrueTrueTrueFalseTrue");
    /* and/or give back an operand, as in Python. */
    expect("{{ 1 and 2 }}|{{ 0 and 2 }}|{{ 0 or 'x' }}|{{ none or [] }}", "2|0|x|[]");
    expect("{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}",
           "y||b");
    expect("{{ 'a' 'b' \"c\" }} {{ '\\u00e9\\x41\\101\\n' | length }} {{ 'x\\y' }}", "abc 4 x\\y");
    /* Missing keys and indices are Undefined, which prints nothing. */
    expect("[{{ {'a': 1}['b'] }}{{ [1][5] }}{{ none.x }}{{ 'abc'[9] }}]", "[]");
}

FX_TEST(chat_jinja_slicing) {
    expect("{{ [1, 2, 3, 4, 5][1:] }} {{ [1, 2, 3, 4, 5][:-2] }} {{ [1, 2, 3, 4, 5][::-2] }}",
           "[2, 3, 4, 5] [1, 2, 3] [5, 3, 1]");
    expect("{{ [1, 2, 3][10:] }} {{ [1, 2, 3][-10:2] }} {{ (1, 2, 3)[1:] }}", "[] [1, 2] (2, 3)");
    expect("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }}",
           "bcd ace fedcba ef");
    /* Strings index by character, not byte. */
    expect("{{ 'héllo wörld'[1:8] }} {{ 'héllo'[1] }} {{ 'h€llo'[::-1] }} {{ 'añb' | length }}",
           "éllo wö é oll€h 3");
    expect_error("{{ [1, 2][::0] }}", FX_ERR_FORMAT, "slice step cannot be zero");
}

FX_TEST(chat_jinja_filters) {
    expect("{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello' | lower }}|"
           "{{ 'hello' | upper }}|{{ 'hello WORLD' | capitalize }}|{{ 'hello wORLD 1st' | title }}",
           "hi|hi|hello|HELLO|Hello world|Hello World 1st");
    expect("{{ [1, 2, 3] | length }} {{ 'héllo' | count }} {{ {'a': 1} | length }} "
           "{{ nothing | length }}",
           "3 5 1 0");
    expect("{{ none | default('d') }}|{{ nothing | default('d') }}|{{ '' | default('d') }}|"
           "{{ '' | default('d', true) }}|{{ nothing | d }}",
           "None|d||d|");
    expect("{{ ['a', 'b'] | join(', ') }}|{{ [1, 2] | join }}|{{ [{'n': 'x'}, {'n': 'y'}] | "
           "join('-', attribute='n') }}",
           "a, b|12|x-y");
    expect("{{ {'b': 1, 'a': 2} | items | list }} {{ {'b': 1, 'a': 2} | dictsort }}",
           "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)]");
    expect("{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'u'}] | selectattr('r', 'equalto', 'u') | list | "
           "length }} {{ [{'r': 'u'}, {'r': 'a'}] | rejectattr('r', 'equalto', 'u') | list }} "
           "{{ [1, 2, 3, 4] | select('odd') | list }} {{ [0, 1, '', 'a'] | select | list }}",
           "2 [{'r': 'a'}] [1, 3] [1, 'a']");
    /* select and friends are lazy in Jinja: the result is true in a condition even when empty
     * and has no length until it becomes a list. */
    expect("{{ 'y' if [] | select else 'n' }} {{ [0] | reject | list }} {{ [] | map('upper') "
           "| list | length }}",
           "y [0] 0");
    expect_error("{{ [1] | select | length }}", FX_ERR_FORMAT, "'generator' has no len()");
    expect("{{ [{'n': 'a'}, {'n': 'b'}] | map(attribute='n') | join(',') }} "
           "{{ ['a', 'b'] | map('upper') | list }} {{ [{'x': 1}, {}] | map(attribute='x', "
           "default=0) | list }}",
           "a,b ['A', 'B'] [1, 0]");
    expect("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | "
           "sort(case_sensitive=true) }} {{ [{'n': 2}, {'n': 1}] | sort(attribute='n') }}",
           "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] [{'n': 1}, {'n': 2}]");
    expect("{{ [1, 2, 2, 3, 1] | unique | list }} {{ [1, 5, 3] | max }}{{ [1, 5, 3] | min }} "
           "{{ [1, 2, 3] | sum }} {{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }} {{ 'abc' | "
           "reverse }} {{ [1, 2] | reverse | list }}",
           "[1, 2, 3] 51 6 13 cba [2, 1]");
    expect("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} "
           "{{ '1.5' | float }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} "
           "{{ 2.1 | round(0, 'ceil') }} {{ -3 | abs }}",
           "42 4 0 7 3 1.5 2.0 4.0 2.57 3.0 3");
    expect("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|"
           "{{ '<a href=\\'x\\'>&' | e }}|{{ 'one two  three' | wordcount }}|{{ 3 | string }}",
           "a\n  b\n\n  c|  a\n  b|&lt;a href=&#39;x&#39;&gt;&amp;|3|3");
    expect("{{ '%s-%d-%05.2f-%x' % ('a', 42, 3.14159, 255) }} {{ '%(a)s=%(b)d' | format(a='k', "
           "b=3) }} {{ '%5s|%-5s|' % ('ab', 'cd') }}",
           "a-42-03.14-ff k=3    ab|cd   |");
}

FX_TEST(chat_jinja_tojson) {
    /* transformers' tojson: json.dumps with ensure_ascii=False and Python's separators. */
    expect("{{ {'a': [1, 2.5, 'é\\n\"', none, true]} | tojson }}",
           "{\"a\": [1, 2.5, \"é\\n\\\"\", null, true]}");
    expect("{{ {'a': 1, 'b': {'c': []}} | tojson(indent=2) }}",
           "{\n  \"a\": 1,\n  \"b\": {\n    \"c\": []\n  }\n}");
    expect("{{ 'é😀' | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} "
           "{{ [1, 2] | tojson(separators=(',', ':')) }} {{ '\\x01<>&\\'' | tojson }}",
           "\"\\u00e9\\ud83d\\ude00\" {\"a\": 2, \"b\": 1} [1,2] \"\\u0001<>&'\"");
    expect_vars("{{ tools | tojson }}", "{\"tools\": [{\"n\": 1.0, \"big\": 12345678901234}]}",
                "[{\"n\": 1.0, \"big\": 12345678901234}]");
    expect_error("{{ undefined_x | tojson }}", FX_ERR_FORMAT, "undefined");
    expect_error("{{ namespace() | tojson }}", FX_ERR_FORMAT, "not JSON serializable");
}

FX_TEST(chat_jinja_methods) {
    expect("{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c d'.split(' ', 2) }} "
           "{{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split() }}",
           "['a', 'b', '', 'c'] ['a', 'b', 'c'] ['a', 'b', 'c d'] ['a,b', 'c'] []");
    expect("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }} "
           "{{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }} "
           "{{ 'abc'.replace('', '-') }} {{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}"
           "{{ 'hello'.find('z') }} {{ 'hello'.count('l') }}",
           "TrueTrue heLLo heLlo -a-b-c- 23-1 2");
    expect("{{ '\\n\\nx\\n'.strip('\\n') }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|"
           "{{ '-'.join(['a', 'b']) }}|{{ 'A b'.upper() }}{{ 'A b'.lower() }}{{ 'a b'.title() }}",
           "x|x | x|a-b|A Ba bA B");
    expect("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.get('b', 5) }} "
           "{{ {'a': 1}.keys() | list }}{{ {'a': 1}.values() | list }} "
           "{{ {'items': 5}['items'] }} {{ {'items': 5}.items is callable }}",
           "1None5 ['a'][1] 5 True");
    /* Qwen 3's reasoning split. */
    expect_vars("{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|"
                "{{ c.split('</think>')[-1].lstrip('\\n') }}",
                "{\"c\": \"<think>\\nreason\\n</think>\\n\\nanswer\"}", "reason|answer");
    expect_error("{{ 'abc'.nomethod() }}", FX_ERR_FORMAT, "'str' object has no attribute");
    expect_error("{{ {'a': 1}.update({'b': 2}) }}", FX_ERR_FORMAT, "immutable sandbox");
}

FX_TEST(chat_jinja_macros) {
    expect("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
           "{{ greet('A') }}|{{ greet('B', '?') }}|{{ greet(punct='.', name='C') }}",
           "Hello A!|Hello B?|Hello C.");
    expect("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}"
           "{% endif %}{% endmacro %}{{ fact(10) }}",
           "3628800");
    /* Macros see template variables but not the caller's loop variables. */
    expect_vars("{% macro m() %}{{ who }}{{ i is defined }}{% endmacro %}"
                "{% for i in [1] %}{{ m() }}{% endfor %}",
                "{\"who\": \"me\"}", "meFalse");
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", FX_ERR_FORMAT, "at most 1");
    expect_error("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", FX_ERR_FORMAT, "unexpected");
}

FX_TEST(chat_jinja_tests_and_globals) {
    expect("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 1 is number }}"
           "{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}{{ {} is mapping }}"
           "{{ [] is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"
           "{{ true is boolean }}{{ 1 is not string }}{{ 'a' is in ['a'] }}",
           "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    expect("{{ range(5) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} "
           "{{ dict(a=1) }}",
           "[0, 1, 2, 3, 4] [1, 4, 7] [5, 3, 1] {'a': 1}");
    /* strftime_now formats the injected time (UTC) when one is given. */
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.now = 1721952000 + 3600 * 13 + 65; /* 2024-07-26 13:01:05 UTC */
    struct fx_chat_text out = {0};
    struct fx_error err = {0};
    assert_int_equal(try_render("{{ strftime_now('%d %b %Y %H:%M:%S') }}", NULL, &p, &out, &err),
                     FX_OK);
    assert_string_equal(out.data, "26 Jul 2024 13:01:05");
    /* Without one it is the local date today. */
    fx_chat_default_params(&p);
    assert_int_equal(try_render("{{ strftime_now('%Y-%m-%d') }}", NULL, &p, &out, &err), FX_OK);
    char today[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(today, sizeof today, "%Y-%m-%d", localtime_r(&now, &tm));
    assert_string_equal(out.data, today);
    fx_chat_text_free(&out);
}

FX_TEST(chat_jinja_errors_have_positions) {
    /* Syntax errors: line and column in the message, byte offset in err->offset. */
    assert_int_equal(expect_error("a\nbc {% if %}x{% endif %}", FX_ERR_FORMAT,
                                  "syntax error at line 2, column 10: expected an expression"),
                     11);
    expect_error("{{ x", FX_ERR_FORMAT, "line 1, column 1: {{ tag never closed");
    expect_error("{% if true %}", FX_ERR_FORMAT, "missing {% endif %}");
    expect_error("{% for x in y %}{% endif %}", FX_ERR_FORMAT,
                 "unexpected {% endif %} (expected {% endfor %})");
    expect_error("{% endfor %}", FX_ERR_FORMAT, "unexpected {% endfor %}");
    expect_error("{{ 1 | nofilter }}", FX_ERR_FORMAT, "line 1, column 8: no filter named");
    expect_error("{{ 1 is nosuchtest }}", FX_ERR_FORMAT, "no test named 'nosuchtest'");
    expect_error("{% include 'x' %}", FX_ERR_FORMAT, "unsupported tag 'include'");
    expect_error("{% break %}", FX_ERR_FORMAT, "'break' outside a loop");
    expect_error("{# never closed", FX_ERR_FORMAT, "comment never closed");
    expect_error("{{ 'abc }}", FX_ERR_FORMAT, "unterminated string");
    expect_error("{{ 1 +* 2 }}", FX_ERR_FORMAT, "found '*'");
    expect_error("{{ 99999999999999999999 }}", FX_ERR_FORMAT, "too large");
    /* Errors while rendering. */
    assert_int_equal(expect_error("ok\n{{ x.y }}", FX_ERR_FORMAT,
                                  "line 2, column 4: 'x' is "
                                  "undefined"),
                     6);
    expect_error("{{ 'a' + 1 }}", FX_ERR_FORMAT, "'str' and 'int'");
    expect_error("{{ 1 / 0 }}", FX_ERR_FORMAT, "division by zero");
    expect_error("{{ 'a' < 1 }}", FX_ERR_FORMAT, "not supported between 'str' and 'int'");
    expect_error("{% for i in 5 %}{% endfor %}", FX_ERR_FORMAT, "'int' object is not iterable");
    expect_error("{{ 9223372036854775807 + 1 }}", FX_ERR_FORMAT, "integer overflow");
    /* raise_exception: the template refuses the conversation. */
    expect_error("\n  {{ raise_exception('Roles must alternate') }}", FX_ERR_INVALID_ARG,
                 "line 2, column 6: template raised: Roles must alternate");
}

FX_TEST(chat_jinja_hostile_templates_fail_cleanly) {
    /* Each is refused by a limit, quickly, with a message; none may crash or hang. */
    static const struct {
        const char *src;
        fx_status code;
        const char *needle;
    } cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         FX_ERR_CAPACITY, ""},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", FX_ERR_CAPACITY,
         "runaway recursion"},
        {"{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", FX_ERR_CAPACITY,
         "rendered text exceeds"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
         "{% endfor %}",
         FX_ERR_CAPACITY, "memory"},
        {"{{ 'x' * 9223372036854775807 }}", FX_ERR_CAPACITY, "too large"},
        {"{{ range(1000000) | length }}", FX_ERR_CAPACITY, "too big"},
        {"{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", FX_ERR_FORMAT,
         "not JSON serializable"},
    };
    struct fx_chat_params p;
    fx_chat_default_params(&p);
    p.max_steps = 2000000; /* keep the runaway loop short */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fx_chat_text out = {0};
        struct fx_error err = {0};
        clock_t t0 = clock();
        fx_status st = try_render(cases[i].src, NULL, &p, &out, &err);
        double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
        if (st != cases[i].code || !strstr(err.msg, cases[i].needle))
            fail_msg("%s\n  %s: %s", cases[i].src, fx_status_name(st), err.msg);
        assert_true(secs < 5.0);
        fx_chat_text_free(&out);
    }
    /* A namespace that contains itself still prints (Python prints such cycles with "..."). */
    expect("{% set ns = namespace() %}{% set ns.me = ns %}{{ (ns | string)[:30] }}",
           "<Namespace {'me': <Namespace {");

    /* Deep nesting is refused while parsing, not by overflowing the stack. */
    char deep[16384];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 1000; i++)
        deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 1000; i++)
        deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_error(deep, FX_ERR_FORMAT, "nested more than");
    n = 0;
    for (int i = 0; i < 300; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% if 1 %%}");
    expect_error(deep, FX_ERR_FORMAT, "nested more than");
    n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int i = 0; i < 800; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "not ");
    snprintf(deep + n, sizeof deep - n, "1 }}");
    expect_error(deep, FX_ERR_FORMAT, "nested more than");
    /* A long elif chain is not nesting. */
    n = (size_t)snprintf(deep, sizeof deep, "{%% if 0 %%}");
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "{%% elif %d == 199 %%}%d", i, i);
    snprintf(deep + n, sizeof deep - n, "{%% endif %%}");
    expect(deep, "199");
}
