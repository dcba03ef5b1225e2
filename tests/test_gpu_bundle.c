/* test_gpu_bundle.c — the GPU bundle (scripts/gpu_bundle.sh, docs/gpu.md "The bundle") is
 * complete: packed from this build, unpacked from its archive into another folder (so nothing can
 * lean on where it was made), with only the bundle and this machine's CUDA libraries (standing in
 * for the device's) on the library path, ldd resolves every library of every ELF file inside it,
 * to glibc or to CUDA; every program starts; two MPI ranks run through its relocated mpirun and
 * load nothing from outside. The checker itself must name a library taken out of the bundle.
 * A build without CUDA (the sanitizer run: NO_CUDA=1) and a machine without the packing tools
 * skip, saying why. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sys/stat.h>

#include "test_run.h"

/* Skips the test when the bundle cannot be made here for a reason outside the code. */
static void require_packable(void)
{
#if !MEMPLAN_CUDA
    cr_skip_test("skipped: built without CUDA (NO_CUDA=1): the bundle carries the CUDA programs "
                 "(make gpu-bundle needs the plain build with CUDA, NCCL and CUPTI)");
#endif
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("skipped: sanitizer build: the bundle is packed from the plain build (make gpu-bundle)");
#endif
    static const char *TOOLS[] = {"ompi_info", "mpirun", "xz", "tar", "ldd", "strip", "objdump", "readelf"};
    for (size_t i = 0; i < sizeof TOOLS / sizeof TOOLS[0]; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", TOOLS[i]);
        if (system(cmd) != 0) cr_skip_test("skipped: %s not found: the bundle cannot be packed on this machine", TOOLS[i]);
    }
}

/* Counts the lines of a file that start with prefix. */
static int count_lines(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, prefix, strlen(prefix)) == 0) n++;
    fclose(f);
    return n;
}

Test(gpu_bundle, a_bundle_unpacked_elsewhere_should_be_complete_and_a_missing_library_should_be_named,
     .timeout = 600)
{
    require_packable();
    char script[PATH_MAX], build[PATH_MAX], dir[96], cmd[4 * PATH_MAX], path[PATH_MAX];
    test_sibling_path(script, sizeof script, "../../scripts/gpu_bundle.sh");
    test_sibling_path(build, sizeof build, "..");
    test_tmpdir(dir, sizeof dir, "memplan-bundle");
    test_mpi_env();
    /* Criterion marks its workers by these; inherited, they make the bundle's Criterion test
       programs abort at start as if they were this test's sandboxed workers */
    unsetenv("BXFI_MAP");
    unsetenv("IS_SANDBOX");

    /* pack (xz -1: this test checks completeness; the size of make gpu-bundle's -6 archive is
       checked by pack itself, which fails over its limit) */
    snprintf(cmd, sizeof cmd, "GPU_BUNDLE_XZ_LEVEL=1 '%s' pack '%s' '%s/made/gpu-bundle' 2>&1", script, build, dir);
    Run r = test_run_cmd(cmd);
    cr_assert_eq(r.status, 0, "pack failed:\n%s", r.out);
    cr_expect(strstr(r.out, "MiB travel, of the device tool's 64"), "pack reports what travels:\n%s", r.out);
    free(r.out);

    /* unpack elsewhere, and the folder it was made in is gone */
    snprintf(cmd, sizeof cmd, "mkdir '%s/elsewhere' && tar -C '%s/elsewhere' -xJf '%s/made/gpu-bundle.tar.xz' && rm -rf '%s/made' 2>&1",
             dir, dir, dir, dir);
    r = test_run_cmd(cmd);
    cr_assert_eq(r.status, 0, "%s", r.out);
    free(r.out);

    /* nothing of CUDA or glibc travels: the device has its own */
    snprintf(path, sizeof path, "%s/elsewhere/gpu-bundle/lib", dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "no %s", path);
    static const char *NEVER[] = {"libcuda.", "libcudart.", "libcublas", "libnccl.", "libcupti.", "libc.so", "libm.so",
                                  "ld-linux"};
    int libs = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        libs++;
        for (size_t i = 0; i < sizeof NEVER / sizeof NEVER[0]; i++)
            cr_expect(strncmp(e->d_name, NEVER[i], strlen(NEVER[i])) != 0, "the bundle carries %s", e->d_name);
    }
    closedir(d);
    cr_expect_geq(libs, 10, "only %d libraries carried", libs);
    snprintf(path, sizeof path, "%s/elsewhere/gpu-bundle/MANIFEST", dir);
    int programs = count_lines(path, "program: ");
    cr_expect_geq(programs, 10, "the MANIFEST lists %d programs", programs);
    snprintf(cmd, sizeof cmd, "'%s' cuda-needed '%s/elsewhere/gpu-bundle'", script, dir);
    r = test_run_cmd(cmd);
    static const char *CUDA[] = {"libcudart.so", "libcublas.so", "libnccl.so", "libcupti.so"};
    for (size_t i = 0; i < sizeof CUDA / sizeof CUDA[0]; i++)
        cr_expect(strstr(r.out, CUDA[i]), "the MANIFEST must name %s for the device to find:\n%s", CUDA[i], r.out);
    free(r.out);

    /* complete: ldd, every program starts, 2 ranks through the relocated mpirun */
    const char *cuda = getenv("CUDA_HOME");
    cuda = cuda && *cuda ? cuda : "/usr/local/cuda";
    snprintf(cmd, sizeof cmd, "MEMPLAN_CUDA_LIB_PATH='%s/lib64:%s/extras/CUPTI/lib64' '%s' verify '%s/elsewhere/gpu-bundle' --mpi 2>&1",
             cuda, cuda, script, dir);
    r = test_run_cmd(cmd);
    cr_expect_eq(r.status, 0, "verify failed:\n%s", r.out);
    char started[64];
    snprintf(started, sizeof started, "# start: %d program(s) started", programs);
    cr_expect(strstr(r.out, started), "every program of the MANIFEST starts (%s):\n%s", started, r.out);
    cr_expect(strstr(r.out, "# mpirun: 2 ranks of comm_check ok") && strstr(r.out, "nothing loaded from outside"), "%s", r.out);
    cr_expect(strstr(r.out, "# verify: ok"), "%s", r.out);
    free(r.out);

    /* the checker names a gap: cJSON taken out resolves to this machine's copy, outside */
    snprintf(path, sizeof path, "%s/elsewhere/gpu-bundle/lib/libcjson.so.1", dir);
    cr_assert_eq(unlink(path), 0, "cannot remove %s", path);
    r = test_run_cmd(cmd);
    cr_expect_neq(r.status, 0, "verify passed without libcjson:\n%s", r.out);
    cr_expect(strstr(r.out, "bin/memplan: libcjson.so.1 => ") && strstr(r.out, "(OUTSIDE)"), "%s", r.out);
    free(r.out);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
