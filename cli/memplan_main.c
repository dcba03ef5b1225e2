/* memplan_main.c — the memplan program: its standard streams checked around memplan_front
 * (cli/memplan_front.h), which does the work. */
#include <stdio.h>
#include <unistd.h>

#include "cli_io.h"
#include "memplan_front.h"

int main(int argc, char **argv) {
    cli_io_start();
    /* planning output is small: held whole until exit when it goes to a file or pipe, so that a
       failed write is seen by cli_io_finish with its reason (a terminal stays line-buffered) */
    static char outbuf[1 << 18];   /* glibc ignores the size when it allocates the buffer itself */
    if (!isatty(1)) setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    return cli_io_finish(memplan_front(argc, argv));
}
