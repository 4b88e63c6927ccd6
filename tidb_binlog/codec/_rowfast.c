/* tidb_binlog.codec._rowfast: the drainer's old-format row decoder in C.
 *
 * decode_old_args(buf, off, plan, tz, pairs) -> (old, new) gives exactly what
 * tidb_binlog.codec.row_args._decode_old_args_py gives, errors included.  It reads
 * itself only the columns of the three fast cases of row_args (a column id stored as
 * a varint datum, then: compact bytes of a text column -> str, or bytes when not
 * UTF-8; compact bytes of a binary column -> bytes; a varint of a signed integer
 * column -> int) and skips the columns the plan does not name when their datum is
 * simple to cut.  Every other column (other types or encodings, NULLs, a repeated
 * column id, anything malformed or truncated) is handed, whole, to the Python loop
 * row_args._old_args_loop for one step, from the column id on: so the result or the
 * exception is the reference's own.  This loop never raises a codec error itself;
 * it only decides, per column, "mine" (then it must agree with Python) or "Python's".
 *
 * set_callbacks(loop, reference) is called once by row_args at import: ``loop`` is
 * _old_args_loop(buf, off, plan, tz, pairs, old, new, steps) -> offset and
 * ``reference`` is _decode_old_args_py, used whole for arguments this loop does not
 * expect (a buf that is not exactly bytes, a negative offset, a non-bool pairs...).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* ArgPlan codes (row_args: _OTHER, _TEXT, _BINARY, _SINT) */
#define CODE_TEXT 1
#define CODE_BINARY 2
#define CODE_SINT 3

/* datum flags (datum_codec) */
#define NIL_FLAG 0x00
#define COMPACT_BYTES_FLAG 0x02
#define INT_FLAG 0x03
#define UINT_FLAG 0x04
#define FLOAT_FLAG 0x05
#define DURATION_FLAG 0x07
#define VARINT_FLAG 0x08
#define UVARINT_FLAG 0x09
#define MAX_FLAG 0xFA

static PyObject *loop_fn = NULL;      /* row_args._old_args_loop */
static PyObject *reference_fn = NULL; /* row_args._decode_old_args_py */
static PyObject *str_columns = NULL;  /* "columns" */
static PyObject *one = NULL;          /* 1: one step of the Python loop */

/* Go's binary.Uvarint, as primitives.read_uvarint accepts it: the number of bytes
 * read (1..10), or 0 when the varint is truncated or overflows 64 bits. */
static inline Py_ssize_t
read_uvarint(const unsigned char *p, Py_ssize_t avail, uint64_t *out)
{
    uint64_t x = 0;
    unsigned shift = 0;
    Py_ssize_t i;
    for (i = 0; i < avail && i < 10; i++) {
        unsigned char b = p[i];
        if (b < 0x80) {
            if (i == 9 && b > 1)
                return 0;
            *out = x | ((uint64_t)b << shift);
            return i + 1;
        }
        x |= (uint64_t)(b & 0x7F) << shift;
        shift += 7;
    }
    return 0;
}

static inline int64_t
unzigzag(uint64_t ux)
{
    return (int64_t)(ux >> 1) ^ -(int64_t)(ux & 1);
}

/* datum_codec._cut_at for the datums it cuts without doing more than this: the
 * offset just after the datum at p, or -1 (the Python loop decides: other flags,
 * or bytes that do not hold the datum). */
static Py_ssize_t
cut_at(const unsigned char *s, Py_ssize_t p, Py_ssize_t n)
{
    uint64_t ux;
    Py_ssize_t k, q, end;
    int64_t length;
    if (p >= n)
        return -1;
    q = p + 1;
    switch (s[p]) {
    case NIL_FLAG:
    case MAX_FLAG:
        end = q;
        break;
    case INT_FLAG:
    case UINT_FLAG:
    case FLOAT_FLAG:
    case DURATION_FLAG:
        if (n - q < 8)
            return -1;
        end = q + 8;
        break;
    case VARINT_FLAG:
    case UVARINT_FLAG:
        k = read_uvarint(s + q, n - q, &ux);
        if (k == 0)
            return -1;
        end = q + k;
        break;
    case COMPACT_BYTES_FLAG:
        k = read_uvarint(s + q, n - q, &ux);
        if (k == 0)
            return -1;
        length = unzigzag(ux);
        q += k;
        if (length < 0 || length > (int64_t)(n - q))
            return -1;
        end = q + (Py_ssize_t)length;
        break;
    default:
        return -1;
    }
    return end <= n ? end : -1;
}

/* One column read here: 1 done (*off advanced), 0 for the Python loop, -1 error set. */
static int
fast_column(const unsigned char *s, Py_ssize_t n, Py_ssize_t *off, PyObject *columns,
            int pairs, PyObject *old, PyObject *new)
{
    Py_ssize_t p = *off, k;
    uint64_t ux;
    int64_t cid;
    PyObject *key, *entry, *item, *target, *value;
    long code;
    int has;
    unsigned char flag;

    /* the column id: a varint datum (the Python loop reads buf[off + 1] first) */
    if (n - p < 2 || s[p] != VARINT_FLAG)
        return 0;
    k = read_uvarint(s + p + 1, n - p - 1, &ux);
    if (k == 0)
        return 0;
    cid = unzigzag(ux);
    p += 1 + k;

    key = PyLong_FromLongLong(cid);
    if (key == NULL)
        return -1;
    entry = PyDict_GetItemWithError(columns, key); /* borrowed */
    if (entry == NULL) {
        Py_DECREF(key);
        if (PyErr_Occurred())
            return -1;
        p = cut_at(s, p, n); /* a column the plan does not name */
        if (p < 0)
            return 0;
        *off = p;
        return 1;
    }
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 1)
        goto python;
    item = PyTuple_GET_ITEM(entry, 0);
    if (!PyLong_CheckExact(item))
        goto python;
    code = PyLong_AsLong(item);
    if (code == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* not one of the codes: the Python loop reads it */
        goto python;
    }
    if (code != CODE_TEXT && code != CODE_BINARY && code != CODE_SINT)
        goto python;

    /* a repeated column id: the new row of a pair, or an error the Python loop names */
    has = PyDict_Contains(old, key);
    if (has < 0)
        goto error;
    if (has) {
        if (!pairs)
            goto python;
        has = PyDict_Contains(new, key);
        if (has < 0)
            goto error;
        if (has)
            goto python;
        target = new;
    }
    else {
        target = old;
    }

    if (p >= n)
        goto python;
    flag = s[p];
    if (flag == COMPACT_BYTES_FLAG && (code == CODE_TEXT || code == CODE_BINARY)) {
        int64_t length;
        const char *raw;
        k = read_uvarint(s + p + 1, n - p - 1, &ux);
        if (k == 0)
            goto python;
        length = unzigzag(ux);
        p += 1 + k;
        if (length < 0 || length > (int64_t)(n - p))
            goto python;
        raw = (const char *)s + p;
        if (code == CODE_TEXT) {
            value = PyUnicode_DecodeUTF8(raw, (Py_ssize_t)length, NULL);
            if (value == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto error;
                PyErr_Clear(); /* not UTF-8: the raw bytes, as row_args does */
                value = PyBytes_FromStringAndSize(raw, (Py_ssize_t)length);
            }
        }
        else {
            value = PyBytes_FromStringAndSize(raw, (Py_ssize_t)length);
        }
        p += (Py_ssize_t)length;
    }
    else if (flag == VARINT_FLAG && code == CODE_SINT) {
        k = read_uvarint(s + p + 1, n - p - 1, &ux);
        if (k == 0)
            goto python;
        value = PyLong_FromLongLong(unzigzag(ux));
        p += 1 + k;
    }
    else {
        goto python;
    }
    if (value == NULL)
        goto error;
    if (PyDict_SetItem(target, key, value) < 0) {
        Py_DECREF(value);
        goto error;
    }
    Py_DECREF(value);
    Py_DECREF(key);
    *off = p;
    return 1;

python:
    Py_DECREF(key);
    return 0;
error:
    Py_DECREF(key);
    return -1;
}

/* One column by the Python loop, from the column id at *off. 0 or -1 (its error). */
static int
python_column(PyObject *const *args, Py_ssize_t n, Py_ssize_t *off, PyObject *old,
              PyObject *new)
{
    PyObject *at, *res, *call[8];
    Py_ssize_t next;
    at = PyLong_FromSsize_t(*off);
    if (at == NULL)
        return -1;
    call[0] = args[0]; /* buf */
    call[1] = at;
    call[2] = args[2]; /* plan */
    call[3] = args[3]; /* tz */
    call[4] = args[4]; /* pairs */
    call[5] = old;
    call[6] = new;
    call[7] = one;
    res = PyObject_Vectorcall(loop_fn, call, 8, NULL);
    Py_DECREF(at);
    if (res == NULL)
        return -1;
    next = PyLong_AsSsize_t(res);
    Py_DECREF(res);
    if (next == -1 && PyErr_Occurred())
        return -1;
    if (next <= *off) {
        PyErr_Format(PyExc_SystemError,
                     "_old_args_loop did not advance past offset %zd of a %zd-byte row",
                     *off, n);
        return -1;
    }
    *off = next;
    return 0;
}

static PyObject *
decode_old_args(PyObject *Py_UNUSED(module), PyObject *const *args, size_t nargsf,
                PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *buf, *columns, *old = NULL, *new = NULL, *result;
    const unsigned char *s;
    Py_ssize_t n, off;
    int pairs, r;

    if (loop_fn == NULL || reference_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "_rowfast.set_callbacks was not called (import "
                        "tidb_binlog.codec.row_args)");
        return NULL;
    }
    if (nargs != 5 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0))
        goto reference;
    buf = args[0];
    if (!PyBytes_CheckExact(buf) || !PyLong_CheckExact(args[1]))
        goto reference;
    if (args[4] == Py_True)
        pairs = 1;
    else if (args[4] == Py_False)
        pairs = 0;
    else
        goto reference;
    off = PyLong_AsSsize_t(args[1]);
    if (off == -1 && PyErr_Occurred()) {
        PyErr_Clear(); /* out of range: the reference says what that does */
        goto reference;
    }
    if (off < 0)
        goto reference;
    columns = PyObject_GetAttr(args[2], str_columns);
    if (columns == NULL)
        return NULL;
    if (!PyDict_CheckExact(columns)) {
        Py_DECREF(columns);
        goto reference;
    }

    s = (const unsigned char *)PyBytes_AS_STRING(buf);
    n = PyBytes_GET_SIZE(buf);
    old = PyDict_New();
    if (old == NULL)
        goto error;
    new = PyDict_New();
    if (new == NULL)
        goto error;
    while (off < n) {
        r = fast_column(s, n, &off, columns, pairs, old, new);
        if (r == 0)
            r = python_column(args, n, &off, old, new);
        if (r < 0)
            goto error;
    }
    Py_DECREF(columns);
    result = PyTuple_Pack(2, old, new);
    Py_DECREF(old);
    Py_DECREF(new);
    return result;

error:
    Py_DECREF(columns);
    Py_XDECREF(old);
    Py_XDECREF(new);
    return NULL;
reference:
    return PyObject_Vectorcall(reference_fn, args, nargs, kwnames);
}

static PyObject *
set_callbacks(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "set_callbacks(loop, reference) takes two callables");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(loop_fn, args[0]);
    Py_INCREF(args[1]);
    Py_XSETREF(reference_fn, args[1]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_old_args", (PyCFunction)(void (*)(void))decode_old_args,
     METH_FASTCALL | METH_KEYWORDS,
     "decode_old_args(buf, off, plan, tz, pairs) -> (old, new): the old-format row at "
     "buf[off:] as SQL arguments, as row_args._decode_old_args_py."},
    {"set_callbacks", (PyCFunction)(void (*)(void))set_callbacks, METH_FASTCALL,
     "set_callbacks(loop, reference): row_args._old_args_loop (one column at a time) and "
     "row_args._decode_old_args_py (whole calls this module does not expect)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "tidb_binlog.codec._rowfast",
    "The old-format row decoder of tidb_binlog.codec.row_args, in C.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__rowfast(void)
{
    if (str_columns == NULL) {
        str_columns = PyUnicode_InternFromString("columns");
        if (str_columns == NULL)
            return NULL;
    }
    if (one == NULL) {
        one = PyLong_FromLong(1);
        if (one == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
