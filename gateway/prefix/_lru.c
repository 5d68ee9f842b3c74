/* gateway.prefix._lru: the prefix index's per-endpoint LRU of block hashes, in C.
 *
 * The same type and semantics as gateway/prefix/index.py's PyBlockLRU (the reference, and the
 * fallback where this module is not built): a bounded LRU set of 64-bit block hashes, least recent
 * first, each entry with an optional write stamp (an int64, ms; None when unstamped).
 *
 * Why native (docs/overhead.md, "The loop's worst stalls"): an OrderedDict at a constant size is
 * rebuilt whole every few hundred thousand inserts (11-50 ms stalls of the event loop at 262,144
 * entries), and a long prompt's 781 block inserts and evictions cost ~0.4 ms of cache misses in
 * Python objects. Here:
 *   - nodes live in one flat array (key, stamp, prev, next: 24 bytes per entry) grown by doubling up
 *     to the capacity and recycled through a free list once full, so an index at its capacity never
 *     reallocates or rehashes;
 *   - the hash table is open addressing with linear probing, at most 2/3 full, each slot the
 *     key's hash beside its node (8 bytes), and deletes by backward shift (Knuth, TAOCP vol. 3,
 *     6.4, Algorithm R), so it holds no tombstones and needs no periodic rebuild;
 *   - keys are hashed with splitmix64's finalizer (block hashes are already xxh3 outputs; tests
 *     and affinity keys may be small ints);
 *   - a call's keys are converted and their table slots prefetched 8 ahead of their touch, and an
 *     eviction prefetches the next head's slot and the node after it, so a long prompt's random
 *     probes overlap their cache misses (781 new blocks into a full 262,144-block index: ~0.33 ->
 *     ~0.15-0.2 ms, bench/index_lru.py).
 * Like the reference, a call touches all its keys first and then evicts the least recent entries
 * over the capacity, so the node arrays hold up to the capacity plus the largest call's new keys
 * (rounded up to 1,024): grown once, then recycled.
 *
 * Keys must be ints in [0, 2**64): others raise TypeError / OverflowError on insert, touch and
 * load, and are simply absent for `in`, match and trim. Not thread-safe: the GIL is held
 * throughout and the event loop is the only user. No reference cycles are possible (no object is
 * held), so the type is not tracked by the cyclic collector.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NIL UINT32_MAX
#define NO_STAMP INT64_MIN
#define MAX_NODES ((uint32_t)1 << 30)
#define MIN_NODES 64u

typedef struct {
    uint64_t key;
    int64_t stamp;        /* NO_STAMP when unstamped */
    uint32_t prev, next;  /* towards the least / most recent; next chains the free list */
} Node;                   /* 24 bytes: one cache line or two per entry touched */

typedef struct {
    PyObject_HEAD
    Py_ssize_t capacity;  /* entries kept; >= 1 */
    uint32_t count;       /* live entries */
    uint32_t node_cap;    /* allocated node slots */
    uint32_t used;        /* node slots ever handed out (< node_cap: fresh ones remain) */
    uint32_t free_head;   /* recycled node slots, chained through next */
    uint32_t head, tail;  /* least and most recent live entries */
    uint32_t mask;        /* table size - 1 (a power of two >= 1.5 * node_cap) */
    Node *nodes;
    uint64_t *table;      /* per slot: the key's mixed hash (low 32 bits) << 32 | node; EMPTY */
} LRU;

#define EMPTY UINT64_MAX
#define SLOT_NODE(e) ((uint32_t)(e))
#define SLOT_TAG(e) ((uint32_t)((e) >> 32))

static inline uint32_t mix(uint64_t k) {
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    k ^= k >> 31;
    return (uint32_t)k;
}

/* Slot holding `key`, or the empty slot where it would go; *node is its node or NIL. The table
 * keeps each key's hash beside its node, so probing past other keys and shifting them on delete
 * never reads a node. */
static inline uint32_t probe(const LRU *self, uint64_t key, uint32_t tag, uint32_t *node) {
    uint32_t i = tag & self->mask;
    for (;;) {
        uint64_t e = self->table[i];
        if (e == EMPTY || (SLOT_TAG(e) == tag && self->nodes[SLOT_NODE(e)].key == key)) {
            *node = e == EMPTY ? NIL : SLOT_NODE(e);
            return i;
        }
        i = (i + 1) & self->mask;
    }
}

static inline int contains(const LRU *self, uint64_t key) {
    uint32_t node;
    if (self->table == NULL) return 0;
    probe(self, key, mix(key), &node);
    return node != NIL;
}

/* Empty slot `i` and shift later entries of its cluster back (no tombstones). */
static void table_delete(LRU *self, uint32_t i) {
    uint32_t mask = self->mask, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t e = self->table[j];
        if (e == EMPTY) break;
        uint32_t home = SLOT_TAG(e) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            self->table[i] = e;
            i = j;
        }
    }
    self->table[i] = EMPTY;
}

static inline void unlink_node(LRU *self, uint32_t n) {
    Node *nodes = self->nodes;
    uint32_t p = nodes[n].prev, q = nodes[n].next;
    if (p == NIL) self->head = q; else nodes[p].next = q;
    if (q == NIL) self->tail = p; else nodes[q].prev = p;
}

static inline void append_node(LRU *self, uint32_t n) {
    Node *nodes = self->nodes;
    nodes[n].prev = self->tail;
    nodes[n].next = NIL;
    if (self->tail == NIL) self->head = n; else nodes[self->tail].next = n;
    self->tail = n;
}

/* Remove node `n` (at table slot `slot`) and recycle it. */
static void remove_node(LRU *self, uint32_t n, uint32_t slot) {
    table_delete(self, slot);
    unlink_node(self, n);
    self->nodes[n].next = self->free_head;
    self->free_head = n;
    self->count--;
}

static void evict_head(LRU *self) {
    uint32_t n = self->head, node;
    uint64_t key = self->nodes[n].key;
    uint32_t slot = probe(self, key, mix(key), &node);
    remove_node(self, n, slot);
}

static void free_arrays(LRU *self) {
    PyMem_Free(self->nodes);
    PyMem_Free(self->table);
    self->nodes = NULL;
    self->table = NULL;
    self->count = self->node_cap = self->used = 0;
    self->free_head = self->head = self->tail = NIL;
    self->mask = 0;
}

/* Grow the nodes (to `want`) and the table (to >= 1.5x them); -1 with MemoryError. */
static int grow(LRU *self, uint32_t want) {
    Node *nodes = PyMem_Realloc(self->nodes, (size_t)want * sizeof(Node));
    if (nodes == NULL) goto fail;
    self->nodes = nodes;
    self->node_cap = want;
    uint64_t size = 16;
    while (2 * size < 3 * (uint64_t)want) size <<= 1;  /* at most 2/3 full */
    if (self->table == NULL || size > (uint64_t)self->mask + 1) {
        uint64_t *table = PyMem_Malloc((size_t)size * sizeof(uint64_t));
        if (table == NULL) goto fail;
        memset(table, 0xff, (size_t)size * sizeof(uint64_t));
        PyMem_Free(self->table);
        self->table = table;
        self->mask = (uint32_t)(size - 1);
        for (uint32_t n = self->head; n != NIL; n = nodes[n].next) {
            uint32_t node, tag = mix(nodes[n].key), slot = probe(self, nodes[n].key, tag, &node);
            self->table[slot] = ((uint64_t)tag << 32) | n;
        }
    }
    return 0;
fail:
    PyErr_NoMemory();
    return -1;
}

static inline uint32_t node_limit(const LRU *self) {
    return self->capacity >= (Py_ssize_t)MAX_NODES ? MAX_NODES : (uint32_t)self->capacity;
}

static void evict_over(LRU *self) {
    uint32_t limit = node_limit(self);
    Node *nodes = self->nodes;
    while (self->count > limit) {
        /* The next head's node was fetched one eviction ago: start its table slot and the node
         * after it now, so the misses of consecutive evictions overlap instead of queueing. */
        uint32_t next = nodes[self->head].next;
        if (next != NIL) {
            __builtin_prefetch(&self->table[mix(nodes[next].key) & self->mask]);
            if (nodes[next].next != NIL) __builtin_prefetch(&nodes[nodes[next].next]);
        }
        evict_head(self);
    }
}

/* Room for `need` live entries: node slots by doubling up to the capacity, past it (a call that
 * touches more new keys than the full index can take before its final eviction) by `need` rounded
 * up to 1,024. -1 with MemoryError. */
static int reserve(LRU *self, uint64_t need) {
    if (need <= self->node_cap) return 0;
    uint64_t limit = node_limit(self), want;
    if (need <= limit) {
        want = self->node_cap < MIN_NODES ? MIN_NODES : (uint64_t)self->node_cap * 2;
        if (want > limit) want = limit;
        if (want < need) want = need;
    } else {
        want = (need + 1023) & ~(uint64_t)1023;
    }
    if (want > MAX_NODES) {
        if (need > MAX_NODES) {
            PyErr_NoMemory();
            return -1;
        }
        want = MAX_NODES;
    }
    return grow(self, (uint32_t)want);
}

/* Touch `key`: move it to the most recent end, stamping it when `stamp_it`; add it when absent
 * (the callers evict over capacity once at the end, as the reference does). -1 with an
 * exception set. */
static int touch_key(LRU *self, uint64_t key, int stamp_it, int64_t stamp) {
    uint32_t node, slot, tag = mix(key);
    if (self->table != NULL) {
        slot = probe(self, key, tag, &node);
        if (node != NIL) {
            if (stamp_it) self->nodes[node].stamp = stamp;
            if (node != self->tail) {
                unlink_node(self, node);
                append_node(self, node);
            }
            return 0;
        }
    }
    if (self->free_head != NIL) {
        node = self->free_head;
        self->free_head = self->nodes[node].next;
        if (self->free_head != NIL) __builtin_prefetch(&self->nodes[self->free_head], 1);
    } else {
        if (self->used == self->node_cap) {
            if (reserve(self, (uint64_t)self->count + 1) < 0) return -1;
        }
        node = self->used++;
    }
    self->nodes[node].key = key;
    self->nodes[node].stamp = stamp_it ? stamp : NO_STAMP;
    uint32_t absent;  /* reserve may have rebuilt the table: probe again */
    slot = probe(self, key, tag, &absent);
    self->table[slot] = ((uint64_t)tag << 32) | node;
    append_node(self, node);
    self->count++;
    return 0;
}

/* An int in [0, 2**64) as a key: 0 on success, -1 with TypeError/OverflowError set. */
static inline int as_key(PyObject *obj, uint64_t *key) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "block hashes must be ints, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *key = (uint64_t)value;
    return 0;
}

/* As as_key, but a non-key is reported as 0 (absent) with no exception: 1 when a key. */
static inline int lookup_key(PyObject *obj, uint64_t *key) {
    if (!PyLong_Check(obj)) return 0;
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *key = (uint64_t)value;
    return 1;
}

static inline int present(const LRU *self, PyObject *obj) {
    uint64_t key;
    return lookup_key(obj, &key) && contains(self, key);
}

static int as_stamp(PyObject *obj, int64_t *stamp) {
    if (obj == Py_None) {
        *stamp = NO_STAMP;
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "stamps must be ints or None, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    long long value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value == NO_STAMP) {
        PyErr_SetString(PyExc_OverflowError, "stamp out of range");
        return -1;
    }
    *stamp = (int64_t)value;
    return 0;
}

static int set_capacity(LRU *self, PyObject *obj) {
    Py_ssize_t capacity = PyNumber_AsSsize_t(obj, PyExc_OverflowError);
    if (capacity == -1 && PyErr_Occurred()) return -1;
    self->capacity = capacity < 1 ? 1 : capacity;
    return 0;
}

/* --- the Python type ------------------------------------------------------------------------- */

static int LRU_init(LRU *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity = 16384;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n:BlockLRU", kwlist, &capacity)) return -1;
    if (capacity < 1) {
        PyErr_SetString(PyExc_ValueError, "capacity must be >= 1");
        return -1;
    }
    free_arrays(self);
    self->capacity = capacity;
    return 0;
}

static PyObject *LRU_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    LRU *self = (LRU *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->capacity = 16384;
        self->free_head = self->head = self->tail = NIL;
    }
    return (PyObject *)self;
}

static void LRU_dealloc(LRU *self) {
    free_arrays(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t LRU_len(LRU *self) { return (Py_ssize_t)self->count; }

static int LRU_contains(LRU *self, PyObject *obj) { return present(self, obj); }

static PyObject *LRU_match(LRU *self, PyObject *hashes) {
    PyObject *seq = PySequence_Fast(hashes, "hashes must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq), result;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (size == 0 || !present(self, items[0])) {
        result = 0;
    } else if (present(self, items[size - 1])) {
        result = size;
    } else {
        Py_ssize_t low = 1, high = size - 1;  /* items[low - 1] present, items[high] absent */
        while (low < high) {
            Py_ssize_t middle = (low + high) / 2;
            if (present(self, items[middle])) low = middle + 1; else high = middle;
        }
        result = low;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(result);
}

/* Keys are converted PREFETCH_AHEAD ahead of their touch, into a ring, and their table slots
 * fetched then: block hashes are random, so each probe would otherwise wait on a cache miss of
 * its own. A non-key is marked and raises only when its turn comes (the keys before it are
 * touched, as in the reference). */
#define PREFETCH_AHEAD 8
#define RING 16  /* a power of two > PREFETCH_AHEAD */
typedef struct {
    uint64_t key[RING];
    char ok[RING];
} KeyRing;

static inline void ring_load(const LRU *self, KeyRing *ring, PyObject **items, Py_ssize_t j) {
    uint64_t key = 0;
    int ok = lookup_key(items[j], &key);
    ring->key[j & (RING - 1)] = key;
    ring->ok[j & (RING - 1)] = (char)ok;
    if (ok && self->table != NULL) __builtin_prefetch(&self->table[mix(key) & self->mask]);
}

/* Touch hashes tail first, then extra (both sequences or iterables); then evict over capacity. */
static PyObject *touch_all(LRU *self, PyObject *hashes, PyObject *extra, int stamp_it, int64_t stamp) {
    PyObject *seq = PySequence_Fast(hashes, "hashes must be a sequence");
    if (seq == NULL) return NULL;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t more = PyObject_LengthHint(extra != NULL && extra != Py_None ? extra : Py_None, 0);
    if (more < 0 || reserve(self, (uint64_t)self->count + (uint64_t)PySequence_Fast_GET_SIZE(seq) + (uint64_t)more) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    KeyRing ring;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t j = size - 1; j >= 0 && j >= size - PREFETCH_AHEAD; j--) ring_load(self, &ring, items, j);
    for (Py_ssize_t i = size - 1; i >= 0; i--) {
        uint64_t key;
        if (i >= PREFETCH_AHEAD) ring_load(self, &ring, items, i - PREFETCH_AHEAD);
        if (ring.ok[i & (RING - 1)]) {
            key = ring.key[i & (RING - 1)];
        } else if (as_key(items[i], &key) < 0) {  /* raises: not a key */
            Py_DECREF(seq);
            return NULL;
        }
        if (touch_key(self, key, stamp_it, stamp) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    if (extra != NULL && extra != Py_None) {
        seq = PySequence_Fast(extra, "extra must be iterable");
        if (seq == NULL) return NULL;
        items = PySequence_Fast_ITEMS(seq);
        Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < size; i++) {
            uint64_t key;
            if (as_key(items[i], &key) < 0 || touch_key(self, key, stamp_it, stamp) < 0) {
                Py_DECREF(seq);
                return NULL;
            }
        }
        Py_DECREF(seq);
    }
    evict_over(self);
    Py_RETURN_NONE;
}

static PyObject *LRU_insert(LRU *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"hashes", "extra", NULL};
    PyObject *hashes, *extra = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:insert", kwlist, &hashes, &extra)) return NULL;
    return touch_all(self, hashes, extra, 0, NO_STAMP);
}

static PyObject *LRU_touch(LRU *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"hashes", "extra", "stamp", NULL};
    PyObject *hashes, *extra, *stamp_obj;
    int64_t stamp;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:touch", kwlist, &hashes, &extra, &stamp_obj)) return NULL;
    if (as_stamp(stamp_obj, &stamp) < 0) return NULL;
    return touch_all(self, hashes, extra, 1, stamp);
}

static PyObject *LRU_load(LRU *self, PyObject *stamped) {
    PyObject *iter = PyObject_GetIter(stamped), *pair;
    if (iter == NULL) return NULL;
    while ((pair = PyIter_Next(iter)) != NULL) {
        PyObject *key_obj, *stamp_obj;
        uint64_t key;
        int64_t stamp;
        int ok = PyArg_ParseTuple(pair, "OO:load", &key_obj, &stamp_obj)
                 && as_key(key_obj, &key) == 0 && as_stamp(stamp_obj, &stamp) == 0
                 && touch_key(self, key, 1, stamp) == 0;
        Py_DECREF(pair);
        if (!ok) {
            Py_DECREF(iter);
            return NULL;
        }
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) return NULL;
    evict_over(self);
    Py_RETURN_NONE;
}

static PyObject *LRU_expire(LRU *self, PyObject *before_obj) {
    int overflow;
    long long before = PyLong_AsLongLongAndOverflow(before_obj, &overflow);
    if (before == -1 && PyErr_Occurred()) return NULL;
    if (overflow) before = overflow > 0 ? INT64_MAX : INT64_MIN;
    Py_ssize_t dropped = 0;
    while (self->head != NIL) {
        int64_t stamp = self->nodes[self->head].stamp;
        if (stamp == NO_STAMP || stamp >= before) break;
        evict_head(self);
        dropped++;
    }
    return PyLong_FromSsize_t(dropped);
}

static PyObject *LRU_trim(LRU *self, PyObject *args) {
    PyObject *hashes;
    Py_ssize_t keep;
    if (!PyArg_ParseTuple(args, "On:trim", &hashes, &keep)) return NULL;
    PyObject *seq = PySequence_Fast(hashes, "hashes must be a sequence");
    if (seq == NULL) return NULL;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t size = PySequence_Fast_GET_SIZE(seq), removed = 0;
    for (Py_ssize_t i = keep > 0 ? keep : 0; i < size && self->table != NULL; i++) {
        uint64_t key;
        uint32_t node, slot;
        if (!lookup_key(items[i], &key)) continue;
        slot = probe(self, key, mix(key), &node);
        if (node != NIL) {
            remove_node(self, node, slot);
            removed++;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(removed);
}

static PyObject *LRU_resize(LRU *self, PyObject *capacity) {
    if (set_capacity(self, capacity) < 0) return NULL;
    evict_over(self);
    Py_RETURN_NONE;
}

static PyObject *LRU_clear(LRU *self, PyObject *Py_UNUSED(ignored)) {
    free_arrays(self);
    Py_RETURN_NONE;
}

static PyObject *LRU_items(LRU *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = PyList_New((Py_ssize_t)self->count);
    if (out == NULL) return NULL;
    Py_ssize_t i = 0;
    for (uint32_t n = self->head; n != NIL; n = self->nodes[n].next, i++) {
        const Node *node = &self->nodes[n];
        PyObject *stamp = node->stamp == NO_STAMP ? Py_NewRef(Py_None) : PyLong_FromLongLong(node->stamp);
        PyObject *pair = stamp == NULL ? NULL : Py_BuildValue("(KN)", (unsigned long long)node->key, stamp);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, pair);
    }
    return out;
}

static PyObject *LRU_get_capacity(LRU *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(self->capacity);
}

static PyObject *LRU_get_nbytes(LRU *self, void *Py_UNUSED(closure)) {
    size_t bytes = (size_t)self->node_cap * sizeof(Node);
    if (self->table != NULL) bytes += ((size_t)self->mask + 1) * sizeof(uint64_t);
    return PyLong_FromSize_t(bytes);
}

static PyMethodDef LRU_methods[] = {
    {"match", (PyCFunction)LRU_match, METH_O,
     "match(hashes) -> int: number of leading hashes present (binary search over the prefix-closed set)."},
    {"insert", (PyCFunction)(void (*)(void))LRU_insert, METH_VARARGS | METH_KEYWORDS,
     "insert(hashes, extra=()): touch hashes tail first (head most recent), then extra; evict over capacity."},
    {"touch", (PyCFunction)(void (*)(void))LRU_touch, METH_VARARGS | METH_KEYWORDS,
     "touch(hashes, extra, stamp): insert that also stamps each entry (a write time, ms) for expire."},
    {"load", (PyCFunction)LRU_load, METH_O,
     "load(stamped): append (hash, stamp) pairs given least recent first (a snapshot), then evict."},
    {"expire", (PyCFunction)LRU_expire, METH_O,
     "expire(before) -> int: drop the least recent entries stamped before `before` (stops at the first "
     "newer or unstamped one); returns how many went."},
    {"trim", (PyCFunction)LRU_trim, METH_VARARGS, "trim(hashes, keep) -> int: remove hashes[keep:]; returns how many were present."},
    {"resize", (PyCFunction)LRU_resize, METH_O, "resize(capacity): set a new capacity (>= 1), evicting the least recent entries over it."},
    {"clear", (PyCFunction)LRU_clear, METH_NOARGS, "clear(): remove every entry and free the arrays."},
    {"items", (PyCFunction)LRU_items, METH_NOARGS, "items() -> list of (hash, stamp or None), least recent first."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef LRU_getset[] = {
    {"capacity", (getter)LRU_get_capacity, NULL, "entries kept at most", NULL},
    {"nbytes", (getter)LRU_get_nbytes, NULL, "bytes held by the node arrays and the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods LRU_as_sequence = {
    .sq_length = (lenfunc)LRU_len,
    .sq_contains = (objobjproc)LRU_contains,
};

static PyTypeObject LRUType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway.prefix._lru.BlockLRU",
    .tp_doc = "A bounded LRU set of 64-bit block hashes (most recent last), in C; see gateway/prefix/index.py.",
    .tp_basicsize = sizeof(LRU),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = LRU_new,
    .tp_init = (initproc)LRU_init,
    .tp_dealloc = (destructor)LRU_dealloc,
    .tp_methods = LRU_methods,
    .tp_getset = LRU_getset,
    .tp_as_sequence = &LRU_as_sequence,
};

static struct PyModuleDef lru_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "gateway.prefix._lru",
    .m_doc = "The prefix index's BlockLRU in C (see gateway/prefix/index.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__lru(void) {
    if (PyType_Ready(&LRUType) < 0) return NULL;
    PyObject *module = PyModule_Create(&lru_module);
    if (module == NULL) return NULL;
    if (PyModule_AddObjectRef(module, "BlockLRU", (PyObject *)&LRUType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
