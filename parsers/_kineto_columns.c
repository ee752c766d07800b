/*
 * Native column decoder for the Kineto parser (traceview.parsers.kineto, private to it).
 *
 * decode_chunk(buf, start, end) scans the events in buf[start:end] (JSON objects separated by
 * commas and whitespace, no brackets: the range the parser hands msgspec) and fills one column
 * per field the parser reads, without building a Python object per event. It returns None
 * ("not for me") whenever the chunk holds anything outside the subset it handles exactly as the
 * msgspec path would (invalid JSON, a value of another type than the typed decoder expects, a
 * duplicated known key, nesting deeper than MAX_DEPTH, a string the strict UTF-8 decoder
 * rejects, ...): the caller then decodes the chunk with msgspec, which says what is wrong.
 * Every read is bounds-checked against `end`; every loop advances the cursor or stops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define MAX_NUMBER_TEXT 400

/* ------------------------------------------------------------------ growable vectors */

typedef struct {
    char *data;
    size_t len, cap; /* bytes */
} Vec;

static int vec_reserve(Vec *v, size_t extra) {
    if (v->len + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 4096;
    while (cap < v->len + extra) cap *= 2;
    char *data = PyMem_Realloc(v->data, cap);
    if (!data) { PyErr_NoMemory(); return -1; }
    v->data = data;
    v->cap = cap;
    return 0;
}

/* Inlined everywhere: the sizes are constants (4, 8 bytes), so the copy is one store, not a
 * call to memcpy per value. */
__attribute__((always_inline)) static inline int vec_push(Vec *v, const void *item, size_t size) {
    if (size == 0) return 0; /* (memcpy with a null destination is undefined even for 0 bytes) */
    if (v->len + size > v->cap && vec_reserve(v, size) < 0) return -1;
    memcpy(v->data + v->len, item, size);
    v->len += size;
    return 0;
}

/* ------------------------------------------------------------------ string interning */

typedef struct {
    uint64_t hash;
    size_t offset, len; /* bytes in the arena */
    int32_t code;
} Slot;

typedef struct {
    Slot *slots;
    size_t size, used; /* size: a power of two */
    Vec arena;
    PyObject *strings; /* list of the unique str, code = index */
} Interner;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x100000001B3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
    return h ^ (h >> 32);
}

/* Empty slots have code -1; PyMem_Calloc gives 0, so slots are initialised explicitly. */
static int interner_resize(Interner *t) {
    size_t size = t->size ? t->size * 2 : 256;
    Slot *slots = PyMem_Malloc(size * sizeof(Slot));
    if (!slots) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < size; i++) slots[i].code = -1;
    for (size_t i = 0; i < t->size; i++) {
        if (t->slots[i].code < 0) continue;
        size_t j = t->slots[i].hash & (size - 1);
        while (slots[j].code >= 0) j = (j + 1) & (size - 1);
        slots[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->size = size;
    return 0;
}

/* The code of the UTF-8 text s[0:n]: 0.. on success, -1 when it is not valid UTF-8 (no error
 * set: the chunk falls back), -2 on a Python error. */
static int32_t intern(Interner *t, const char *s, size_t n) {
    if ((t->used + 1) * 2 > t->size && interner_resize(t) < 0) return -2;
    uint64_t h = hash_bytes(s, n);
    size_t j = h & (t->size - 1);
    while (t->slots[j].code >= 0) {
        Slot *slot = &t->slots[j];
        if (slot->hash == h && slot->len == n && memcmp(t->arena.data + slot->offset, s, n) == 0) return slot->code;
        j = (j + 1) & (t->size - 1);
    }
    PyObject *str = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, "strict");
    if (!str) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return -1; }
        return -2;
    }
    int32_t code = (int32_t)PyList_GET_SIZE(t->strings);
    int failed = PyList_Append(t->strings, str);
    Py_DECREF(str);
    if (failed) return -2;
    size_t offset = t->arena.len;
    if (vec_push(&t->arena, s, n) < 0) return -2;
    t->slots[j].hash = h;
    t->slots[j].offset = offset;
    t->slots[j].len = n;
    t->slots[j].code = code;
    t->used++;
    return code;
}

/* ------------------------------------------------------------------ the scanner */

/* Results of a step: OK, NO (the chunk is not for the native path), ERR (a Python error). */
enum { OK = 0, NO = 1, ERR = 2 };

typedef struct {
    const char *base; /* buf */
    const char *p, *end;
    Interner strings;
    Vec scratch; /* unescaped string text */
} Scanner;

static inline void skip_ws(Scanner *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int hex4(const char *p, const char *end, uint32_t *out) {
    if (end - p < 4) return NO;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return NO;
    }
    *out = v;
    return OK;
}

static int put_utf8(Vec *v, uint32_t cp) {
    char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (char)(0xC0 | (cp >> 6)); b[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12)); b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18)); b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    return vec_push(v, b, n) < 0 ? ERR : OK;
}

/* One escape after the backslash at s->p; appends its text to `out` when given. */
static int escape(Scanner *s, Vec *out) {
    s->p++; /* the backslash */
    if (s->p >= s->end) return NO;
    char c = *s->p++;
    char plain;
    switch (c) {
    case '"': plain = '"'; break;
    case '\\': plain = '\\'; break;
    case '/': plain = '/'; break;
    case 'b': plain = '\b'; break;
    case 'f': plain = '\f'; break;
    case 'n': plain = '\n'; break;
    case 'r': plain = '\r'; break;
    case 't': plain = '\t'; break;
    case 'u': {
        uint32_t cp, low;
        if (hex4(s->p, s->end, &cp) != OK) return NO;
        s->p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return NO; /* a lone low surrogate */
        if (cp >= 0xD800 && cp <= 0xDBFF) {           /* a high one must be followed by a low one */
            if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u') return NO;
            if (hex4(s->p + 2, s->end, &low) != OK || low < 0xDC00 || low > 0xDFFF) return NO;
            s->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        return out ? put_utf8(out, cp) : OK;
    }
    default: return NO;
    }
    return out ? (vec_push(out, &plain, 1) < 0 ? ERR : OK) : OK;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Whether any byte of w is '"', '\\' or below 0x20 (exact for "any": the usual SWAR tests). */
static inline int special_byte(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    uint64_t zero_quote = (quote - ONES) & ~quote, zero_backslash = (backslash - ONES) & ~backslash;
    uint64_t control = (w - ONES * 0x20) & ~w;
    return ((zero_quote | zero_backslash | control) & HIGHS) != 0;
}

/* A string at s->p (its opening quote). With `text`, its decoded bytes are returned there
 * (pointing into buf when it has no escapes, else into the scratch vector). */
static int string(Scanner *s, const char **text, size_t *len, int *escaped) {
    s->p++; /* the quote */
    const char *first = s->p;
    while (s->p < s->end) {
        /* 16 or 8 bytes at a time while none is a quote, a backslash or a control character */
#ifdef __SSE2__
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), low = _mm_set1_epi8(0x1f);
        while (s->end - s->p >= 16) {
            __m128i w = _mm_loadu_si128((const __m128i *)s->p);
            /* a control character: an unsigned byte <= 0x1f, where max(w, 0x1f) == 0x1f */
            __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(w, low), low);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, backslash)), control);
            int mask = _mm_movemask_epi8(hit);
            if (mask) { s->p += __builtin_ctz((unsigned)mask); break; }
            s->p += 16;
        }
#endif
        while (s->end - s->p >= 8) {
            uint64_t w;
            memcpy(&w, s->p, 8);
            if (special_byte(w)) break;
            s->p += 8;
        }
        if (s->p >= s->end) break;
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') break;
        if (c == '\\') goto slow;
        if (c < 0x20) return NO;
        s->p++;
    }
    if (s->p >= s->end) return NO;
    if (text) { *text = first; *len = (size_t)(s->p - first); }
    if (escaped) *escaped = 0;
    s->p++;
    return OK;
slow:
    if (escaped) *escaped = 1;
    s->scratch.len = 0;
    if (text && vec_push(&s->scratch, first, (size_t)(s->p - first)) < 0) return ERR;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            if (text) { *text = s->scratch.data ? s->scratch.data : ""; *len = s->scratch.len; }
            return OK;
        }
        if (c == '\\') {
            int r = escape(s, text ? &s->scratch : NULL);
            if (r != OK) return r;
            continue;
        }
        if (c < 0x20) return NO;
        if (text && vec_push(&s->scratch, s->p, 1) < 0) return ERR;
        s->p++;
    }
    return NO;
}

static int string_code(Scanner *s, int32_t *code) {
    if (s->p >= s->end || *s->p != '"') return NO;
    const char *text;
    size_t len;
    int r = string(s, &text, &len, NULL);
    if (r != OK) return r;
    int32_t c = intern(&s->strings, text, len);
    if (c == -2) return ERR;
    if (c < 0) return NO;
    *code = c;
    return OK;
}

typedef struct {
    const char *text;
    size_t len;
    int is_int;      /* no fraction, no exponent */
    int fits_int64;  /* and within int64 */
    int64_t value;   /* when it fits */
    /* the text as mantissa * 10**-scale, when it has no exponent and at most 18 significant digits */
    int exact;
    uint64_t mantissa;
    int scale;
} Number;

/* A JSON number at s->p (RFC 8259 grammar). */
static int number(Scanner *s, Number *n) {
    const char *p = s->p, *end = s->end;
    n->text = p;
    n->value = 0;
    int negative = 0;
    if (p < end && *p == '-') { negative = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return NO;
    uint64_t mag = 0;
    int overflow = 0, digits = 0; /* significant digits (the integer part has no leading zero) */
    if (*p == '0') p++;
    else {
        while (p < end && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (mag > (UINT64_MAX - d) / 10) overflow = 1;
            else mag = mag * 10 + d;
            digits++;
            p++;
        }
    }
    n->is_int = 1;
    n->exact = !overflow && digits <= 18;
    n->mantissa = mag;
    n->scale = 0;
    if (p < end && *p == '.') {
        n->is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NO;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (!n->exact) continue;
            if (digits || *p != '0') digits++;
            if (digits > 18) { n->exact = 0; continue; } /* below 10**18: no uint64 overflow */
            n->mantissa = n->mantissa * 10 + (uint64_t)(*p - '0');
            n->scale++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->is_int = 0;
        n->exact = 0; /* an exponent: the general conversion */
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NO;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    n->len = (size_t)(p - s->p);
    n->fits_int64 = 0;
    if (n->is_int && !overflow) {
        if (!negative && mag <= (uint64_t)INT64_MAX) { n->fits_int64 = 1; n->value = (int64_t)mag; }
        else if (negative && mag <= (uint64_t)INT64_MAX + 1) {
            n->fits_int64 = 1;
            n->value = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        }
    }
    s->p = p;
    return OK;
}

static int literal(Scanner *s, const char *word, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return NO;
    s->p += n;
    return OK;
}

/* Skip any JSON value, validating it. */
static int skip_value(Scanner *s, int depth) {
    skip_ws(s);
    if (s->p >= s->end) return NO;
    char c = *s->p;
    if (c == '"') return string(s, NULL, NULL, NULL);
    if (c == '{' || c == '[') {
        if (depth >= MAX_DEPTH) return NO;
        char close = c == '{' ? '}' : ']';
        s->p++;
        skip_ws(s);
        if (s->p < s->end && *s->p == close) { s->p++; return OK; }
        for (;;) {
            int r;
            if (c == '{') {
                skip_ws(s);
                if (s->p >= s->end || *s->p != '"') return NO;
                if ((r = string(s, NULL, NULL, NULL)) != OK) return r;
                skip_ws(s);
                if (s->p >= s->end || *s->p != ':') return NO;
                s->p++;
            }
            if ((r = skip_value(s, depth + 1)) != OK) return r;
            skip_ws(s);
            if (s->p >= s->end) return NO;
            if (*s->p == ',') { s->p++; continue; }
            if (*s->p == close) { s->p++; return OK; }
            return NO;
        }
    }
    if (c == 't') return literal(s, "true", 4);
    if (c == 'f') return literal(s, "false", 5);
    if (c == 'n') return literal(s, "null", 4);
    Number n;
    return number(s, &n);
}

/* ------------------------------------------------------------------ the columns */

enum {
    /* int64 arg columns (those of _Args, then those of _MemoryArgs), default -1 but Bytes 0 */
    A_EXTERNAL_ID, A_EXTERNAL_ID_OLD, A_CORRELATION, A_STREAM, A_DEVICE, A_BYTES, A_IN_NELEMS, A_OUT_NELEMS,
    A_GROUP_SIZE, A_SEQUENCE_NUMBER, A_FWD_THREAD_ID, A_MEM_BYTES, A_TOTAL_ALLOCATED, A_TOTAL_RESERVED,
    A_DEVICE_ID, A_DEVICE_TYPE, A_ADDR, N_INT_ARGS
};
static const char *INT_ARG_KEYS[N_INT_ARGS] = {
    "External id", "external id", "correlation", "stream", "device", "bytes", "In msg nelems", "Out msg nelems",
    "Group size", "Sequence number", "Fwd thread id", "Bytes", "Total Allocated", "Total Reserved", "Device Id",
    "Device Type", "Addr"};
static const char *INT_ARG_COLUMNS[N_INT_ARGS] = {
    "external_id", "external_id_old", "correlation", "stream", "device", "bytes", "in_nelems", "out_nelems",
    "group_size", "sequence_number", "fwd_thread_id", "mem_bytes", "total_allocated", "total_reserved",
    "device_id", "device_type", "addr"};
enum { S_COLLECTIVE, S_DTYPE, S_PG_NAME, S_PG_RANKS, S_NAME, N_STR_ARGS };
static const char *STR_ARG_KEYS[N_STR_ARGS] = {"Collective name", "dtype", "Process Group Name",
                                               "Process Group Ranks", "name"};
static const char *STR_ARG_COLUMNS[N_STR_ARGS] = {"collective", "dtype", "pg_name", "pg_ranks", "arg_name"};
/* args kept as their raw JSON text (an op's recorded inputs, record_shapes=True; "Input dims" is
 * the 2021 spelling): the text is validated and interned like a string, Python decodes the
 * distinct texts */
enum { R_INPUT_DIMS, R_INPUT_DIMS_OLD, R_INPUT_TYPES, R_INPUT_STRIDES, R_CONCRETE_INPUTS, N_RAW_ARGS };
static const char *RAW_ARG_KEYS[N_RAW_ARGS] = {"Input Dims", "Input dims", "Input type", "Input Strides",
                                               "Concrete Inputs"};
static const char *RAW_ARG_COLUMNS[N_RAW_ARGS] = {"input_dims", "input_dims_old", "input_types", "input_strides",
                                                  "concrete_inputs"};
enum { E_PH, E_CAT, E_NAME, N_STR_FIELDS };
static const char *STR_FIELDS[N_STR_FIELDS] = {"ph", "cat", "name"};
enum { T_TS, T_DUR, N_TIMES };
static const char *TIME_FIELDS[N_TIMES] = {"ts", "dur"};

/* The first 8 bytes of a text k[0:n], zero-padded, as one little-endian integer (for comparing
 * short keys); `avail` bytes may be read from k. One 8-byte load when possible: a copy of n bytes
 * into a stack slot read back whole stalls the CPU (store forwarding). */
static inline uint64_t head8(const char *k, size_t n, size_t avail) {
    size_t m = n < 8 ? n : 8;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (avail >= 8) {
        uint64_t w;
        memcpy(&w, k, 8);
        return m == 8 ? w : w & ((1ULL << (8 * m)) - 1);
    }
#endif
    (void)avail;
    uint64_t h = 0;
    for (size_t i = 0; i < m; i++) h |= (uint64_t)(unsigned char)k[i] << (8 * i);
    return h;
}

/* Keys matched, their lengths computed once at import (key_index compares lengths first). */
#define N_ARG_NAMES (N_INT_ARGS + N_STR_ARGS + 2 + N_RAW_ARGS)
_Static_assert(N_ARG_NAMES <= 32, "args_object marks the keys it has seen in a uint32_t");
#define FIRST_RAW_ARG (N_INT_ARGS + N_STR_ARGS + 2)
static const char *ARG_NAMES[N_ARG_NAMES];
static size_t ARG_LENS[N_ARG_NAMES];
static uint64_t ARG_HEADS[N_ARG_NAMES];
#define N_EVENT_NAMES 10
static const char *EVENT_NAMES[N_EVENT_NAMES] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args"};
static size_t EVENT_LENS[N_EVENT_NAMES];
static uint64_t EVENT_HEADS[N_EVENT_NAMES];

static void init_key_tables(void) {
    for (int i = 0; i < N_INT_ARGS; i++) ARG_NAMES[i] = INT_ARG_KEYS[i];
    for (int i = 0; i < N_STR_ARGS; i++) ARG_NAMES[N_INT_ARGS + i] = STR_ARG_KEYS[i];
    ARG_NAMES[N_INT_ARGS + N_STR_ARGS] = "grid";
    ARG_NAMES[N_INT_ARGS + N_STR_ARGS + 1] = "block";
    for (int i = 0; i < N_RAW_ARGS; i++) ARG_NAMES[FIRST_RAW_ARG + i] = RAW_ARG_KEYS[i];
    for (int i = 0; i < N_ARG_NAMES; i++) {
        ARG_LENS[i] = strlen(ARG_NAMES[i]);
        ARG_HEADS[i] = head8(ARG_NAMES[i], ARG_LENS[i], ARG_LENS[i] + 1);
    }
    for (int i = 0; i < N_EVENT_NAMES; i++) {
        EVENT_LENS[i] = strlen(EVENT_NAMES[i]);
        EVENT_HEADS[i] = head8(EVENT_NAMES[i], EVENT_LENS[i], EVENT_LENS[i] + 1);
    }
}

/* Columns. Dense ones have a value per event; sparse ones (fields most events lack) an event
 * index and a value per event that has the field. Python turns them into the dense columns. */
enum { SP_ID, SP_ARGS, N_SPARSE_INT = SP_ARGS + N_INT_ARGS };         /* int64 values */
enum { SC_PID_TEXT, SC_TID_TEXT, SC_ID_TEXT, SC_ARGS, SC_RAW = SC_ARGS + N_STR_ARGS,
       N_SPARSE_CODE = SC_RAW + N_RAW_ARGS }; /* int32 codes */
static const char *SPARSE_CODE_NAMES[SC_ARGS] = {"pid_text", "tid_text", "id_text"};

typedef struct {
    Vec str_field[N_STR_FIELDS]; /* int32 codes */
    Vec pid, tid;                /* int64 (0 where written as text) */
    Vec time_value[N_TIMES];     /* 8 bytes: int64 (kind 1) or float64 (kind 2) */
    Vec time_kind[N_TIMES];      /* uint8: 0 absent, 1 an integer within int64, 2 another number */
    Vec time_off[N_TIMES];       /* int64 offset of the number text in buf, -1: absent */
    Vec time_len[N_TIMES];       /* uint16 */
    Vec time_ns[N_TIMES];        /* int64: exact nanoseconds where time_exact */
    Vec time_exact[N_TIMES];     /* uint8: 1 where the text gives the ns exactly (below) */
    Vec sparse_index[N_SPARSE_INT], sparse_value[N_SPARSE_INT];
    Vec code_index[N_SPARSE_CODE], code_value[N_SPARSE_CODE];
    Vec dims[2];                 /* grid, block: flat int64 values of the events that have them */
    Vec dims_index[2], dims_len[2]; /* int32: those events, and how many values each */
} Columns;

/* One event's dense fields before they are appended (sparse ones are appended as read). */
typedef struct {
    int32_t index;
    int32_t str_field[N_STR_FIELDS];
    int64_t pid, tid;
    uint64_t time_value[N_TIMES];
    uint8_t time_kind[N_TIMES];
    int64_t time_off[N_TIMES];
    uint16_t time_len[N_TIMES];
    int64_t time_ns[N_TIMES];
    uint8_t time_exact[N_TIMES];
} Event;

static inline int push_sparse(Vec *index, Vec *value, int32_t at, const void *v, size_t size) {
    return (vec_push(index, &at, 4) < 0 || vec_push(value, v, size) < 0) ? ERR : OK;
}

/* The index of key k[0:n] among names (lengths in lens, first 8 bytes in heads), or -1. */
static inline int key_index(const char *k, size_t n, size_t avail, const char *const *names, const size_t *lens,
                            const uint64_t *heads, int count) {
    uint64_t head = head8(k, n, avail);
    for (int i = 0; i < count; i++)
        if (lens[i] == n && heads[i] == head && (n <= 8 || memcmp(k + 8, names[i] + 8, n - 8) == 0)) return i;
    return -1;
}

/* A key at s->p: its raw text (a key with escapes is not for the native path: it could spell a
 * known key another way). */
static int object_key(Scanner *s, const char **k, size_t *n) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"') return NO;
    int escaped, r;
    if ((r = string(s, k, n, &escaped)) != OK) return r;
    if (escaped) return NO;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return NO;
    s->p++;
    skip_ws(s);
    return OK;
}

/* After a member: ',' (more follow, returns OK with *more = 1) or '}' (*more = 0). */
static int next_member(Scanner *s, int *more) {
    skip_ws(s);
    if (s->p >= s->end) return NO;
    if (*s->p == ',') { s->p++; *more = 1; return OK; }
    if (*s->p == '}') { s->p++; *more = 0; return OK; }
    return NO;
}

static int int64_value(Scanner *s, int64_t *out) {
    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return NO;
    Number n;
    int r = number(s, &n);
    if (r != OK) return r;
    if (!n.is_int || !n.fits_int64) return NO;
    *out = n.value;
    return OK;
}

static int dims_value(Scanner *s, Vec *flat, int32_t *count) {
    if (s->p >= s->end || *s->p != '[') return NO;
    s->p++;
    skip_ws(s);
    *count = 0;
    if (s->p < s->end && *s->p == ']') { s->p++; return OK; }
    for (;;) {
        int64_t v;
        int r;
        skip_ws(s);
        if ((r = int64_value(s, &v)) != OK) return r;
        if (vec_push(flat, &v, sizeof v) < 0) return ERR;
        if (*count == INT32_MAX) return NO;
        (*count)++;
        skip_ws(s);
        if (s->p >= s->end) return NO;
        if (*s->p == ',') { s->p++; continue; }
        if (*s->p == ']') { s->p++; return OK; }
        return NO;
    }
}

/* The code of the raw JSON text of the value at s->p (validated as it is skipped; a null is
 * the absent default and gets no code: returns NO_VALUE). */
#define NO_VALUE 3
static int raw_code(Scanner *s, int32_t *code) {
    if (s->p < s->end && *s->p == 'n') {
        int r = literal(s, "null", 4);
        return r == OK ? NO_VALUE : r;
    }
    const char *first = s->p;
    int r = skip_value(s, 2);
    if (r != OK) return r;
    int32_t c = intern(&s->strings, first, (size_t)(s->p - first));
    if (c == -2) return ERR;
    if (c < 0) return NO;
    *code = c;
    return OK;
}

static int args_object(Scanner *s, Columns *c, Event *e) {
    if (s->p >= s->end || *s->p != '{') return NO;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return OK; }
    uint32_t seen = 0;
    for (int more = 1; more;) {
        const char *k;
        size_t n;
        int r, field = -1;
        if ((r = object_key(s, &k, &n)) != OK) return r;
        field = key_index(k, n, (size_t)(s->end - k), ARG_NAMES, ARG_LENS, ARG_HEADS, N_ARG_NAMES);
        if (field >= 0) {
            if (seen & (1u << field)) return NO; /* a duplicated key: msgspec keeps the last; rare */
            seen |= 1u << field;
        }
        if (field < 0) r = skip_value(s, 2);
        else if (field < N_INT_ARGS) {
            int64_t v;
            if ((r = int64_value(s, &v)) == OK)
                r = push_sparse(&c->sparse_index[SP_ARGS + field], &c->sparse_value[SP_ARGS + field], e->index, &v, 8);
        } else if (field == N_INT_ARGS + S_PG_RANKS && s->p < s->end && *s->p == 'n') {
            r = literal(s, "null", 4); /* null: the default (None); a list: the msgspec path */
        } else if (field < N_INT_ARGS + N_STR_ARGS) {
            int k = SC_ARGS + field - N_INT_ARGS;
            int32_t code;
            if ((r = string_code(s, &code)) == OK)
                r = push_sparse(&c->code_index[k], &c->code_value[k], e->index, &code, 4);
        } else if (field >= FIRST_RAW_ARG) {
            int32_t code;
            if ((r = raw_code(s, &code)) == OK) {
                int k = SC_RAW + field - FIRST_RAW_ARG;
                r = push_sparse(&c->code_index[k], &c->code_value[k], e->index, &code, 4);
            } else if (r == NO_VALUE) {
                r = OK;
            }
        } else {
            int d = field - N_INT_ARGS - N_STR_ARGS;
            int32_t count;
            if ((r = dims_value(s, &c->dims[d], &count)) == OK)
                r = push_sparse(&c->dims_index[d], &c->dims_len[d], e->index, &count, 4);
        }
        if (r != OK) return r;
        if ((r = next_member(s, &more)) != OK) return r;
    }
    return OK;
}

/* The double of a number text when it can be computed exactly with one rounding (Clinger's fast
 * path: a significand below 2**53 and a power of ten up to 10**22 are both exact doubles, and one
 * IEEE division or multiplication is correctly rounded); returns 0 to use the general conversion. */
static int exact_double(const Number *n, double *out) {
    static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (!n->exact || n->scale > 22 || n->mantissa > (1ULL << 53)) return 0;
    double v = (double)n->mantissa; /* exact: at most 2**53 */
    v = n->scale ? v / POW10[n->scale] : v;
    *out = n->text[0] == '-' ? -v : v;
    return 1;
}

static int time_value(Scanner *s, Event *e, int t) {
    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return NO; /* null, text: msgspec */
    Number n;
    int r = number(s, &n);
    if (r != OK) return r;
    if (n.len > MAX_NUMBER_TEXT) return NO;
    double v;
    if (!exact_double(&n, &v)) {
        char text[MAX_NUMBER_TEXT + 1];
        memcpy(text, n.text, n.len);
        text[n.len] = '\0';
        char *stop = NULL;
        /* correctly rounded and locale-independent (CPython's dtoa) */
        v = PyOS_string_to_double(text, &stop, NULL);
        if (v == -1.0 && PyErr_Occurred()) return ERR;
        if (stop != text + n.len) return NO;
    }
    if (isinf(v)) return NO; /* msgspec: "number out of range" */
    if (n.is_int && n.fits_int64) {
        e->time_kind[t] = 1;
        memcpy(&e->time_value[t], &n.value, 8);
    } else {
        e->time_kind[t] = 2;
        memcpy(&e->time_value[t], &v, 8);
    }
    e->time_off[t] = (int64_t)(n.text - s->base);
    e->time_len[t] = (uint16_t)n.len; /* at most MAX_NUMBER_TEXT */
    /* Exact ns from the decimal text: at most 3 decimals, and below TS_EXACT_LIMIT_US (2**43 us,
     * parsers/kineto.py), where a double's spacing is under 1 ns, so microseconds_to_ns finds
     * exactly this value from the double; elsewhere Python converts as before. */
    uint64_t mantissa = n.mantissa;
    int scale = n.scale;
    while (scale > 3 && mantissa % 10 == 0) { mantissa /= 10; scale--; } /* "1.5000" */
    if (n.exact && scale <= 3 && fabs(v) < 8796093022208.0) {
        static const int64_t SCALE[4] = {1000, 100, 10, 1};
        int64_t ns = (int64_t)mantissa * SCALE[scale]; /* below 2**43 * 1000 < 2**53 */
        e->time_ns[t] = n.text[0] == '-' ? -ns : ns;
        e->time_exact[t] = 1;
    }
    return OK;
}

/* pid, tid or id: an integer within int64, or a text (its code, sparse column `text`). */
static int id_value(Scanner *s, Columns *c, int32_t index, int64_t *value, int text) {
    if (s->p < s->end && *s->p == '"') {
        int32_t code;
        int r = string_code(s, &code);
        *value = 0;
        return r == OK ? push_sparse(&c->code_index[text], &c->code_value[text], index, &code, 4) : r;
    }
    return int64_value(s, value);
}

static int event_field(Scanner *s, Columns *c, Event *e, const char *k, size_t n, uint32_t *seen) {
    int field = -1;
    field = key_index(k, n, (size_t)(s->end - k), EVENT_NAMES, EVENT_LENS, EVENT_HEADS, N_EVENT_NAMES);
    if (field < 0) return skip_value(s, 1);
    if (*seen & (1u << field)) return NO; /* a duplicated key: msgspec keeps the last; rare */
    *seen |= 1u << field;
    switch (field) {
    case 0: case 1: case 2: return string_code(s, &e->str_field[field]);
    case 3: return id_value(s, c, e->index, &e->pid, SC_PID_TEXT); /* ids beyond int64: msgspec */
    case 4: return id_value(s, c, e->index, &e->tid, SC_TID_TEXT);
    case 5: return time_value(s, e, T_TS);
    case 6: return time_value(s, e, T_DUR);
    case 7: {
        int64_t id;
        int text = s->p < s->end && *s->p == '"';
        int r = id_value(s, c, e->index, &id, SC_ID_TEXT);
        if (r != OK || text) return r;
        return push_sparse(&c->sparse_index[SP_ID], &c->sparse_value[SP_ID], e->index, &id, 8);
    }
    case 8: /* read by nothing, but typed str */
        if (s->p >= s->end || *s->p != '"') return NO;
        return string(s, NULL, NULL, NULL);
    default: return args_object(s, c, e);
    }
}

static int push_event(Columns *c, const Event *e) {
    int failed = 0;
    for (int i = 0; i < N_STR_FIELDS; i++) failed |= vec_push(&c->str_field[i], &e->str_field[i], 4);
    failed |= vec_push(&c->pid, &e->pid, 8);
    failed |= vec_push(&c->tid, &e->tid, 8);
    for (int t = 0; t < N_TIMES; t++) {
        failed |= vec_push(&c->time_value[t], &e->time_value[t], 8);
        failed |= vec_push(&c->time_kind[t], &e->time_kind[t], 1);
        failed |= vec_push(&c->time_off[t], &e->time_off[t], 8);
        failed |= vec_push(&c->time_len[t], &e->time_len[t], 2);
        failed |= vec_push(&c->time_ns[t], &e->time_ns[t], 8);
        failed |= vec_push(&c->time_exact[t], &e->time_exact[t], 1);
    }
    return failed ? ERR : OK;
}

static int event(Scanner *s, Columns *c, int32_t empty, int32_t index) {
    Event e;
    e.index = index;
    for (int i = 0; i < N_STR_FIELDS; i++) e.str_field[i] = empty;
    e.pid = e.tid = -1;
    for (int t = 0; t < N_TIMES; t++) {
        e.time_value[t] = 0; e.time_kind[t] = 0; e.time_off[t] = -1; e.time_len[t] = 0;
        e.time_ns[t] = 0; e.time_exact[t] = 0;
    }
    if (s->p >= s->end || *s->p != '{') return NO;
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return push_event(c, &e); }
    uint32_t seen = 0;
    for (int more = 1; more;) {
        const char *k;
        size_t n;
        int r;
        if ((r = object_key(s, &k, &n)) != OK) return r;
        if ((r = event_field(s, c, &e, k, n, &seen)) != OK) return r;
        if ((r = next_member(s, &more)) != OK) return r;
    }
    return push_event(c, &e);
}

/* ------------------------------------------------------------------ the module function */

static void columns_free(Columns *c) {
    Vec *v = (Vec *)c;
    for (size_t i = 0; i < sizeof(Columns) / sizeof(Vec); i++) PyMem_Free(v[i].data);
}

static int put(PyObject *out, const char *key, const Vec *v) {
    PyObject *b = PyBytes_FromStringAndSize(v->data ? v->data : "", (Py_ssize_t)v->len);
    if (!b) return -1;
    int r = PyDict_SetItemString(out, key, b);
    Py_DECREF(b);
    return r;
}

static int put_sparse(PyObject *out, const char *name, const Vec *index, const Vec *value) {
    char key[64];
    snprintf(key, sizeof key, "%s_index", name);
    if (put(out, key, index)) return -1;
    snprintf(key, sizeof key, "%s_value", name);
    return put(out, key, value);
}

static PyObject *columns_dict(Columns *c, Py_ssize_t n, PyObject *strings) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    char key[64];
    int failed = PyDict_SetItemString(out, "strings", strings);
    PyObject *count = PyLong_FromSsize_t(n);
    failed |= !count || PyDict_SetItemString(out, "n", count);
    Py_XDECREF(count);
    for (int i = 0; i < N_STR_FIELDS; i++) failed |= put(out, STR_FIELDS[i], &c->str_field[i]);
    failed |= put(out, "pid", &c->pid) | put(out, "tid", &c->tid);
    for (int t = 0; t < N_TIMES; t++) {
        const char *f = TIME_FIELDS[t];
        snprintf(key, sizeof key, "%s_value", f); failed |= put(out, key, &c->time_value[t]);
        snprintf(key, sizeof key, "%s_kind", f); failed |= put(out, key, &c->time_kind[t]);
        snprintf(key, sizeof key, "%s_offset", f); failed |= put(out, key, &c->time_off[t]);
        snprintf(key, sizeof key, "%s_length", f); failed |= put(out, key, &c->time_len[t]);
        snprintf(key, sizeof key, "%s_ns", f); failed |= put(out, key, &c->time_ns[t]);
        snprintf(key, sizeof key, "%s_exact", f); failed |= put(out, key, &c->time_exact[t]);
    }
    failed |= put_sparse(out, "id", &c->sparse_index[SP_ID], &c->sparse_value[SP_ID]);
    for (int i = 0; i < N_INT_ARGS; i++)
        failed |= put_sparse(out, INT_ARG_COLUMNS[i], &c->sparse_index[SP_ARGS + i], &c->sparse_value[SP_ARGS + i]);
    for (int i = 0; i < SC_ARGS; i++)
        failed |= put_sparse(out, SPARSE_CODE_NAMES[i], &c->code_index[i], &c->code_value[i]);
    for (int i = 0; i < N_STR_ARGS; i++)
        failed |= put_sparse(out, STR_ARG_COLUMNS[i], &c->code_index[SC_ARGS + i], &c->code_value[SC_ARGS + i]);
    for (int i = 0; i < N_RAW_ARGS; i++)
        failed |= put_sparse(out, RAW_ARG_COLUMNS[i], &c->code_index[SC_RAW + i], &c->code_value[SC_RAW + i]);
    failed |= put(out, "grid", &c->dims[0]) | put_sparse(out, "grid_length", &c->dims_index[0], &c->dims_len[0]);
    failed |= put(out, "block", &c->dims[1]) | put_sparse(out, "block_length", &c->dims_index[1], &c->dims_len[1]);
    if (failed) { Py_DECREF(out); return NULL; }
    return out;
}

static int scan(Scanner *s, Columns *c, Py_ssize_t *n) {
    int32_t empty = intern(&s->strings, "", 0); /* code 0: the default of every string field */
    if (empty < 0) return ERR;
    skip_ws(s);
    if (s->p >= s->end) return NO;
    for (;;) {
        if (*n >= INT32_MAX) return NO;
        int r = event(s, c, empty, (int32_t)*n);
        if (r != OK) return r;
        (*n)++;
        skip_ws(s);
        if (s->p >= s->end) return OK;
        if (*s->p != ',') return NO;
        s->p++;
        skip_ws(s);
    }
}

static PyObject *decode_chunk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn:decode_chunk", &view, &start, &end)) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "decode_chunk: range outside the buffer");
        return NULL;
    }
    Scanner s;
    memset(&s, 0, sizeof s);
    Columns c;
    memset(&c, 0, sizeof c);
    s.base = (const char *)view.buf;
    s.p = s.base + start;
    s.end = s.base + end;
    s.strings.strings = PyList_New(0);
    PyObject *out = NULL;
    Py_ssize_t n = 0;
    if (s.strings.strings) {
        int r = scan(&s, &c, &n);
        if (r == OK) out = columns_dict(&c, n, s.strings.strings);
        else if (r == NO) out = Py_NewRef(Py_None);
    }
    Py_XDECREF(s.strings.strings);
    PyMem_Free(s.strings.slots);
    PyMem_Free(s.strings.arena.data);
    PyMem_Free(s.scratch.data);
    columns_free(&c);
    PyBuffer_Release(&view);
    return out;
}

/* first_seen(codes, k) -> list: the distinct values of an int32 buffer (each in 0..k-1), in the
 * order of their first occurrence (the order a memo reading the rows one by one assigns codes). */
static PyObject *first_seen(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "y*n:first_seen", &view, &k)) return NULL;
    PyObject *out = NULL;
    unsigned char *seen = NULL;
    if (view.len % 4 != 0 || k < 0) {
        PyErr_SetString(PyExc_ValueError, "first_seen: expected int32 codes and a count");
        goto done;
    }
    seen = PyMem_Calloc((size_t)k + 1, 1);
    out = PyList_New(0);
    if (!seen || !out) { Py_CLEAR(out); if (!seen) PyErr_NoMemory(); goto done; }
    const char *codes = (const char *)view.buf;
    for (Py_ssize_t i = 0; i < view.len / 4; i++) {
        int32_t code;
        memcpy(&code, codes + 4 * i, 4);
        if (code < 0 || code >= k) {
            PyErr_SetString(PyExc_ValueError, "first_seen: a code out of range");
            Py_CLEAR(out);
            goto done;
        }
        if (seen[code]) continue;
        seen[code] = 1;
        PyObject *value = PyLong_FromLong(code);
        if (!value || PyList_Append(out, value) < 0) { Py_XDECREF(value); Py_CLEAR(out); goto done; }
        Py_DECREF(value);
    }
done:
    PyMem_Free(seen);
    PyBuffer_Release(&view);
    return out;
}

/* array_end(buf, start) -> int or None: the position of the first bracket at or after `start`
 * that closes one opened before `start` (the end of the events array when `start` is inside
 * it), with bracket_depths' rules (parsers/jsonstream.py), so both find the same bracket in any
 * text, valid JSON or not: a quote counts unless an odd run of backslashes precedes it, the
 * counted quotes alternately open and close strings, brackets inside strings are ignored. */
static PyObject *array_end(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "y*n:array_end", &view, &start)) return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "array_end: start outside the buffer");
        return NULL;
    }
    static const unsigned char special[256] = {['"'] = 1, ['\\'] = 1, ['['] = 1, ['{'] = 1, [']'] = 1, ['}'] = 1};
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t found = -1, depth = 0;
    int in_string = 0, odd = 0; /* odd: the run of backslashes just before this byte is odd */
    for (Py_ssize_t i = start; i < view.len; i++) {
        unsigned char c = b[i];
        if (!special[c]) { odd = 0; continue; }
        if (c == '\\') { odd = !odd; continue; }
        if (c == '"') { if (!odd) in_string = !in_string; }
        else if (!in_string) {
            if (c == '[' || c == '{') depth++;
            else if (--depth < 0) { found = i; break; }
        }
        odd = 0;
    }
    PyBuffer_Release(&view);
    if (found < 0) Py_RETURN_NONE;
    return PyLong_FromSsize_t(found);
}

static PyMethodDef methods[] = {
    {"array_end", array_end, METH_VARARGS,
     "array_end(buf, start) -> position of the first bracket closing one opened before start, or None"},
    {"first_seen", first_seen, METH_VARARGS,
     "first_seen(codes, k) -> list of the distinct int32 codes (0..k-1) in the order first seen"},
    {"decode_chunk", decode_chunk, METH_VARARGS,
     "decode_chunk(buf, start, end) -> dict of column bytes, or None when the chunk is not for the native path"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kineto_columns",
                                    "Native column decoder for Kineto event chunks.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kineto_columns(void) {
    init_key_tables();
    return PyModule_Create(&module);
}
