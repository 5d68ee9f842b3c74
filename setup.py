"""Build hook for kvgate's C extensions; everything else is in pyproject.toml.

``gateway.prefix._lru`` (the prefix index's LRU in C) and ``gateway.prefix._chain`` (the prefix
hasher's chain of xxh3 block hashes in C) are optional: where no C compiler is found the build goes
on without them and ``gateway.prefix.index`` uses its pure-Python ``PyBlockLRU``,
``gateway.prefix.hashing`` its ``py_chain_hashes``.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("gateway.prefix._lru", ["gateway/prefix/_lru.c"], optional=True, extra_compile_args=["-O2"]),
    # the chain of xxh3 block hashes; xxHash 0.8.4 (BSD 2-Clause) is vendored as one header
    Extension("gateway.prefix._chain", ["gateway/prefix/_chain.c"], depends=["gateway/prefix/vendor/xxhash/xxhash.h"],
              optional=True, extra_compile_args=["-O3"]),
])
