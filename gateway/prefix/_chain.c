/* The prefix hasher's block chain in C: gateway.prefix._chain.chain_hashes.
 *
 * The same function as gateway.prefix.hashing.py_chain_hashes (the reference, and the fallback
 * where this module is not built): h_i = xxh3_64(block_i, seed=h_{i-1}) over the full
 * `block_bytes` blocks of `data`, at most `max_blocks`, from block `start` on (then `seed` is the
 * hash of block `start - 1`), returned as a tuple of ints in [0, 2**64). One call per prompt
 * instead of one Python call and one 256-byte slice per block: the hashing itself runs at xxh3's
 * speed (about 20 GB/s), so what is left is building the tuple.
 *
 * xxh3 is xxHash 0.8.4 (vendor/xxhash/xxhash.h, BSD 2-Clause, the copy the `xxhash` package on
 * PyPI bundles), compiled inline here: XXH3_64bits_withSeed is the function behind
 * xxhash.xxh3_64_intdigest(data, seed), and xxh3's output does not depend on the instruction set
 * it is computed with, so both sides give the same hashes on every machine.
 *
 * Errors: TypeError for data that is not a bytes-like object or arguments that are not ints;
 * OverflowError for a seed outside [0, 2**64); ValueError for block_bytes < 1 or a negative
 * max_blocks or start. The GIL is held throughout (a 256 KiB prompt hashes in ~15 us).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include "vendor/xxhash/xxhash.h"

static PyObject *chain_hashes(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"data", "block_bytes", "seed", "max_blocks", "start", NULL};
    Py_buffer data;
    Py_ssize_t block_bytes, max_blocks, start = 0;
    PyObject *seed_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*nO!n|n:chain_hashes", kwlist, &data, &block_bytes,
                                     &PyLong_Type, &seed_obj, &max_blocks, &start)) {
        return NULL;
    }
    PyObject *result = NULL;
    unsigned long long seed = PyLong_AsUnsignedLongLong(seed_obj);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) goto done;
    if (block_bytes < 1 || max_blocks < 0 || start < 0) {
        PyErr_SetString(PyExc_ValueError, "block_bytes must be >= 1, max_blocks and start >= 0");
        goto done;
    }
    Py_ssize_t blocks = data.len / block_bytes;
    if (blocks > max_blocks) blocks = max_blocks;
    Py_ssize_t count = blocks > start ? blocks - start : 0;
    result = PyTuple_New(count);
    if (result == NULL) goto done;
    const char *at = (const char *)data.buf + start * block_bytes;
    XXH64_hash_t h = (XXH64_hash_t)seed;
    for (Py_ssize_t i = 0; i < count; i++, at += block_bytes) {
        h = XXH3_64bits_withSeed(at, (size_t)block_bytes, h);
        PyObject *item = PyLong_FromUnsignedLongLong((unsigned long long)h);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, item);
    }
done:
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef chain_methods[] = {
    {"chain_hashes", (PyCFunction)(void (*)(void))chain_hashes, METH_VARARGS | METH_KEYWORDS,
     "chain_hashes(data, block_bytes, seed, max_blocks, start=0) -> tuple[int, ...]\n\n"
     "Chained xxh3_64 hashes of data's full block_bytes blocks (at most max_blocks), from block start on."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef chain_module = {
    PyModuleDef_HEAD_INIT, "_chain", "The prefix hasher's block chain in C (xxh3).", -1, chain_methods,
};

PyMODINIT_FUNC PyInit__chain(void) { return PyModule_Create(&chain_module); }
