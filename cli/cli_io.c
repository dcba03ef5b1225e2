/* cli_io.c — see cli_io.h. */
#include "cli_io.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifndef MEMPLAN_ZLIB
#define MEMPLAN_ZLIB 1   /* the builds that link no system library (make embed-sources, make web) set 0 */
#endif
#if MEMPLAN_ZLIB
#include <zlib.h>
#endif

static int stdout_closed, stdout_reported;

void cli_io_start(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        if (fd == 1) stdout_closed = 1;
        int n = open("/dev/null", O_RDONLY);   /* writes to it fail: nothing is lost silently */
        if (n >= 0 && n != fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

int cli_io_finish(int rc)
{
    errno = 0;
    int bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (!bad) return rc;
    if (stdout_reported) return rc ? rc : 1;
    if (stdout_closed)
        fprintf(stderr, "memplan: cannot write standard output: it is closed (the output is lost)\n");
    else
        fprintf(stderr, "memplan: cannot write standard output: %s (the output is incomplete)\n",
                e ? strerror(e) : "a write failed");
    return rc ? rc : 1;
}

int cli_same_file(const char *a, const char *b)
{
    if (!a || !b) return 0;
    if (strcmp(a, b) == 0) return 1;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int cli_check_output(const char *flag, const char *path, const char *const *inputs, int n, char *err,
                     size_t errlen)
{
    if (!path || !*path) {
        snprintf(err, errlen, "%s needs a file name", flag);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (inputs[i] && cli_same_file(path, inputs[i])) {
            snprintf(err, errlen, "%s '%s' is the input file '%s': give another name, nothing was written", flag,
                     path, inputs[i]);
            return -1;
        }
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s '%s' is a folder: give a file name", flag, path);
            return -1;
        }
        if (access(path, W_OK)) {
            snprintf(err, errlen, "%s '%s' cannot be written: %s", flag, path, strerror(errno));
            return -1;
        }
        return 0;
    }
    if (errno != ENOENT) {
        snprintf(err, errlen, "%s '%s' cannot be written: %s", flag, path, strerror(errno));
        return -1;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    const char *dir = dirname(tmp);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s '%s': the folder '%s' does not exist", flag, path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK)) {
        snprintf(err, errlen, "%s '%s': cannot create a file in '%s': %s", flag, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int cli_write_text(const char *what, const char *path, const char *text)
{
    FILE *f = path ? fopen(path, "w") : stdout;
    const char *name = path ? path : "standard output";
    if (!f) {
        fprintf(stderr, "memplan: cannot write %s '%s': %s\n", what, name, strerror(errno));
        return 1;
    }
    errno = 0;
    int bad = fputs(text, f) < 0 || fputc('\n', f) == EOF;
    bad |= fflush(f) != 0 || ferror(f);
    int e = errno;
    if (path && fclose(f) != 0) {
        bad = 1;
        if (!e) e = errno;
    }
    if (bad) {
        if (!path) stdout_reported = 1;   /* cli_io_finish does not report it again */
        if (!path && stdout_closed) fprintf(stderr, "memplan: cannot write %s to standard output: it is closed\n", what);
        else if (!path) fprintf(stderr, "memplan: cannot write %s to standard output: %s\n", what, e ? strerror(e) : "a write failed");
        else fprintf(stderr, "memplan: cannot write %s '%s': %s\n", what, name, e ? strerror(e) : "a write failed");
        return 1;
    }
    return 0;
}

/* ---- reading gzip through stdio (fopencookie over a gzFile) ---- */

#if MEMPLAN_ZLIB
static ssize_t gz_read(void *cookie, char *buf, size_t size)
{
    unsigned n = size > (1u << 30) ? 1u << 30 : (unsigned)size;
    int r = gzread((gzFile)cookie, buf, n);
    if (r < 0) { errno = EIO; return -1; }
    return r;
}

static int gz_close(void *cookie) { return gzclose((gzFile)cookie) == Z_OK ? 0 : EOF; }

#endif

FILE *cli_fdopen_maybe_gz(int fd)
{
    if (fd < 0) return NULL;
#if MEMPLAN_ZLIB
    gzFile g = gzdopen(fd, "rb");
    if (!g) { close(fd); errno = ENOMEM; return NULL; }
    cookie_io_functions_t io = {gz_read, NULL, NULL, gz_close};
    FILE *f = fopencookie(g, "r", io);
    if (!f) gzclose(g);
#else
    FILE *f = fdopen(fd, "r");
    if (!f) close(fd);
#endif
    return f;
}

FILE *cli_open_maybe_gz(const char *path)
{
    if (!strcmp(path, "-")) return stdin;
    return cli_fdopen_maybe_gz(open(path, O_RDONLY));
}

void cli_print_wrapped(FILE *f, const char *text, int width, const char *const *keep) {
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        int whole = width <= 0 || (int)len <= width;
        for (const char *const *k = keep; k && *k && !whole; k++) whole = strncmp(line, *k, strlen(*k)) == 0;
        if (whole) fprintf(f, "%.*s\n", (int)len, line);
        else {
            const char *cont = line[0] == '#' ? "#   " : "    ";
            const char *p = line, *end = line + len;
            int first = 1;
            while (p < end) {
                int room = width - (first ? 0 : (int)strlen(cont));
                const char *brk = end;
                if (end - p > room) {   /* the last space within room, else the first one after */
                    brk = NULL;
                    for (const char *q = p + room; q > p; q--) if (*q == ' ') { brk = q; break; }
                    if (!brk) brk = memchr(p, ' ', (size_t)(end - p));
                    if (!brk) brk = end;
                }
                fprintf(f, "%s%.*s\n", first ? "" : cont, (int)(brk - p), p);
                p = brk;
                while (p < end && *p == ' ') p++;
                first = 0;
            }
        }
        line += len;
        if (*line == '\n') line++;
    }
}

typedef struct {
    FILE *dest;
    int width;
    char *buf;        /* the line being written, not yet ended */
    size_t len, cap;
} WrapCookie;

/* Writes the complete line buf[0..n) (without its '\n') to dest, wrapped if a long '#' line. */
static void wrap_line(WrapCookie *c, char *line, size_t n) {
    char end = line[n];
    line[n] = 0;
    if (n > 0 && line[0] == '#') cli_print_wrapped(c->dest, line, c->width, NULL);
    else fprintf(c->dest, "%s\n", line);
    line[n] = end;
}

static ssize_t wrap_write(void *cookie, const char *data, size_t size) {
    WrapCookie *c = cookie;
    if (c->len + size + 1 > c->cap) {
        size_t cap = (c->len + size + 1) * 2;
        char *b = realloc(c->buf, cap);
        if (!b) return -1;
        c->buf = b, c->cap = cap;
    }
    memcpy(c->buf + c->len, data, size);
    c->len += size;
    size_t start = 0;
    for (size_t i = 0; i < c->len; i++)
        if (c->buf[i] == '\n') {
            wrap_line(c, c->buf + start, i - start);
            start = i + 1;
        }
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
    if (start) fflush(c->dest);
    return (ssize_t)size;
}

static int wrap_close(void *cookie) {
    WrapCookie *c = cookie;
    if (c->len) fwrite(c->buf, 1, c->len, c->dest);
    int rc = fflush(c->dest) == 0 ? 0 : EOF;
    free(c->buf);
    free(c);
    return rc;
}

FILE *cli_wrap_comments(FILE *dest, int width) {
    WrapCookie *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->dest = dest, c->width = width;
    FILE *f = fopencookie(c, "w", (cookie_io_functions_t){.write = wrap_write, .close = wrap_close});
    if (!f) free(c);
    else setvbuf(f, NULL, _IOLBF, 0);
    return f;
}
