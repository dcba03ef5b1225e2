/* plan_util.c — see plan_util.h. */
#include "plan_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int plan_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int plan_parse_int(const char *s, long long lo, long long hi, long long *out) {
    double v;
    if (plan_parse_double(s, -9.2e18, 9.2e18, &v)) return -1;
    if (v != floor(v) || v < (double)lo || v > (double)hi) return -1;
    *out = (long long)v;
    return 0;
}

int plan_parse_size(const char *s, double *bytes) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0) return -1;
    while (*end == ' ') end++;
    /* SI prefixes are decimal (KB = 1e3 ... TB = 1e12, as disks and the GPU
     * vendors' "80GB" count); the IEC ones and the bare letters are binary
     * (KiB, K = 1024 ... TiB, T = 2^40), as nvidia-smi's MiB and ls -h count. */
    static const struct { const char *suffix; double mult; } UNITS[] = {
        {"", 1}, {"B", 1}, {"K", KIB}, {"KiB", KIB}, {"KB", 1e3}, {"M", MIB}, {"MiB", MIB},
        {"MB", 1e6}, {"G", GIB}, {"GiB", GIB}, {"GB", 1e9}, {"T", GIB * 1024},
        {"TiB", GIB * 1024}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof(UNITS) / sizeof(UNITS[0]); i++) {
        if (strcasecmp(end, UNITS[i].suffix) == 0) {
            double b = v * UNITS[i].mult;
            if (b > 1e18) return -1;
            *bytes = b;
            return 0;
        }
    }
    return -1;
}

int plan_parse_size_or_percent(const char *s, double *value, int *is_frac) {
    size_t n = s ? strlen(s) : 0;
    if (n > 1 && s[n - 1] == '%') {
        char tmp[64];
        if (n >= sizeof(tmp)) return -1;
        memcpy(tmp, s, n - 1);
        tmp[n - 1] = 0;
        double p;
        if (plan_parse_double(tmp, 0, 100, &p)) return -1;
        *value = p / 100.0;
        *is_frac = 1;
        return 0;
    }
    *is_frac = 0;
    return plan_parse_size(s, value);
}

const char *plan_fmt_bytes(double b, char *buf, size_t len) {
    if (b >= GIB) snprintf(buf, len, "%.2f GiB", b / GIB);
    else if (b >= MIB) snprintf(buf, len, "%.2f MiB", b / MIB);
    else if (b >= KIB) snprintf(buf, len, "%.2f KiB", b / KIB);
    else snprintf(buf, len, "%.0f B", b);
    return buf;
}

const char *plan_fmt_gib(double b, char *buf, size_t len) {
    snprintf(buf, len, "%.2f", b / GIB);
    return buf;
}

const char *plan_fmt_count(long long n, char *buf, size_t len) {
    char tmp[32];
    snprintf(tmp, sizeof(tmp), "%lld", n < 0 ? -n : n);
    size_t d = strlen(tmp), o = 0;
    if (n < 0 && o + 1 < len) buf[o++] = '-';
    for (size_t i = 0; i < d && o + 1 < len; i++) {
        if (i && (d - i) % 3 == 0 && o + 1 < len) buf[o++] = ',';
        if (o + 1 < len) buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double plan_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double plan_rel_err(double pred, double meas) {
    if (pred == 0) return meas == 0 ? 0 : INFINITY;
    return (meas - pred) / pred;
}

const char *plan_fmt_rel_err(double e, char *buf, size_t len) {
    if (isinf(e)) snprintf(buf, len, "new");
    else if (e != 0 && fabs(100 * e) < 0.005) snprintf(buf, len, "%+.1e", 100 * e);
    else snprintf(buf, len, "%+.2f", 100 * e);
    return buf;
}

int plan_grow_to(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

const char *plan_status_name(int status) {
    switch (status) {
    case PLAN_OK: return "ok";
    case PLAN_ERR_NOMEM: return "out of host memory";
    case PLAN_ERR_REFUSED: return "not planned";
    default: return "failed";
    }
}
