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

/* The storage is a bytes object, written in place while its only reference is ours, and cut to
 * its length when handed to Python (vec_bytes): the columns are not copied once more at the end. */
typedef struct {
    char *data;
    size_t len, cap; /* bytes */
    PyObject *bytes; /* NULL until the first reserve */
} Vec;

static int vec_reserve(Vec *v, size_t extra) {
    if (v->len + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 4096;
    while (cap < v->len + extra) cap *= 2;
    if (cap > PY_SSIZE_T_MAX) { PyErr_NoMemory(); return -1; }
    if (!v->bytes) v->bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    else if (_PyBytes_Resize(&v->bytes, (Py_ssize_t)cap) < 0) v->bytes = NULL; /* it freed the old one */
    if (!v->bytes) { v->data = NULL; v->len = v->cap = 0; return -1; }
    v->data = PyBytes_AS_STRING(v->bytes);
    v->cap = cap;
    return 0;
}

static void vec_free(Vec *v) {
    Py_CLEAR(v->bytes);
    v->data = NULL;
    v->len = v->cap = 0;
}

/* The vector's bytes as a new reference (the vector is emptied), or NULL on an error. */
static PyObject *vec_bytes(Vec *v) {
    if (!v->bytes) return PyBytes_FromStringAndSize("", 0);
    PyObject *out = v->bytes;
    v->bytes = NULL;
    v->data = NULL;
    if ((size_t)PyBytes_GET_SIZE(out) != v->len && _PyBytes_Resize(&out, (Py_ssize_t)v->len) < 0) out = NULL;
    v->len = v->cap = 0;
    return out;
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

typedef struct {
    uint64_t hash;
    uint64_t head, head2; /* bytes 0..7 and 8..15, zero-padded: texts up to 16 bytes compare as integers */
    size_t offset, len; /* bytes in the arena */
    int32_t code;
} Slot;

typedef struct {
    Slot *slots;
    size_t size, used; /* size: a power of two */
    Vec arena;
    PyObject *strings; /* list of the unique str, code = index */
} Interner;

/* A text's hash from its first 16 bytes (head, head2) and, beyond them, every 8 bytes; the last
 * piece is one load when `avail` (bytes readable from s) allows. */
static inline uint64_t hash_text(const char *s, size_t n, size_t avail, uint64_t head, uint64_t head2) {
    uint64_t h = (head ^ ((uint64_t)n << 56)) * 0x9E3779B97F4A7C15ULL;
    h ^= head2 * 0xC2B2AE3D27D4EB4FULL;
    for (size_t i = 16; i < n; i += 8) {
        h ^= h >> 29;
        h = (h ^ head8(s + i, n - i, avail - i)) * 0x100000001B3ULL;
    }
    return h ^ (h >> 31);
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

/* The code of the UTF-8 text s[0:n] (`avail` bytes readable from s, at least n): 0.. on success,
 * -1 when it is not valid UTF-8 (no error set: the chunk falls back), -2 on a Python error. */
static int32_t intern(Interner *t, const char *s, size_t n, size_t avail) {
    if ((t->used + 1) * 2 > t->size && interner_resize(t) < 0) return -2;
    uint64_t head = head8(s, n, avail), head2 = n > 8 ? head8(s + 8, n - 8, avail - 8) : 0;
    uint64_t h = hash_text(s, n, avail, head, head2);
    size_t j = h & (t->size - 1);
    while (t->slots[j].code >= 0) {
        Slot *slot = &t->slots[j];
        if (slot->hash == h && slot->len == n && slot->head == head && slot->head2 == head2 &&
            (n <= 16 || memcmp(t->arena.data + slot->offset + 16, s + 16, n - 16) == 0))
            return slot->code;
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
    t->slots[j] = (Slot){h, head, head2, offset, n, code};
    t->used++;
    return code;
}

/* ------------------------------------------------------------------ the scanner */

/* Results of a step: OK, NO (the chunk is not for the native path), ERR (a Python error). */
enum { OK = 0, NO = 1, ERR = 2 };

/* A text of up to 16 bytes (its bytes as two zero-padded integers) and its code; code -1: none. */
typedef struct {
    uint64_t head, head2;
    size_t len;
    int32_t code;
} Recent;

typedef struct {
    const char *base; /* buf */
    const char *p, *end;
    Interner strings;
    Vec scratch; /* unescaped string text */
    size_t dense_room; /* events the dense columns have room for */
    Recent recent[3];  /* ph, cat, name (string_code) */
} Scanner;

static inline int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The whitespace from p on skipped. JSON writers put one space after ',' and ':' or none: those
 * cases take one or two compares; any other run takes the loop. The cursor is a local: through s
 * it would be stored and reloaded at every byte (s may alias what it points to, for the compiler). */
__attribute__((always_inline)) static inline const char *past_ws(const char *p, const char *end) {
    if (p < end && *p == ' ') p++;
    if (p < end && (unsigned char)*p <= ' ')
        while (p < end && is_ws(*p)) p++;
    return p;
}

__attribute__((always_inline)) static inline void skip_ws(Scanner *s) { s->p = past_ws(s->p, s->end); }

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

#ifndef __SSE2__
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Whether any byte of w is '"', '\\' or below 0x20 (exact for "any": the usual SWAR tests). */
static inline int special_byte(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), backslash = w ^ (ONES * '\\');
    uint64_t zero_quote = (quote - ONES) & ~quote, zero_backslash = (backslash - ONES) & ~backslash;
    uint64_t control = (w - ONES * 0x20) & ~w;
    return ((zero_quote | zero_backslash | control) & HIGHS) != 0;
}
#endif

/* Bytes that end a string's fast scan: '"', '\\' and the control characters (below 0x20). */
static unsigned char STRING_STOP[256];

static int string_escaped(Scanner *s, const char *first, const char **text, size_t *len, int *escaped);

/* A string at s->p (its opening quote). With `text`, its decoded bytes are returned there
 * (pointing into buf when it has no escapes, else into the scratch vector). The cursor is a local
 * (a store through s per step would be kept in memory: s aliases the buffers it writes). */
__attribute__((always_inline)) static inline int string(Scanner *s, const char **text, size_t *len, int *escaped) {
    const char *p = s->p + 1, *end = s->end; /* after the quote */
    const char *first = p;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: the first quote, backslash or control byte is found from one mask */
        if (end - p >= 16) {
            const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), low = _mm_set1_epi8(0x1f);
            __m128i w = _mm_loadu_si128((const __m128i *)p);
            /* a control character: an unsigned byte <= 0x1f, where max(w, 0x1f) == 0x1f */
            __m128i control = _mm_cmpeq_epi8(_mm_max_epu8(w, low), low);
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(w, quote), _mm_cmpeq_epi8(w, backslash)), control);
            unsigned mask = (unsigned)_mm_movemask_epi8(hit);
            if (!mask) { p += 16; continue; }
            p += __builtin_ctz(mask);
        } else
#else
        /* 8 bytes at a time while none is a quote, a backslash or a control character */
        if (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (!special_byte(w)) { p += 8; continue; }
            while (!STRING_STOP[(unsigned char)*p]) p++; /* one of these 8 bytes stops it */
        } else
#endif
        {
            while (p < end && !STRING_STOP[(unsigned char)*p]) p++;
            if (p >= end) return NO;
        }
        break;
    }
    if (*p == '\\') { s->p = p; return string_escaped(s, first, text, len, escaped); }
    if (*p != '"') return NO; /* a control character */
    if (text) { *text = first; *len = (size_t)(p - first); }
    if (escaped) *escaped = 0;
    s->p = p + 1;
    return OK;
}

/* The rest of a string from its first backslash at s->p (`first`: its first byte), unescaped
 * into the scratch vector. Out of line: rare, and the inlined fast part stays small. */
__attribute__((noinline)) static int string_escaped(Scanner *s, const char *first, const char **text, size_t *len,
                                                    int *escaped) {
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

/* The code of the string at s->p. `recent` (or NULL): the last text of up to 16 bytes this field
 * had, checked before the interner: ph and cat repeat from one event to the next. */
static int string_code(Scanner *s, int32_t *code, Recent *recent) {
    if (s->p >= s->end || *s->p != '"') return NO;
    const char *text;
    size_t len;
    int r = string(s, &text, &len, NULL);
    if (r != OK) return r;
    /* an unescaped text lies in buf, before its closing quote; an escaped one in scratch */
    size_t avail = text >= s->base && text < s->end ? (size_t)(s->end - text) : len;
    uint64_t head = 0, head2 = 0;
    if (recent && len <= 16) {
        head = head8(text, len, avail);
        head2 = len > 8 ? head8(text + 8, len - 8, avail - 8) : 0;
        if (recent->code >= 0 && recent->len == len && recent->head == head && recent->head2 == head2) {
            *code = recent->code;
            return OK;
        }
    }
    int32_t c = intern(&s->strings, text, len, avail);
    if (c == -2) return ERR;
    if (c < 0) return NO;
    if (recent && len <= 16) *recent = (Recent){head, head2, len, c};
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR_DIGITS 1
/* How many of the 8 bytes of w (the first in its lowest byte) are ASCII digits before the first
 * other byte. Each digit byte 0x30..0x39 maps to exactly 0x33 (its high nibble, and that of byte +
 * 6 shifted down); a carry out of a non-digit byte can only change bytes after it. */
static inline int leading_digits(uint64_t w) {
    const uint64_t high = 0xF0F0F0F0F0F0F0F0ULL;
    uint64_t t = (w & high) | (((w + 0x0606060606060606ULL) & high) >> 4);
    uint64_t other = t ^ 0x3333333333333333ULL; /* nonzero bytes: not digits */
    return other ? __builtin_ctzll(other) >> 3 : 8;
}

/* The value of the first k (1..8) digit bytes of w: they are moved to the top (the bytes below
 * become leading zeros) and combined pairwise, the usual SWAR reduction (as simdjson does). */
static inline uint64_t digits_value(uint64_t w, int k) {
    uint64_t v = (w - 0x3030303030303030ULL) << (8 * (8 - k));
    v = v * 10 + (v >> 8);
    return (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
            (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
}

static const uint64_t POW10_U64[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
#endif

/* The digits of an integer part that does not start with 0, at most 19 of them in *mag (below
 * 10**19: no overflow); returns their count (more than 19: *mag is not their value). */
static inline size_t integer_digits(const char *p, const char *end, uint64_t *mag) {
    const char *first = p;
    uint64_t value = 0;
#ifdef SWAR_DIGITS
    while (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        int k = leading_digits(w);
        if (k == 0) break;
        if (p - first + k <= 19) value = value * POW10_U64[k] + digits_value(w, k);
        p += k;
        if (k < 8) { *mag = value; return (size_t)(p - first); }
    }
#endif
    for (; p < end && *p >= '0' && *p <= '9'; p++)
        if (p - first < 19) value = value * 10 + (uint64_t)(*p - '0');
    *mag = value;
    return (size_t)(p - first);
}

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
        size_t count = integer_digits(p, end, &mag);
        p += count;
        overflow = count > 19; /* 19 digits are below 10**19 < 2**64; 20 or more never fit int64 */
        digits = count > 19 ? 20 : (int)count;
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

/* The usual number first: an integer of 1 to 7 digits after an optional '-', no leading zero,
 * read from one 8-byte load (the byte after its digits is then in the word too, and is not '.',
 * 'e' or 'E'): its value in *out and the position after it; NULL for any other text (then the
 * general number() reads it). */
static inline const char *short_integer(const char *p, const char *end, int64_t *out) {
#ifdef SWAR_DIGITS
    int negative = p < end && *p == '-';
    p += negative;
    if (end - p < 8 || *p == '0') return NULL;
    uint64_t w;
    memcpy(&w, p, 8);
    int k = leading_digits(w);
    if (k == 0 || k == 8 || p[k] == '.' || p[k] == 'e' || p[k] == 'E') return NULL;
    int64_t v = (int64_t)digits_value(w, k);
    *out = negative ? -v : v;
    return p + k;
#else
    (void)p; (void)end; (void)out;
    return NULL;
#endif
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
    int64_t unused;
    const char *after = short_integer(s->p, s->end, &unused); /* the usual unknown value ("Ev Idx": 0) */
    if (after) { s->p = after; return OK; }
    Number n;
    return number(s, &n);
}

/* ------------------------------------------------------------------ the columns */

enum {
    /* int64 arg columns (those of _Args, then those of _MemoryArgs), default -1 but Bytes 0 */
    A_EXTERNAL_ID, A_EXTERNAL_ID_OLD, A_CORRELATION, A_STREAM, A_DEVICE, A_BYTES, A_IN_NELEMS, A_OUT_NELEMS,
    A_GROUP_SIZE, A_SEQUENCE_NUMBER, A_FWD_THREAD_ID, A_GRAPH_ID, A_GRAPH_NODE_ID, A_MEM_BYTES, A_TOTAL_ALLOCATED, A_TOTAL_RESERVED,
    A_DEVICE_ID, A_DEVICE_TYPE, A_ADDR, N_INT_ARGS
};
static const char *INT_ARG_KEYS[N_INT_ARGS] = {
    "External id", "external id", "correlation", "stream", "device", "bytes", "In msg nelems", "Out msg nelems",
    "Group size", "Sequence number", "Fwd thread id", "graph id", "graph node id", "Bytes", "Total Allocated", "Total Reserved", "Device Id",
    "Device Type", "Addr"};
static const char *INT_ARG_COLUMNS[N_INT_ARGS] = {
    "external_id", "external_id_old", "correlation", "stream", "device", "bytes", "in_nelems", "out_nelems",
    "group_size", "sequence_number", "fwd_thread_id", "graph_id", "graph_node_id", "mem_bytes", "total_allocated", "total_reserved",
    "device_id", "device_type", "addr"};
enum { S_COLLECTIVE, S_DTYPE, S_PG_NAME, S_PG_RANKS, S_NAME, S_KERNEL, N_STR_ARGS };
static const char *STR_ARG_KEYS[N_STR_ARGS] = {"Collective name", "dtype", "Process Group Name",
                                               "Process Group Ranks", "name", "kernel"};
static const char *STR_ARG_COLUMNS[N_STR_ARGS] = {"collective", "dtype", "pg_name", "pg_ranks", "arg_name",
                                                  "launch_kernel"};
/* args kept as their raw JSON text (an op's recorded inputs, record_shapes=True; "Input dims" is
 * the 2021 spelling): the text is validated and interned like a string, Python decodes the
 * distinct texts */
enum { R_INPUT_DIMS, R_INPUT_DIMS_OLD, R_INPUT_TYPES, R_INPUT_STRIDES, R_CONCRETE_INPUTS, N_RAW_ARGS };
static const char *RAW_ARG_KEYS[N_RAW_ARGS] = {"Input Dims", "Input dims", "Input type", "Input Strides",
                                               "Concrete Inputs"};
static const char *RAW_ARG_COLUMNS[N_RAW_ARGS] = {"input_dims", "input_dims_old", "input_types", "input_strides",
                                                  "concrete_inputs"};
enum { E_PH, E_CAT, E_NAME, N_STR_FIELDS };
_Static_assert(N_STR_FIELDS == 3, "Scanner.recent holds one text per string field");
static const char *STR_FIELDS[N_STR_FIELDS] = {"ph", "cat", "name"};
enum { T_TS, T_DUR, N_TIMES };
static const char *TIME_FIELDS[N_TIMES] = {"ts", "dur"};

/* Keys matched: an open-addressing table per object kind, filled once at import, keyed on a key's
 * length and first 8 bytes (zero-padded); a slot also holds bytes 8..15, so a key of up to 16
 * bytes is matched with three integer compares and longer ones compare only their rest. A key no
 * field has (most args keys of most events: "Ev Idx") usually meets an empty slot at once. */
#define N_ARG_NAMES (N_INT_ARGS + N_STR_ARGS + 2 + N_RAW_ARGS)
_Static_assert(N_ARG_NAMES <= 32, "args_object marks the keys it has seen in a uint32_t");
#define FIRST_RAW_ARG (N_INT_ARGS + N_STR_ARGS + 2)
static const char *ARG_NAMES[N_ARG_NAMES];
#define N_EVENT_NAMES 10
static const char *EVENT_NAMES[N_EVENT_NAMES] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args"};

#define KEY_TABLE_BITS 6
#define KEY_TABLE_SIZE (1u << KEY_TABLE_BITS) /* at least twice the keys: a probe meets an empty slot soon */
_Static_assert(2 * N_ARG_NAMES <= KEY_TABLE_SIZE && 2 * N_EVENT_NAMES <= KEY_TABLE_SIZE, "key tables too small");
typedef struct {
    uint64_t head, head2; /* bytes 0..7 and 8..15, zero-padded */
    size_t len;
    int field; /* -1: an empty slot */
} KeySlot;
typedef struct {
    KeySlot slots[KEY_TABLE_SIZE];
    const char *const *names;
} KeyTable;
static KeyTable ARG_KEY_TABLE, EVENT_KEY_TABLE;

static inline size_t key_slot(uint64_t head, size_t n) {
    return (size_t)(((head ^ ((uint64_t)n << 58)) * 0x9E3779B97F4A7C15ULL) >> (64 - KEY_TABLE_BITS));
}

/* The field of key k[0:n] in table t, or -1; `avail` bytes may be read from k (more than n: the
 * closing quote follows). */
static inline int key_lookup(const KeyTable *t, const char *k, size_t n, size_t avail) {
    uint64_t head = head8(k, n, avail);
    uint64_t head2 = n > 8 ? head8(k + 8, n - 8, avail - 8) : 0;
    for (size_t j = key_slot(head, n);; j = (j + 1) & (KEY_TABLE_SIZE - 1)) {
        const KeySlot *slot = &t->slots[j];
        if (slot->field < 0) return -1;
        if (slot->len == n && slot->head == head && slot->head2 == head2 &&
            (n <= 16 || memcmp(k + 16, t->names[slot->field] + 16, n - 16) == 0))
            return slot->field;
    }
}

static void key_table_fill(KeyTable *t, const char *const *names, int count) {
    t->names = names;
    for (size_t j = 0; j < KEY_TABLE_SIZE; j++) t->slots[j].field = -1;
    for (int i = 0; i < count; i++) {
        size_t n = strlen(names[i]);
        uint64_t head = head8(names[i], n, n + 1);
        uint64_t head2 = n > 8 ? head8(names[i] + 8, n - 8, n - 7) : 0;
        size_t j = key_slot(head, n);
        while (t->slots[j].field >= 0) j = (j + 1) & (KEY_TABLE_SIZE - 1);
        t->slots[j] = (KeySlot){head, head2, n, i};
    }
}

static void init_key_tables(void) {
    for (int i = 0; i < N_INT_ARGS; i++) ARG_NAMES[i] = INT_ARG_KEYS[i];
    for (int i = 0; i < N_STR_ARGS; i++) ARG_NAMES[N_INT_ARGS + i] = STR_ARG_KEYS[i];
    ARG_NAMES[N_INT_ARGS + N_STR_ARGS] = "grid";
    ARG_NAMES[N_INT_ARGS + N_STR_ARGS + 1] = "block";
    for (int i = 0; i < N_RAW_ARGS; i++) ARG_NAMES[FIRST_RAW_ARG + i] = RAW_ARG_KEYS[i];
    key_table_fill(&ARG_KEY_TABLE, ARG_NAMES, N_ARG_NAMES);
    key_table_fill(&EVENT_KEY_TABLE, EVENT_NAMES, N_EVENT_NAMES);
    for (int c = 0; c < 256; c++) STRING_STOP[c] = c == '"' || c == '\\' || c < 0x20;
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

/* A key at s->p: its raw text (a key with escapes is not for the native path: it could spell a
 * known key another way). */
static int object_key(Scanner *s, const char **k, size_t *n) {
    skip_ws(s);
    if (s->p >= s->end || *s->p != '"') return NO;
    int escaped, r;
    if ((r = string(s, k, n, &escaped)) != OK) return r;
    if (escaped) return NO;
    const char *p = s->p, *end = s->end;
    if (p >= end || *p != ':') p = past_ws(p, end); /* a colon right after the key: the usual case */
    if (p >= end || *p != ':') return NO;
    s->p = past_ws(p + 1, end);
    return OK;
}

/* After a member: ',' (more follow, returns OK with *more = 1) or '}' (*more = 0). */
static int next_member(Scanner *s, int *more) {
    if (s->p >= s->end || (*s->p != ',' && *s->p != '}')) skip_ws(s); /* usually right after the value */
    if (s->p >= s->end) return NO;
    if (*s->p == ',') { s->p++; *more = 1; return OK; }
    if (*s->p == '}') { s->p++; *more = 0; return OK; }
    return NO;
}

static int int64_value(Scanner *s, int64_t *out) {
    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return NO;
    const char *after = short_integer(s->p, s->end, out);
    if (after) { s->p = after; return OK; }
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
    int32_t c = intern(&s->strings, first, (size_t)(s->p - first), (size_t)(s->end - first));
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
        field = key_lookup(&ARG_KEY_TABLE, k, n, (size_t)(s->end - k));
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
            if ((r = string_code(s, &code, NULL)) == OK)
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

/* ts or dur written as an integer of at most 2**53 without a leading zero (what the profiler
 * writes): the double is the integer itself (exact), so every field is what the general path
 * below gives, computed directly. Returns 0 (nothing read) for any other text. */
static inline int integer_time(Scanner *s, Event *e, int t) {
    const char *p = s->p, *end = s->end;
    int negative = *p == '-';
    p += negative;
    if (p >= end || *p < '1' || *p > '9') return 0;
    uint64_t mag;
    size_t count = integer_digits(p, end, &mag);
    const char *after = p + count;
    if (count > 18 || mag > (1ULL << 53) || (after < end && (*after == '.' || *after == 'e' || *after == 'E')))
        return 0;
    int64_t value = negative ? -(int64_t)mag : (int64_t)mag;
    e->time_kind[t] = 1;
    memcpy(&e->time_value[t], &value, 8);
    e->time_off[t] = (int64_t)(s->p - s->base);
    e->time_len[t] = (uint16_t)(after - s->p);
    if ((double)mag < 8796093022208.0) { /* TS_EXACT_LIMIT_US, as below */
        e->time_ns[t] = value * 1000;
        e->time_exact[t] = 1;
    }
    s->p = after;
    return 1;
}

static int time_value(Scanner *s, Event *e, int t) {
    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return NO; /* null, text: msgspec */
    if (integer_time(s, e, t)) return OK;
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
        int r = string_code(s, &code, NULL);
        *value = 0;
        return r == OK ? push_sparse(&c->code_index[text], &c->code_value[text], index, &code, 4) : r;
    }
    return int64_value(s, value);
}

static int event_field(Scanner *s, Columns *c, Event *e, const char *k, size_t n, uint32_t *seen) {
    int field = -1;
    field = key_lookup(&EVENT_KEY_TABLE, k, n, (size_t)(s->end - k));
    if (field < 0) return skip_value(s, 1);
    if (*seen & (1u << field)) return NO; /* a duplicated key: msgspec keeps the last; rare */
    *seen |= 1u << field;
    switch (field) {
    case 0: case 1: case 2: return string_code(s, &e->str_field[field], &s->recent[field]);
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

/* Room for `events` events in every dense column (they all hold one item per event). */
static int dense_reserve(Columns *c, size_t events) {
    int failed = 0;
    for (int i = 0; i < N_STR_FIELDS; i++) failed |= vec_reserve(&c->str_field[i], events * 4 - c->str_field[i].len);
    failed |= vec_reserve(&c->pid, events * 8 - c->pid.len);
    failed |= vec_reserve(&c->tid, events * 8 - c->tid.len);
    for (int t = 0; t < N_TIMES; t++) {
        failed |= vec_reserve(&c->time_value[t], events * 8 - c->time_value[t].len);
        failed |= vec_reserve(&c->time_kind[t], events * 1 - c->time_kind[t].len);
        failed |= vec_reserve(&c->time_off[t], events * 8 - c->time_off[t].len);
        failed |= vec_reserve(&c->time_len[t], events * 2 - c->time_len[t].len);
        failed |= vec_reserve(&c->time_ns[t], events * 8 - c->time_ns[t].len);
        failed |= vec_reserve(&c->time_exact[t], events * 1 - c->time_exact[t].len);
    }
    return failed ? ERR : OK;
}

/* An item appended to a vector known to have room (dense_reserve). */
#define STORE(v, x) do { memcpy((v).data + (v).len, &(x), sizeof(x)); (v).len += sizeof(x); } while (0)

/* The event's dense fields appended; `room` counts the events the dense columns have room for
 * (one check per event, not one per column). */
static int push_event(Columns *c, const Event *e, size_t *room) {
    size_t events = c->pid.len / 8;
    if (events >= *room) {
        size_t more = *room ? 2 * *room : 1024;
        if (dense_reserve(c, more) != OK) return ERR;
        *room = more;
    }
    for (int i = 0; i < N_STR_FIELDS; i++) STORE(c->str_field[i], e->str_field[i]);
    STORE(c->pid, e->pid);
    STORE(c->tid, e->tid);
    for (int t = 0; t < N_TIMES; t++) {
        STORE(c->time_value[t], e->time_value[t]);
        STORE(c->time_kind[t], e->time_kind[t]);
        STORE(c->time_off[t], e->time_off[t]);
        STORE(c->time_len[t], e->time_len[t]);
        STORE(c->time_ns[t], e->time_ns[t]);
        STORE(c->time_exact[t], e->time_exact[t]);
    }
    return OK;
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
    if (s->p < s->end && *s->p == '}') { s->p++; return push_event(c, &e, &s->dense_room); }
    uint32_t seen = 0;
    for (int more = 1; more;) {
        const char *k;
        size_t n;
        int r;
        if ((r = object_key(s, &k, &n)) != OK) return r;
        if ((r = event_field(s, c, &e, k, n, &seen)) != OK) return r;
        if ((r = next_member(s, &more)) != OK) return r;
    }
    return push_event(c, &e, &s->dense_room);
}

/* ------------------------------------------------------------------ the module function */

static void columns_free(Columns *c) {
    Vec *v = (Vec *)c;
    for (size_t i = 0; i < sizeof(Columns) / sizeof(Vec); i++) vec_free(&v[i]);
}

static int put(PyObject *out, const char *key, Vec *v) {
    PyObject *b = vec_bytes(v);
    if (!b) return -1;
    int r = PyDict_SetItemString(out, key, b);
    Py_DECREF(b);
    return r;
}

static int put_sparse(PyObject *out, const char *name, Vec *index, Vec *value) {
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
    int32_t empty = intern(&s->strings, "", 0, 0); /* code 0: the default of every string field */
    if (empty < 0) return ERR;
    /* Room for the events a chunk of this size usually holds (a Kineto event takes 100 bytes or
     * more: fewer events than this is common, more is rare), so the columns seldom grow; the
     * pages of room left unused are never touched and cut off at the end (vec_bytes). */
    size_t room = (size_t)(s->end - s->p) / 100 + 16;
    if (dense_reserve(c, room) != OK) return ERR;
    s->dense_room = room;
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
    for (int i = 0; i < 3; i++) s.recent[i].code = -1;
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
    vec_free(&s.strings.arena);
    vec_free(&s.scratch);
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

/* decoded_keys() -> (event keys, args keys): the keys the decoder reads (every other key of an
 * event or of its args is skipped), for the benchmarks' msgspec reference to decode the same. */
static PyObject *decoded_keys(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *events = PyTuple_New(N_EVENT_NAMES), *args = PyTuple_New(N_ARG_NAMES);
    if (!events || !args) goto failed;
    for (int i = 0; i < N_EVENT_NAMES; i++) {
        PyObject *key = PyUnicode_FromString(EVENT_NAMES[i]);
        if (!key) goto failed;
        PyTuple_SET_ITEM(events, i, key);
    }
    for (int i = 0; i < N_ARG_NAMES; i++) {
        PyObject *key = PyUnicode_FromString(ARG_NAMES[i]);
        if (!key) goto failed;
        PyTuple_SET_ITEM(args, i, key);
    }
    return Py_BuildValue("(NN)", events, args);
failed:
    Py_XDECREF(events);
    Py_XDECREF(args);
    return NULL;
}

static PyMethodDef methods[] = {
    {"decoded_keys", decoded_keys, METH_NOARGS,
     "decoded_keys() -> (event keys, args keys) the decoder reads; every other key is skipped"},
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
