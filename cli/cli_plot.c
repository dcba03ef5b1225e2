/* cli_plot.c — see cli_plot.h. */
#include "cli_plot.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cli_plot_terminal(FILE *script, const char *path, int width, int height)
{
    size_t n = strlen(path);
    int svg = n > 4 && strcasecmp(path + n - 4, ".svg") == 0;
    fprintf(script, "set terminal %s size %d,%d font ',10'\nset output '%s'\n", svg ? "svg" : "pngcairo", width, height,
            path);
}

int cli_plot_run(const char *script_path, const char *data)
{
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        fprintf(stderr, "memplan: gnuplot not found: wrote the data (%s) and the script (%s); install gnuplot-nox "
                        "and run 'gnuplot %s'\n", data, script_path, script_path);
        return 0;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", script_path);
    if (system(cmd) != 0) {
        fprintf(stderr, "memplan: gnuplot failed on %s\n", script_path);
        return -1;
    }
    return 0;
}
