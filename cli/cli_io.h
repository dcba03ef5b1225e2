/* cli_io.h — whether memplan's output got where it was sent. Every output path is checked
 * before any work starts (its folder exists, it is not a folder, it is not an input file, no
 * two outputs share a path); every write, flush and close is checked, standard output too at
 * exit; a failure is one line naming the output, and exit status 1. */
#ifndef CLI_IO_H
#define CLI_IO_H

#include <stddef.h>
#include <stdio.h>

/* First thing in main: a closed descriptor 0, 1 or 2 is reopened on /dev/null (read-only for
 * 1 and 2, so that a write to a closed standard output fails instead of landing in the first
 * file memplan opens), and a closed standard output is remembered for the message. */
void cli_io_start(void);
/* Last thing in main: flushes and checks standard output. Returns rc, or 1 after one line when
 * rc was 0 and standard output lost data. */
int cli_io_finish(int rc);

/* Checks that `path` (the value of `flag`, e.g. "--trace") can be written without touching it:
 * not empty, not a folder, not the file of an input (inputs: NULL-terminated paths, may hold
 * NULLs before the end as skipped entries, n of them), and its folder exists and is writable.
 * 0, or -1 with the reason in err (a whole sentence naming the flag and the path). */
int cli_check_output(const char *flag, const char *path, const char *const *inputs, int n, char *err,
                     size_t errlen);
/* 1 if a and b name the same file (the same string, or the same existing inode). */
int cli_same_file(const char *a, const char *b);

/* Writes text and a newline to path (NULL: standard output, flushed), checking every step.
 * 0, or 1 after printing "memplan: cannot write <what> '<path>': <reason>". */
int cli_write_text(const char *what, const char *path, const char *text);

/* Opens path for reading, gzip-compressed or not (zlib's gzopen reads both): the recorded
 * allocation traces are kept compressed (bench/torch/results/traces/ROW.txt.gz). "-" is standard
 * input. NULL with errno set when it cannot be opened. Close with fclose. */
FILE *cli_open_maybe_gz(const char *path);
/* The same over an open descriptor, which the FILE then owns (closed with it, or at once when
 * NULL is returned, errno set). Without zlib (MEMPLAN_ZLIB=0: the builds that link no system
 * library) the bytes as they are. */
FILE *cli_fdopen_maybe_gz(int fd);

/* Prints text to f with every line longer than width wrapped at spaces: a '#' line goes on as
 * "#   ...", another as "    ...". Lines starting with a prefix of keep (NULL-terminated; a
 * command to paste) and lines without a space to break at stay whole. width <= 0: as it is. */
void cli_print_wrapped(FILE *f, const char *text, int width, const char *const *keep);

/* The width the text output keeps to (memplan's tables and prose; --wide lifts it). */
#define CLI_TEXT_WIDTH 100

/* A stream that passes what is written to dest line by line, each '#' line longer than width
 * wrapped as cli_print_wrapped wraps it (the commentary of run, validate and alloc; their table
 * rows stay whole). fclose writes what is left and flushes dest, which stays open. NULL when
 * out of memory (errno set). */
FILE *cli_wrap_comments(FILE *dest, int width);

#endif
