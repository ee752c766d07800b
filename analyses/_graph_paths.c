/* Longest paths over the dependency graph of the critical-path analysis (analyses/paths.py).
 *
 * The graph is given by its incoming edges in CSR form: node v's predecessors are
 * src[offsets[v] .. offsets[v+1]) with lags lag[...]. Three functions, each one pass over the
 * nodes and edges (linear time, no allocation per node):
 *
 *   topological_order(offsets, src, order_out) -> nodes left in cycles (placed last, by index)
 *   relax(order, offsets, src, lag, times)      times[v] = max(times[u] + lag) over v's edges,
 *                                               in topological order; a node without edges keeps
 *                                               its time (an anchor)
 *   walk(binding, times, ends, starts, out)     -> number written: for each window, the nodes from
 *                                               ends[w] back along binding[] while times > starts[w],
 *                                               then the first node at or before it (or -1), each
 *                                               window's run followed by -2
 *
 * Arrays are int64 buffers (numpy arrays); outputs are written in place. The pure-Python
 * equivalents in analyses/paths.py are used when this extension was not built.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int get(PyObject *obj, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(obj, view, writable ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->itemsize != 8 && view->len > 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "int64 arrays expected");
        return -1;
    }
    return 0;
}

static PyObject *topological_order(PyObject *self, PyObject *args) {
    PyObject *o_off, *o_src, *o_out;
    Py_buffer b_off, b_src, b_out;
    if (!PyArg_ParseTuple(args, "OOO", &o_off, &o_src, &o_out)) return NULL;
    if (get(o_off, &b_off, 0) < 0) return NULL;
    if (get(o_src, &b_src, 0) < 0) { PyBuffer_Release(&b_off); return NULL; }
    if (get(o_out, &b_out, 1) < 0) { PyBuffer_Release(&b_off); PyBuffer_Release(&b_src); return NULL; }
    const int64_t *off = b_off.buf, *src = b_src.buf;
    int64_t *out = b_out.buf;
    Py_ssize_t n = b_off.len / 8 - 1, m = b_src.len / 8;
    Py_ssize_t left = 0;
    if (n > 0 && b_out.len / 8 >= n) {
        /* successors in CSR form, from the predecessors */
        int64_t *succ_off = calloc((size_t)n + 1, sizeof(int64_t));
        int64_t *succ = malloc(((size_t)m + 1) * sizeof(int64_t));
        int64_t *indeg = malloc((size_t)n * sizeof(int64_t));
        char *done = calloc((size_t)n, 1);
        if (!succ_off || !succ || !indeg || !done) {
            free(succ_off); free(succ); free(indeg); free(done);
            PyBuffer_Release(&b_off); PyBuffer_Release(&b_src); PyBuffer_Release(&b_out);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t e = 0; e < m; e++) succ_off[src[e] + 1]++;
        for (Py_ssize_t v = 0; v < n; v++) succ_off[v + 1] += succ_off[v];
        int64_t *fill = malloc((size_t)n * sizeof(int64_t));
        if (!fill) {
            free(succ_off); free(succ); free(indeg); free(done);
            PyBuffer_Release(&b_off); PyBuffer_Release(&b_src); PyBuffer_Release(&b_out);
            return PyErr_NoMemory();
        }
        memcpy(fill, succ_off, (size_t)n * sizeof(int64_t));
        for (Py_ssize_t v = 0; v < n; v++) {
            indeg[v] = off[v + 1] - off[v];
            for (int64_t e = off[v]; e < off[v + 1]; e++) succ[fill[src[e]]++] = v;
        }
        free(fill);
        /* Kahn's algorithm; ``out`` doubles as the queue */
        Py_ssize_t head = 0, tail = 0;
        for (Py_ssize_t v = 0; v < n; v++) if (indeg[v] == 0) out[tail++] = v;
        while (head < tail) {
            int64_t u = out[head++];
            done[u] = 1;
            for (int64_t e = succ_off[u]; e < succ_off[u + 1]; e++)
                if (--indeg[succ[e]] == 0) out[tail++] = succ[e];
        }
        left = n - tail;
        for (Py_ssize_t v = 0; v < n && tail < n; v++) if (!done[v] && indeg[v] > 0) out[tail++] = v;
        free(succ_off); free(succ); free(indeg); free(done);
    }
    PyBuffer_Release(&b_off); PyBuffer_Release(&b_src); PyBuffer_Release(&b_out);
    return PyLong_FromSsize_t(left);
}

static PyObject *relax(PyObject *self, PyObject *args) {
    PyObject *o_order, *o_off, *o_src, *o_lag, *o_t;
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o_order, &o_off, &o_src, &o_lag, &o_t)) return NULL;
    PyObject *objs[5] = {o_order, o_off, o_src, o_lag, o_t};
    for (int i = 0; i < 5; i++) {
        if (get(objs[i], &b[i], i == 4) < 0) {
            for (int j = 0; j < i; j++) PyBuffer_Release(&b[j]);
            return NULL;
        }
    }
    const int64_t *order = b[0].buf, *off = b[1].buf, *src = b[2].buf, *lag = b[3].buf;
    int64_t *t = b[4].buf;
    Py_ssize_t n = b[0].len / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t v = order[i];
        if (off[v + 1] == off[v]) continue;  /* an anchor keeps its time */
        int64_t best = INT64_MIN;
        for (int64_t e = off[v]; e < off[v + 1]; e++) {
            int64_t x = t[src[e]] + lag[e];
            if (x > best) best = x;
        }
        t[v] = best;
    }
    for (int i = 0; i < 5; i++) PyBuffer_Release(&b[i]);
    Py_RETURN_NONE;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *o_bind, *o_t, *o_ends, *o_starts, *o_out;
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o_bind, &o_t, &o_ends, &o_starts, &o_out)) return NULL;
    PyObject *objs[5] = {o_bind, o_t, o_ends, o_starts, o_out};
    for (int i = 0; i < 5; i++) {
        if (get(objs[i], &b[i], i == 4) < 0) {
            for (int j = 0; j < i; j++) PyBuffer_Release(&b[j]);
            return NULL;
        }
    }
    const int64_t *bind = b[0].buf, *t = b[1].buf, *ends = b[2].buf, *starts = b[3].buf;
    int64_t *out = b[4].buf;
    Py_ssize_t windows = b[2].len / 8, cap = b[4].len / 8, k = 0, n = b[0].len / 8;
    for (Py_ssize_t w = 0; w < windows; w++) {
        int64_t v = ends[w];
        Py_ssize_t steps = 0;
        while (v >= 0 && t[v] > starts[w] && steps <= n) {
            if (k >= cap) goto full;
            out[k++] = v;
            v = bind[v];
            steps++;
        }
        if (k + 2 > cap) goto full;
        out[k++] = v;
        out[k++] = -2;
    }
    for (int i = 0; i < 5; i++) PyBuffer_Release(&b[i]);
    return PyLong_FromSsize_t(k);
full:
    for (int i = 0; i < 5; i++) PyBuffer_Release(&b[i]);
    return PyLong_FromSsize_t(-1);  /* the caller retries with a larger buffer */
}

static PyMethodDef methods[] = {
    {"topological_order", topological_order, METH_VARARGS, "Topological order of a DAG given by its incoming edges."},
    {"relax", relax, METH_VARARGS, "Longest-path times in topological order."},
    {"walk", walk, METH_VARARGS, "The binding chains of windows, back from their ends."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_graph_paths", NULL, -1, methods};

PyMODINIT_FUNC PyInit__graph_paths(void) { return PyModule_Create(&module); }
