/* _memplan.c — the CPython extension of the memplan package: the planning front end compiled in
 * (cli/memplan_api.h), run with the C library's stdout and stderr swapped for memory streams, so
 * that a call returns what `memplan ...` would print instead of printing it. Python's own
 * sys.stdout is not the C library's stdout and is not touched. The front end keeps state in
 * globals (getopt's, the usage-error capture): calls hold the GIL and never release it. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memplan_api.h"
#include "memplan_front.h"
#include "plan_load.h"
#include "plan_zoo.h"

/* Streams swapped for the duration of one front-end call. glibc and macOS declare stdout and
 * stderr as assignable FILE pointers ("normal variables which you can set", glibc manual 12.2). */
typedef struct {
    FILE *out, *err, *saved_out, *saved_err;
    char *out_buf, *err_buf;
    size_t out_len, err_len;
} Capture;

static int capture_start(Capture *c) {
    memset(c, 0, sizeof *c);
    c->out = open_memstream(&c->out_buf, &c->out_len);
    c->err = open_memstream(&c->err_buf, &c->err_len);
    if (!c->out || !c->err) {
        if (c->out) fclose(c->out);
        if (c->err) fclose(c->err);
        free(c->out_buf);
        free(c->err_buf);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    c->saved_out = stdout;
    c->saved_err = stderr;
    stdout = c->out;
    stderr = c->err;
    return 0;
}

static void capture_end(Capture *c) {
    stdout = c->saved_out;
    stderr = c->saved_err;
    fclose(c->out);   /* sets out_buf and out_len to the final text */
    fclose(c->err);
}

PyDoc_STRVAR(run_doc, "run(command, options_json, json) -> (status, stdout, stderr, message)\n\n"
                      "Runs `memplan COMMAND [--json] OPTIONS` in this process (cli/memplan_api.h).");

static PyObject *py_run(PyObject *self, PyObject *args) {
    const char *cmd, *opts;
    int json;
    if (!PyArg_ParseTuple(args, "szp", &cmd, &opts, &json)) return NULL;
    char msg[8192];
    Capture c;
    if (capture_start(&c)) return PyErr_NoMemory();
    int rc = memplan_api_run(cmd, opts, json, msg, sizeof msg);
    capture_end(&c);
    PyObject *r = Py_BuildValue("(is#s#s)", rc, c.out_buf, (Py_ssize_t)c.out_len, c.err_buf, (Py_ssize_t)c.err_len, msg);
    free(c.out_buf);
    free(c.err_buf);
    return r;
}

PyDoc_STRVAR(argv_doc, "argv(command, options_json, json) -> (list of str, '') or (None, message)\n\n"
                       "The command line an options document amounts to.");

static PyObject *py_argv(PyObject *self, PyObject *args) {
    const char *cmd, *opts;
    int json;
    if (!PyArg_ParseTuple(args, "szp", &cmd, &opts, &json)) return NULL;
    char msg[8192];
    ApiArgv a;
    if (memplan_api_argv(cmd, opts, json, &a, msg, sizeof msg)) return Py_BuildValue("(Os)", Py_None, msg);
    PyObject *list = PyList_New(a.argc);
    for (int i = 0; list && i < a.argc; i++) {
        PyObject *s = PyUnicode_FromString(a.argv[i]);
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    memplan_api_argv_free(&a);
    return list ? Py_BuildValue("(Ns)", list, "") : NULL;
}

PyDoc_STRVAR(config_format_doc, "config_format(json_text) -> 'json', 'toml' or None\n\n"
                                "How a config given as data must be written for --config to read it as what it is.");

static PyObject *py_config_format(PyObject *self, PyObject *args) {
    const char *text;
    if (!PyArg_ParseTuple(args, "s", &text)) return NULL;
    const char *f = memplan_api_config_format(text);
    if (!f) Py_RETURN_NONE;
    return PyUnicode_FromString(f);
}

PyDoc_STRVAR(hub_missing_doc, "hub_missing(model, revision) -> None or (repo, cache)\n\n"
                              "(repo, cache folder) when MODEL is a hub id that neither the zoo, a path nor the\n"
                              "local Hugging Face cache resolves (the front end would fetch its config.json).");

static PyObject *py_hub_missing(PyObject *self, PyObject *args) {
    const char *model, *rev;
    if (!PyArg_ParseTuple(args, "sz", &model, &rev)) return NULL;
    ModelSpec m;
    char msg[2048], cache[4096];
    int rc = plan_load_model_at(&m, model, rev, msg, sizeof msg);
    if (rc == 0) plan_model_free(&m);
    if (rc != PLAN_LOAD_NOT_CACHED || plan_hub_cache_dir(cache, sizeof cache)) Py_RETURN_NONE;
    const ZooEntry *e = plan_zoo_find(model);   /* a zoo name with --revision: its hub id (cli_model.c) */
    return Py_BuildValue("(ss)", e && e->hub_id ? e->hub_id : model, cache);
}

static PyMethodDef METHODS[] = {
    {"run", py_run, METH_VARARGS, run_doc},
    {"argv", py_argv, METH_VARARGS, argv_doc},
    {"config_format", py_config_format, METH_VARARGS, config_format_doc},
    {"hub_missing", py_hub_missing, METH_VARARGS, hub_missing_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "memplan._memplan",
                                    "memplan's planning front end, compiled in (see memplan/__init__.py).", -1, METHODS};

PyMODINIT_FUNC PyInit__memplan(void) {
    PyObject *m = PyModule_Create(&MODULE);
    if (m && PyModule_AddStringConstant(m, "VERSION", MEMPLAN_VERSION)) Py_CLEAR(m);
    return m;
}
