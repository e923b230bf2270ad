"""Builds ortx._kernels: the C kernels in kernels/ plus the Cython marshalling layer.

ISA-specific files (*_avx2.c, *_avx512.c) select their instruction set with target attributes inside the
file, so every file is compiled with the same portable flags and the choice happens at run time in dispatch.c.
"""
import glob
import hashlib
import os
import shutil
import sys
import sysconfig

import numpy
from setuptools import Extension, setup


def _c_compiler_or_exit():
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None and shutil.which("cc") is None:
        sys.exit(
            "ortx: no C compiler found (looked for %r and 'cc'). ortx's kernels are C and are built at install "
            "time; install gcc or clang (Debian/Ubuntu: apt-get install gcc python3-dev) and retry." % compiler
        )


_c_compiler_or_exit()

from Cython.Build import cythonize  # noqa: E402  (after the compiler check, for a clearer message)

sources = ["kernels/_kernels.pyx"] + sorted(glob.glob("kernels/*.c")) + sorted(glob.glob("kernels/ref/*.c"))
sources = [s for s in sources if not s.endswith("kernels/_kernels.c")]
# The headers: without them a change to a header alone left the extension "up to date", and a build after it
# mixed objects compiled against two versions of a struct (seen: a segfault after gemm_bf16.h's ISA table changed).
headers = sorted(glob.glob("kernels/*.h")) + sorted(glob.glob("kernels/ref/*.h"))

# The library's bytes should not depend on where the build ran (they are ortx.tune.fingerprint.kernels_build's key
# when a build passed no ORTX_KERNELS_SOURCE): debug info names the checkout and, under pip's build isolation, a
# random temporary numpy. Mapped to fixed names, two checkouts of one commit and one environment build the same bytes.
_PREFIX_MAPS = [f"-ffile-prefix-map={os.path.dirname(os.path.abspath(__file__))}=.",
                f"-ffile-prefix-map={numpy.get_include()}=numpy-include",
                f"-ffile-prefix-map={sysconfig.get_paths()['include']}=python-include"]

COMPILE_ARGS = ["-O3", "-std=gnu11", "-pthread", "-fno-strict-aliasing", "-Wno-unused-function"]
MACROS = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]


def _kernels_source_hash() -> str:
    """The C kernels' identity for tuning records (kernels/dispatch.c ortx_kernels_source): their sources, headers
    and flags, not the Cython layer, which another Cython or numpy (pip's isolated build) generates differently."""
    digest = hashlib.sha256()
    for path in [s for s in sources if s.endswith(".c")] + headers:
        digest.update(path.encode() + b"\0")
        with open(path, "rb") as handle:
            digest.update(handle.read() + b"\0")
    digest.update(repr((COMPILE_ARGS, MACROS)).encode())
    return digest.hexdigest()[:16]


extension = Extension(
    "ortx._kernels",
    sources=sources,
    depends=headers,
    include_dirs=["kernels", numpy.get_include()],
    extra_compile_args=[*COMPILE_ARGS, *_PREFIX_MAPS],
    extra_link_args=["-pthread"],
    define_macros=[*MACROS, ("ORTX_KERNELS_SOURCE", f'"{_kernels_source_hash()}"')],
)

setup(ext_modules=cythonize([extension], language_level=3, compiler_directives={"boundscheck": False}))
