/* sparklog._columns: the records of one Kafka record batch (magic 2), decoded straight
 * into the buffers of Arrow columns and encoded straight from them (encode_records, below),
 * with no Python object per record.
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

/* one nullable bytes field (the key or the value) of record i into a binary column:
 * data appended at *len, offsets[i + 1] set, validity bit set or *nulls counted */
static int read_field(cursor *r, Py_ssize_t i, uint8_t *data, Py_ssize_t *len,
                      int32_t *offsets, uint8_t *validity, Py_ssize_t *nulls) {
    int64_t n;
    if (read_varint(r, 5, &n) || n < -1 || n > r->end - r->p) return -1;
    if (n >= 0) {
        memcpy(data + *len, r->p, (size_t)n);
        *len += n;
        r->p += n;
        validity[i >> 3] |= (uint8_t)(1u << (i & 7));
    } else {
        (*nulls)++;
    }
    offsets[i + 1] = (int32_t)*len;
    return 0;
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
        int64_t length, ts_delta, offset_delta, header_count;
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
        if (read_field(&r, i, kd, &klen, ko, kv, &knulls)
            || read_field(&r, i, vd, &vlen, vo, vv, &vnulls)) {
            status = 2; bad = i; break;
        }
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

/* ------------------------------------------------------------------------- encoding */

static int varint_size(uint64_t zz) {
    int n = 1;
    while (zz >= 0x80) { zz >>= 7; n++; }
    return n;
}

static uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

static uint8_t *write_varint(uint8_t *p, int64_t v) {
    uint64_t zz = zigzag(v);
    while (zz >= 0x80) { *p++ = (uint8_t)(zz | 0x80); zz >>= 7; }
    *p++ = (uint8_t)zz;
    return p;
}

static int is_valid(const Py_buffer *bitmap, Py_ssize_t i) {
    if (bitmap->buf == NULL) return 1;
    return (((const uint8_t *)bitmap->buf)[i >> 3] >> (i & 7)) & 1;
}

/* encode_records(offsets, timestamps, offsets_at, timestamps_at,
 *                key_validity, key_offsets, key_data, key_at,
 *                value_validity, value_offsets, value_data, value_at, start, stop)
 *
 * Rows [start, stop) of stored Arrow columns as the records section of one Kafka record
 * batch without headers (uncompressed), and its base and max timestamps:
 * (records bytes, base_timestamp, max_timestamp). ``offsets`` and ``timestamps`` are int64
 * data buffers; keys and values are binary arrays given as validity (None: no nulls),
 * int32 offsets and data buffers; each ``*_at`` is that array's own offset into its buffers.
 * Offset deltas are taken from the offsets column (compacted logs have gaps). */
static PyObject *encode_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer ob, tb, kvb = {0}, kob, kdb = {0}, vvb = {0}, vob, vdb = {0};
    PyObject *kv_o, *kd_o, *vv_o, *vd_o;
    Py_ssize_t o_at, t_at, k_at, v_at, start, stop;
    PyObject *result = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "y*y*nnOy*On" "Oy*Onnn", &ob, &tb, &o_at, &t_at,
                          &kv_o, &kob, &kd_o, &k_at, &vv_o, &vob, &vd_o, &v_at, &start, &stop))
        return NULL;
    int ok = 1;
    if (kv_o != Py_None && PyObject_GetBuffer(kv_o, &kvb, PyBUF_SIMPLE)) ok = 0;
    if (ok && kd_o != Py_None && PyObject_GetBuffer(kd_o, &kdb, PyBUF_SIMPLE)) ok = 0;
    if (ok && vv_o != Py_None && PyObject_GetBuffer(vv_o, &vvb, PyBUF_SIMPLE)) ok = 0;
    if (ok && vd_o != Py_None && PyObject_GetBuffer(vd_o, &vdb, PyBUF_SIMPLE)) ok = 0;
    if (!ok) goto done;
    Py_ssize_t n = stop - start;
    if (start < 0 || n <= 0
        || (o_at + stop) * 8 > ob.len || (t_at + stop) * 8 > tb.len
        || (k_at + stop + 1) * 4 > kob.len || (v_at + stop + 1) * 4 > vob.len
        || (kvb.buf && (k_at + stop + 7) / 8 > kvb.len)
        || (vvb.buf && (v_at + stop + 7) / 8 > vvb.len)) {
        PyErr_SetString(PyExc_ValueError, "rows out of the columns' buffers");
        goto done;
    }
    const int64_t *offs = (const int64_t *)ob.buf + o_at;
    const int64_t *ts = (const int64_t *)tb.buf + t_at;
    const int32_t *ko = (const int32_t *)kob.buf + k_at;
    const int32_t *vo = (const int32_t *)vob.buf + v_at;
    const uint8_t *kd = (const uint8_t *)kdb.buf, *vd = (const uint8_t *)vdb.buf;
    int64_t kbytes = (int64_t)ko[stop] - ko[start], vbytes = (int64_t)vo[stop] - vo[start];
    if (kbytes < 0 || vbytes < 0 || (kbytes && (!kd || ko[stop] > kdb.len))
        || (vbytes && (!vd || vo[stop] > vdb.len))) {
        PyErr_SetString(PyExc_ValueError, "key or value offsets out of their data buffers");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, 40 * n + kbytes + vbytes);
    if (!out) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    int64_t base_offset = offs[start], base_ts = ts[start], max_ts = ts[start];
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = start; i < stop; i++) {
        int64_t tsd = ts[i] - base_ts, od = offs[i] - base_offset;
        if (ts[i] > max_ts) max_ts = ts[i];
        int kvalid = is_valid(&kvb, k_at + i), vvalid = is_valid(&vvb, v_at + i);
        int64_t kl = kvalid ? (int64_t)ko[i + 1] - ko[i] : -1;
        int64_t vl = vvalid ? (int64_t)vo[i + 1] - vo[i] : -1;
        int64_t body = 1 + varint_size(zigzag(tsd)) + varint_size(zigzag(od))
                       + varint_size(zigzag(kl)) + (kl > 0 ? kl : 0)
                       + varint_size(zigzag(vl)) + (vl > 0 ? vl : 0) + 1;
        p = write_varint(p, body);
        *p++ = 0; /* attributes */
        p = write_varint(p, tsd);
        p = write_varint(p, od);
        p = write_varint(p, kl);
        if (kl > 0) { memcpy(p, kd + ko[i], (size_t)kl); p += kl; }
        p = write_varint(p, vl);
        if (vl > 0) { memcpy(p, vd + vo[i], (size_t)vl); p += vl; }
        *p++ = 0; /* no headers */
    }
    Py_END_ALLOW_THREADS
    if (_PyBytes_Resize(&out, (Py_ssize_t)(p - (uint8_t *)PyBytes_AS_STRING(out)))) goto done;
    result = Py_BuildValue("(OLL)", out, (long long)base_ts, (long long)max_ts);
done:
    Py_XDECREF(out);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&kob);
    PyBuffer_Release(&vob);
    if (kvb.obj) PyBuffer_Release(&kvb);
    if (kdb.obj) PyBuffer_Release(&kdb);
    if (vvb.obj) PyBuffer_Release(&vvb);
    if (vdb.obj) PyBuffer_Release(&vdb);
    return result;
}

/* arange(base, n, width=8): the buffer of an int64 (width 8) or int32 (width 4, values
 * wrapping at 2^31 to 0, as a producer's sequences do) array base, base + 1, ...,
 * base + n - 1: a segment's offsets and sequences columns, where a compute kernel's call
 * costs more than the work. */
static PyObject *arange(PyObject *Py_UNUSED(self), PyObject *args) {
    long long base;
    Py_ssize_t n;
    int width = 8;
    if (!PyArg_ParseTuple(args, "Ln|i", &base, &n, &width)) return NULL;
    if (n < 0 || (width != 8 && width != 4) || n > PY_SSIZE_T_MAX / width)
        return PyErr_Format(PyExc_ValueError, "arange of %zd values of width %d", n, width);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * width);
    if (!out) return NULL;
    if (width == 8) {
        int64_t *p = (int64_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) p[i] = (int64_t)base + i;
    } else {
        int32_t *p = (int32_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) p[i] = (int32_t)(((int64_t)base + i) & 0x7fffffff);
    }
    return out;
}

/* max_int64(buffer, offset, n): the largest of int64 values [offset, offset + n) of an
 * array's data buffer (no nulls); -2^63 when n is 0. */
static PyObject *max_int64(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &offset, &n)) return NULL;
    if (offset < 0 || n < 0 || offset > view.len / 8 || n > view.len / 8 - offset) {
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "values [%zd, %zd) are outside the buffer",
                            offset, offset + n);
    }
    const int64_t *p = (const int64_t *)view.buf + offset;
    int64_t m = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) if (p[i] > m) m = p[i];
    PyBuffer_Release(&view);
    return PyLong_FromLongLong(m);
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(records, count, base_timestamp, log_append_time, max_timestamp): the "
     "Arrow column buffers of a record batch's records, None if a record has headers."},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(...): rows of stored Arrow columns as a record batch's records section "
     "(no headers), with its base and max timestamps."},
    {"arange", arange, METH_VARARGS,
     "arange(base, n, width=8): the int64 (or int32, wrapping at 2^31) buffer base, "
     "base + 1, ..., base + n - 1."},
    {"max_int64", max_int64, METH_VARARGS,
     "max_int64(buffer, offset, n): the largest int64 of values [offset, offset + n)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
