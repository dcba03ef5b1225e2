/* cli_ranks.c — see cli_ranks.h. One all-gather of fixed-size records (bytes). */
#include "cli_ranks.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_BYTES 480

typedef struct {
    int32_t status;
    uint32_t pad;
    uint64_t args;           /* FNV-1a of the arguments */
    char msg[MSG_BYTES];
} Record;

static uint64_t hash_args(int argc, char **argv)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < argc; i++) {
        for (const char *p = argv[i]; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xffu) * 1099511628211ULL;   /* argument boundary */
    }
    return h;
}

int cli_ranks_agree(Comm *c, int argc, char **argv, int status, const char *msg)
{
    int rank = comm_rank(c), N = comm_size(c);
    Record mine, *all = calloc((size_t)N, sizeof *all);
    memset(&mine, 0, sizeof mine);
    mine.status = status;
    mine.args = hash_args(argc, argv);
    snprintf(mine.msg, sizeof mine.msg, "%s", msg ? msg : "");
    if (!all || comm_all_gather(c, &mine, all, sizeof mine, DT_U8, NULL)) {
        free(all);
        fprintf(stderr, "memplan: rank %d: the start-up exchange between ranks failed\n", rank);
        return 1;
    }
    int worst = 0, helps = 0, differ = -1;
    for (int r = 0; r < N; r++) {
        int st = all[r].status;
        if (st == CLI_RANKS_HELP) helps++;
        else if (st > worst) worst = st;
        if (all[r].args != all[0].args && differ < 0) differ = r;
    }
    if (differ >= 0) {
        if (rank == 0)
            fprintf(stderr, "memplan: rank %d was started with a different configuration than rank 0 (other arguments, "
                            "of %d ranks): give every rank the same command and flags\n", differ, N);
        free(all);
        return 2;
    }
    if (worst == 0) {
        free(all);
        return helps == N ? CLI_RANKS_HELP : 0;
    }
    if (rank == 0) {   /* one line per distinct message; the ranks named unless all said it */
        for (int r = 0; r < N; r++) {
            if (all[r].status == 0 || all[r].status == CLI_RANKS_HELP || !all[r].msg[0]) continue;
            int first = 1, same = 0;
            for (int q = 0; q < r && first; q++) first = strcmp(all[q].msg, all[r].msg) != 0 || all[q].status != all[r].status;
            if (!first) continue;
            for (int q = 0; q < N; q++) same += all[q].status == all[r].status && strcmp(all[q].msg, all[r].msg) == 0;
            if (same == N || N == 1) fprintf(stderr, "memplan: %s\n", all[r].msg);
            else if (same == 1) fprintf(stderr, "memplan: rank %d: %s\n", r, all[r].msg);
            else fprintf(stderr, "memplan: %d of %d ranks (first: rank %d): %s\n", same, N, r, all[r].msg);
        }
        fflush(stderr);
    }
    free(all);
    return worst;
}
