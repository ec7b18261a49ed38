/* sparklog._columns: the records of one Kafka record batch (magic 2), decoded straight
 * into the buffers of Arrow columns, with no Python object per record.
 *
 *   decode_records(records, count, base_timestamp, log_append_time, max_timestamp)
 *
 * ``records`` is the uncompressed records section of a batch (what follows its 61-byte
 * header). Each record is, in Kafka's format (varints zigzag-encoded, as in protobuf):
 *
 *   length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
 *   keyLength varint (-1: null) | key | valueLength varint (-1: null) | value |
 *   headerCount varint | headers (keyLength varint, key, valueLength varint, value)...
 *
 * Returns None when a record has headers (the caller decodes that batch record by record);
 * otherwise a tuple of bytes objects, the buffers of Arrow arrays of ``count`` rows:
 *
 *   (timestamps int64[count],
 *    key_offsets int32[count + 1], key_data, key_validity bitmap or None, key_nulls,
 *    value_offsets int32[count + 1], value_data, value_validity or None, value_nulls)
 *
 * Timestamps are base_timestamp + delta, or max_timestamp for every record of a
 * LogAppendTime batch (what aiokafka's decoder and Kafka's clients read). ValueError when
 * the bytes are not ``count`` well-formed records that fill ``records`` exactly: a record
 * whose fields overrun it or its stated length, a key or value length below -1, a negative
 * header count, a varint longer than its type, bytes left over.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} cursor;

/* a zigzag varint of at most max_bytes bytes (5 for int32, 10 for int64) */
static int read_varint(cursor *c, int max_bytes, int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end) return -1;
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (~(v & 1) + 1));
            return 0;
        }
        shift += 7;
    }
    return -2;
}

static PyObject *corrupt(const char *what, Py_ssize_t index) {
    PyErr_Format(PyExc_ValueError, "record %zd: %s", index, what);
    return NULL;
}

static PyObject *decode_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t count;
    long long base_ts, max_ts;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*nLpL", &view, &count, &base_ts, &log_append, &max_ts))
        return NULL;
    PyObject *result = NULL;
    PyObject *ts = NULL, *koff = NULL, *kdata = NULL, *kvalid = NULL;
    PyObject *voff = NULL, *vdata = NULL, *vvalid = NULL;
    if (count < 0 || count > view.len) {  /* every record takes at least one byte */
        PyErr_Format(PyExc_ValueError, "%zd records cannot fit in %zd bytes", count, view.len);
        goto done;
    }
    Py_ssize_t bitmap = (count + 7) / 8;
    ts = PyBytes_FromStringAndSize(NULL, count * 8);
    koff = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    voff = PyBytes_FromStringAndSize(NULL, (count + 1) * 4);
    kdata = PyBytes_FromStringAndSize(NULL, view.len);
    vdata = PyBytes_FromStringAndSize(NULL, view.len);
    kvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    vvalid = PyBytes_FromStringAndSize(NULL, bitmap);
    if (!ts || !koff || !voff || !kdata || !vdata || !kvalid || !vvalid) goto done;
    int64_t *tsp = (int64_t *)PyBytes_AS_STRING(ts);
    int32_t *ko = (int32_t *)PyBytes_AS_STRING(koff), *vo = (int32_t *)PyBytes_AS_STRING(voff);
    uint8_t *kd = (uint8_t *)PyBytes_AS_STRING(kdata), *vd = (uint8_t *)PyBytes_AS_STRING(vdata);
    uint8_t *kv = (uint8_t *)PyBytes_AS_STRING(kvalid), *vv = (uint8_t *)PyBytes_AS_STRING(vvalid);
    memset(kv, 0, bitmap);
    memset(vv, 0, bitmap);
    Py_ssize_t knulls = 0, vnulls = 0, klen = 0, vlen = 0;
    int status = 0; /* 0 decoded, 1 a record has headers, 2 malformed record ``bad`` */
    Py_ssize_t bad = 0;
    cursor c = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    ko[0] = vo[0] = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, n, header_count;
        if (read_varint(&c, 5, &length) || length < 0 || length > c.end - c.p) {
            status = 2; bad = i; break;
        }
        cursor r = {c.p, c.p + length};
        c.p += length;
        if (r.p >= r.end) { status = 2; bad = i; break; }
        r.p++;  /* attributes: unused in magic 2 */
        if (read_varint(&r, 10, &ts_delta) || read_varint(&r, 5, &offset_delta)) {
            status = 2; bad = i; break;
        }
        tsp[i] = log_append ? max_ts : base_ts + ts_delta;
        /* key */
        if (read_varint(&r, 5, &n) || n < -1 || n > r.end - r.p) { status = 2; bad = i; break; }
        if (n >= 0) {
            memcpy(kd + klen, r.p, (size_t)n);
            klen += n;
            r.p += n;
            kv[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            knulls++;
        }
        ko[i + 1] = (int32_t)klen;
        /* value */
        if (read_varint(&r, 5, &n) || n < -1 || n > r.end - r.p) { status = 2; bad = i; break; }
        if (n >= 0) {
            memcpy(vd + vlen, r.p, (size_t)n);
            vlen += n;
            r.p += n;
            vv[i >> 3] |= (uint8_t)(1u << (i & 7));
        } else {
            vnulls++;
        }
        vo[i + 1] = (int32_t)vlen;
        if (read_varint(&r, 5, &header_count) || header_count < 0) {
            status = 2; bad = i; break;
        }
        if (header_count > 0) { status = 1; break; }
        if (r.p != r.end) { status = 2; bad = i; break; }
    }
    Py_END_ALLOW_THREADS
    if (status == 1) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (status == 2) {
        corrupt("malformed (a field overruns the record or the batch, or the record's "
                "length does not match its fields)", bad);
        goto done;
    }
    if (c.p != c.end) {
        PyErr_Format(PyExc_ValueError, "%zd bytes left after all %zd records",
                     (Py_ssize_t)(c.end - c.p), count);
        goto done;
    }
    if (_PyBytes_Resize(&kdata, klen) || _PyBytes_Resize(&vdata, vlen)) goto done;
    result = Py_BuildValue("(OOOOnOOOn)", ts, koff, kdata, knulls ? kvalid : Py_None, knulls,
                           voff, vdata, vnulls ? vvalid : Py_None, vnulls);
done:
    Py_XDECREF(ts);
    Py_XDECREF(koff);
    Py_XDECREF(kdata);
    Py_XDECREF(kvalid);
    Py_XDECREF(voff);
    Py_XDECREF(vdata);
    Py_XDECREF(vvalid);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(records, count, base_timestamp, log_append_time, max_timestamp): the "
     "Arrow column buffers of a record batch's records, None if a record has headers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
