/* plan_util.h — parsing and formatting shared by the planner and the CLI. Sizes take binary
 * suffixes: KiB/MiB/GiB/TiB, and K/M/G/T (also KB, MB, GB, TB) mean the same binary units (a
 * bare "24G" is 24 GiB, as nvidia-smi and PyTorch report memory); plain numbers are bytes. */
#ifndef PLAN_UTIL_H
#define PLAN_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* What a planner call that can fail returns: PLAN_OK, or why not (the caller reports the reason
   the call leaves beside it, e.g. Step.fail_why). Out of host memory stays -1, as before. */
typedef enum {
    PLAN_OK = 0,
    PLAN_ERR_NOMEM = -1,     /* out of host memory */
    PLAN_ERR_REFUSED = -2,   /* the setup cannot be planned (a dimension's check): the reason is given */
} PlanStatus;
/* A short name of a status, for messages. */
const char *plan_status_name(int status);

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * 1024.0 * 1024.0)

/* All return 0 on success, -1 if the text is not a valid value in [lo, hi]. */
/* "24GiB", "512M" (binary: K M G T and KiB..TiB are powers of 1024), "80GB"
 * (decimal: KB MB GB TB are powers of 1000), "1e9" (bytes). */
int plan_parse_size(const char *s, double *bytes);
int plan_parse_int(const char *s, long long lo, long long hi, long long *out);  /* "8", "1e6" */
int plan_parse_double(const char *s, double lo, double hi, double *out);
/* "5%" -> fraction 0.05 (*is_frac = 1) or a size (*is_frac = 0). */
int plan_parse_size_or_percent(const char *s, double *value, int *is_frac);

/* "12.34 GiB" into buf (binary units, 2 decimals), returns buf. */
const char *plan_fmt_bytes(double bytes, char *buf, size_t len);
/* Fixed GiB with 2 decimals, no unit: "12.34". */
const char *plan_fmt_gib(double bytes, char *buf, size_t len);
/* 1234567 -> "1,234,567". */
const char *plan_fmt_count(long long n, char *buf, size_t len);
/* (measured - predicted) / predicted; 0 when both are 0, INFINITY when only measured is not. */
double plan_rel_err(double pred, double meas);
/* The median of v[0..n-1] (n >= 1), which it sorts in place. */
double plan_median(double *v, int n);
/* A relative error in percent for tables: "+1.23", "+4.0e-03" when too small for two decimals
 * (visible, not +0.00), "new" for INFINITY. Returns buf. */
const char *plan_fmt_rel_err(double e, char *buf, size_t len);

/* Room for `need` elements of `elem` bytes in the array *p of capacity *cap (grown by doubling,
 * from 64). 0, or -1 when out of memory (*p and *cap unchanged). Inline where there is room
 * (the allocator replay pushes millions of elements a plan). */
int plan_grow_to(void **p, int *cap, int need, size_t elem);
static inline int plan_grow(void **p, int *cap, int need, size_t elem) {
    return need <= *cap ? 0 : plan_grow_to(p, cap, need, elem);
}

#endif
