"""Build hook for kvgate's one C extension; everything else is in pyproject.toml.

``gateway.prefix._lru`` (the prefix index's LRU in C) is optional: where no C compiler is found
the build goes on without it and ``gateway.prefix.index`` uses its pure-Python ``PyBlockLRU``.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gateway.prefix._lru", ["gateway/prefix/_lru.c"], optional=True, extra_compile_args=["-O2"])])
