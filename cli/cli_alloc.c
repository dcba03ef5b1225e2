/* cli_alloc.c — `memplan alloc [options] TRACE...`: each allocation sequence replayed through
 * the caching allocator model (planner/plan_alloc.h) with the allocator settings
 * (--alloc-conf, else PYTORCH_CUDA_ALLOC_CONF, else PYTORCH_ALLOC_CONF, as torch reads them),
 * as a table of tensor, allocated and reserved peaks, or --json. */
#include "cli_alloc.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_io.h"
#include "cli_setup.h"
#include "plan_alloc_trace.h"
#include "plan_util.h"

typedef struct {
    PlanAllocConfig conf;
    const char *conf_text, *conf_from;
    const char *from;           /* the window's marker; NULL: the whole trace */
    int json;
    const char *json_path;
} AllocOpts;

static void alloc_help(void) {
    printf("memplan alloc [options] TRACE...   replay allocation sequences through PyTorch's CUDA caching\n"
           "                                   allocator (torch 2.15 rules) and print the reserved memory\n"
           "  TRACE                a file from bench/torch/harness.py --alloc-trace, gzip-compressed or not\n"
           "                       ('-': standard input)\n"
           "  --alloc-conf S       allocator settings as PYTORCH_CUDA_ALLOC_CONF takes them (default: that\n"
           "                       variable, else PYTORCH_ALLOC_CONF, else torch's defaults)\n"
           "  --capacity SIZE      what cudaMalloc can get in all (the GPU less context and NCCL): reports the\n"
           "                       first allocation that runs out of memory (default: unlimited)\n"
           "  --gpu-memory SIZE    the GPU's total memory, for per_process_memory_fraction and the expandable\n"
           "                       segments' address reserve\n"
           "  --from MARK          peaks of tensors and allocated bytes from this marker on (default step2:\n"
           "                       the steady state, as the harness measures; 'start': the whole trace)\n"
           "  --json[=FILE]        the same records as JSON\n"
           "Columns: tensors = the peak of live tensor bytes (what the CPU harness measures), allocated =\n"
           "max_memory_allocated (512 B rounding and unsplit remainders), reserved = max_memory_reserved over\n"
           "the whole trace, overhead = reserved - tensors, frag = reserved - allocated at the allocated peak.\n"
           "MiB = 2^20 bytes. Rules and sources: docs/formulas.md \"The caching allocator\".\n");
}

static int size_opt(const char *flag, const char *arg, uint64_t *out) {
    double d;
    if (cli_bare_number(arg) || plan_parse_size(arg, &d) || d < 1 * MIB || d > 1024.0 * GIB)
        return cli_usage_error("%s '%s' is not a size from 1MiB to 1024GiB (e.g. 80GiB)", flag, arg);
    *out = (uint64_t)d;
    return 0;
}

/* 0, 1 (--help printed), 2 (usage error printed); *first: the first trace's index. */
static int alloc_opts(int argc, char **argv, AllocOpts *o, int *first) {
    static const struct option opts[] = {
        {"alloc-conf", required_argument, 0, 'c'}, {"capacity", required_argument, 0, 'C'},
        {"gpu-memory", required_argument, 0, 'g'}, {"from", required_argument, 0, 'f'},
        {"json", optional_argument, 0, 'j'},       {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    plan_alloc_config_defaults(&o->conf);
    o->from = "step2";
    o->conf_text = cli_alloc_conf_env(&o->conf_from);
    int c, rc = 0;
    optind = 1;
    opterr = 0;
    while (!rc && (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': o->conf_text = optarg; o->conf_from = "--alloc-conf"; break;
        case 'C': rc = size_opt("--capacity", optarg, &o->conf.capacity); break;
        case 'g': rc = size_opt("--gpu-memory", optarg, &o->conf.device_total); break;
        case 'f': o->from = strcmp(optarg, "start") ? optarg : NULL; break;
        case 'j': o->json = 1; o->json_path = optarg; break;
        case 'h': alloc_help(); return 1;
        case ':': return cli_usage_error("%s needs a value (see 'memplan alloc --help')", argv[optind - 1]);
        default: return cli_usage_error("unknown argument '%s' for 'alloc' (see 'memplan alloc --help')", argv[optind - 1]);
        }
    }
    if (rc) return rc;
    char err[PATH_MAX + 256];
    if (o->conf_text && plan_alloc_config_parse(&o->conf, o->conf_text, err, sizeof err))
        return cli_usage_error("%s '%s': %s", o->conf_from, o->conf_text, err);
    if (plan_alloc_config_check(&o->conf, err, sizeof err)) return cli_usage_error("%s (give --gpu-memory)", err);
    if (optind >= argc) return cli_usage_error("alloc needs a trace file (bench/torch/harness.py --alloc-trace FILE)");
    for (int i = optind; i < argc; i++)   /* before any output */
        if (strcmp(argv[i], "-") && access(argv[i], R_OK)) return cli_usage_error("cannot open trace '%s'", argv[i]);
    if (o->json_path && cli_check_output("--json", o->json_path, (const char *const *)argv + optind, argc - optind,
                                         err, sizeof err))
        return cli_usage_error("%s", err);
    *first = optind;
    return 0;
}

#define TRACE_MAX_BYTES (512ull << 20)   /* a step of a 70B model records a few MiB of events */

/* The trace's text, read whole with a bound: a regular file or standard input (a pipe); a FIFO,
   device or folder named as a trace is refused before it is opened for reading (it may never end,
   or never start), standard input that is a device too; gzip-compressed or plain
   (cli_fdopen_maybe_gz; the bound is on the text); text only (a NUL byte is no trace).
   NULL after one usage error line (returned in *rc). */
static char *trace_text(const char *path, size_t *len, int *rc) {
    int stdin_ = strcmp(path, "-") == 0;
    int fd = stdin_ ? 0 : open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    const char *name = stdin_ ? "standard input" : path;
    if (fd < 0) { *rc = cli_usage_error("cannot open trace '%s': %s", path, strerror(errno)); return NULL; }
    if (fstat(fd, &st) || S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || (!stdin_ && !S_ISREG(st.st_mode))) {
        *rc = cli_usage_error("trace '%s' is %s: give a trace file (bench/torch/harness.py --alloc-trace), or '-' for a pipe",
                              name, S_ISDIR(st.st_mode) ? "a folder" : "not a regular file (a FIFO or a device, which may never end)");
        if (!stdin_) close(fd);
        return NULL;
    }
    if (!stdin_) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *in = cli_fdopen_maybe_gz(stdin_ ? dup(0) : fd);   /* closes the descriptor it is given */
    if (!in) {
        *rc = cli_usage_error("cannot read trace '%s': %s", name, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got = 1; buf && got > 0;) {
        if (n == cap) {
            char *b = cap >= TRACE_MAX_BYTES ? NULL : realloc(buf, 2 * cap + 1);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, in);
        if (n == 0 && got >= 2 && (unsigned char)buf[0] == 0x1f && (unsigned char)buf[1] == 0x8b) {
            *rc = cli_usage_error("trace '%s' is gzip-compressed and this build reads no gzip (no zlib): gunzip it first", name);
            break;
        }
        if (got > 0 && memchr(buf + n, 0, got)) {
            *rc = cli_usage_error("trace '%s' is not text (a NUL byte near byte %zu): not an allocation trace", name, n);
            break;
        }
        if (!got && ferror(in)) {
            *rc = cli_usage_error("cannot read trace '%s': %s", name, strerror(errno));
            break;
        }
        n += got;
    }
    fclose(in);
    if (*rc) {
        free(buf);
        return NULL;
    }
    if (!buf || n == cap) {
        *rc = cli_usage_error("trace '%s' is %s", name, buf ? "larger than 512 MiB: not one step's allocations" : "too large for memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int replay_file(const char *path, const AllocOpts *o, AllocTrace *t, AllocReplay *r) {
    size_t len = 0;
    int rc = 0;
    char *text = trace_text(path, &len, &rc);
    if (!text) return rc;
    FILE *f = fmemopen(text, len ? len : 1, "r");
    if (!f) { free(text); return cli_usage_error("cannot read trace '%s': out of memory", path); }
    char err[256];
    rc = plan_alloc_trace_read(f, t, err, sizeof err);
    fclose(f);
    free(text);
    if (rc) return cli_usage_error("trace '%s': %s", path, err);
    if (plan_alloc_replay(t, &o->conf, o->from, r, err, sizeof err)) {
        plan_alloc_trace_free(t);
        fprintf(stderr, "memplan: trace '%s': %s\n", path, err);
        return 1;
    }
    return 0;
}

static const char *trace_name(const char *path, char *buf, size_t len) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(buf, len, "%s", strcmp(path, "-") ? basename(tmp) : "stdin");
    size_t n = strlen(buf);
    if (n > 3 && !strcmp(buf + n - 3, ".gz")) buf[n - 3] = 0;   /* row.txt.gz names the row */
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf) *dot = 0;
    return buf;
}

static void print_row(FILE *out, const char *name, const AllocTrace *t, const AllocReplay *r) {
    const PlanAllocStats *w = r->has_window ? &r->window : &r->whole;
    double tens = (double)w->max_requested, res = (double)r->whole.max_reserved;
    char harness[32] = "-", oom[24] = "-";
    if (t->harness_peak) snprintf(harness, sizeof harness, "%.2f", (double)t->harness_peak / MIB);
    if (r->first_oom_line) snprintf(oom, sizeof oom, "%ld", r->first_oom_line);
    fprintf(out, "%-48s %9.2f %9.2f %9.2f %9.2f %7.1f %8.2f %5d %9.2f %9s\n", name, tens / MIB, (double)w->max_allocated / MIB,
           res / MIB, (res - tens) / MIB, tens > 0 ? 100.0 * (res - tens) / tens : 0.0,
           (double)(w->reserved_at_max_allocated - w->max_allocated) / MIB, r->whole.max_segments,
           (double)r->whole.reserved / MIB, r->first_oom_line ? oom : harness);
}

static cJSON *json_row(const char *name, const AllocTrace *t, const AllocReplay *r) {
    const PlanAllocStats *w = r->has_window ? &r->window : &r->whole;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "trace", name);
    cJSON_AddStringToObject(o, "setup", t->setup);
    cJSON_AddNumberToObject(o, "tensors_peak_bytes", (double)w->max_requested);
    cJSON_AddNumberToObject(o, "harness_peak_bytes", (double)t->harness_peak);
    cJSON_AddNumberToObject(o, "max_allocated_bytes", (double)w->max_allocated);
    cJSON_AddNumberToObject(o, "max_reserved_bytes", (double)r->whole.max_reserved);
    cJSON_AddNumberToObject(o, "frag_at_allocated_peak_bytes", (double)(w->reserved_at_max_allocated - w->max_allocated));
    cJSON_AddNumberToObject(o, "max_segments", r->whole.max_segments);
    cJSON_AddNumberToObject(o, "final_reserved_bytes", (double)r->whole.reserved);
    cJSON_AddNumberToObject(o, "device_allocs", r->whole.n_device_alloc);
    cJSON_AddNumberToObject(o, "alloc_retries", r->whole.n_alloc_retries);
    cJSON_AddNumberToObject(o, "ooms", r->whole.n_ooms);
    cJSON_AddNumberToObject(o, "first_oom_line", r->first_oom_line);
    cJSON_AddNumberToObject(o, "gloo_allocs_left_out", t->gloo_allocs);
    cJSON_AddBoolToObject(o, "window", r->has_window);
    return o;
}

int cli_cmd_alloc(int argc, char **argv) {
    AllocOpts o;
    int first = 0, rc = alloc_opts(argc, argv, &o, &first);
    if (rc) return rc == 1 ? 0 : rc;
    cJSON *arr = o.json ? cJSON_CreateArray() : NULL;
    char *table = NULL;
    size_t table_len = 0;
    /* printed whole once every trace replayed; the '#' lines wrapped to the text width */
    FILE *mem = o.json ? NULL : open_memstream(&table, &table_len);
    FILE *out = mem ? cli_wrap_comments(mem, CLI_TEXT_WIDTH) : NULL;
    if (!o.json && !out) {
        if (mem) fclose(mem);
        free(table);
        fprintf(stderr, "memplan: out of memory\n");
        return 1;
    }
    if (out) {
        fprintf(out, "# memplan alloc: PyTorch's CUDA caching allocator (torch 2.15 rules) over recorded allocations\n");
        char quiet[256] = "";
        if (o.conf_text && plan_alloc_config_no_effect(o.conf_text, quiet, sizeof quiet)) {}
        fprintf(out, "# settings: %s (%s)%s%s; capacity %s; peaks of tensors and allocated from '%s'\n",
                o.conf_text ? o.conf_text : "torch's defaults", o.conf_from ? o.conf_from : "none given",
                quiet[0] ? "; changing no device memory, left out: " : "", quiet,
                o.conf.capacity ? "given" : "unlimited", o.from ? o.from : "start");
        fprintf(out, "%-48s %9s %9s %9s %9s %7s %8s %5s %9s %9s\n", "trace", "tensors", "allocated", "reserved", "overhead",
                "overhead", "frag", "segs", "final", "harness");
        fprintf(out, "%-48s %9s %9s %9s %9s %7s %8s %5s %9s %9s\n", "-", "MiB", "MiB", "MiB", "MiB", "%", "MiB", "count",
                "MiB", "MiB|oom");
    }
    for (int i = first; i < argc && !rc; i++) {
        AllocTrace t;
        AllocReplay r;
        char name[PATH_MAX];
        rc = replay_file(argv[i], &o, &t, &r);
        if (rc) break;
        trace_name(argv[i], name, sizeof name);
        if (o.json) cJSON_AddItemToArray(arr, json_row(name, &t, &r));
        else print_row(out, name, &t, &r);
        if (o.from && !r.has_window) fprintf(stderr, "memplan: trace '%s' has no marker '%s': its peaks are the whole trace's\n", argv[i], o.from);
        plan_alloc_trace_free(&t);
    }
    if (out) fclose(out);   /* into mem */
    if (mem) fclose(mem);
    if (table && !rc) rc = cli_write_text("the table", NULL, table_len && table[table_len - 1] == '\n' ? (table[table_len - 1] = 0, table) : table);
    free(table);
    if (arr && !rc) {
        char *txt = cJSON_Print(arr);
        rc = txt ? cli_write_text("the --json output", o.json_path, txt) : 1;
        free(txt);
    }
    cJSON_Delete(arr);
    return rc;
}
