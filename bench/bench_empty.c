/* bench_empty.c — the reference for bench_startup: a C program that does nothing, so that its
 * wall time is what starting any dynamically linked process costs on this machine. */
int main(void) { return 0; }
