/* cli_plot.h — what memplan's plots share: the gnuplot terminal for a .png or .svg file, and
 * running gnuplot on the written script, or, where gnuplot is missing, saying what was written
 * and how to draw it (the data and the script stay beside the plot either way). Used by `memplan
 * bench syncbn --plot` and the planner's --plot (cli/cli_output.c; linked into both programs). */
#ifndef CLI_PLOT_H
#define CLI_PLOT_H

#include <stdio.h>

/* Writes "set terminal pngcairo|svg size W,H font ',10'" (svg when path ends in .svg, any case)
 * and "set output 'path'" to the script. */
void cli_plot_terminal(FILE *script, const char *path, int width, int height);

/* Runs `gnuplot 'script_path'` when gnuplot is installed; otherwise one line on stderr: the data
 * (data: the data files, comma-separated) and the script were written, install gnuplot-nox and
 * run gnuplot on the script. 0 (also when gnuplot is missing), -1 when gnuplot failed. */
int cli_plot_run(const char *script_path, const char *data);

#endif
