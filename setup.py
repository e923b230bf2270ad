"""Builds ortx._kernels: the C kernels in kernels/ plus the Cython marshalling layer.

ISA-specific files (*_avx2.c, *_avx512.c) select their instruction set with target attributes inside the
file, so every file is compiled with the same portable flags and the choice happens at run time in dispatch.c.
"""
import glob
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

# The library's bytes key the tuning records of the prebuilt kernels (ortx.tune.fingerprint.kernels_build), so they
# must not depend on where the build ran: debug info names the checkout and, under pip's build isolation, a random
# temporary numpy. Mapped to fixed names, two checkouts of one commit build the same bytes.
_PREFIX_MAPS = [f"-ffile-prefix-map={os.path.dirname(os.path.abspath(__file__))}=.",
                f"-ffile-prefix-map={numpy.get_include()}=numpy-include",
                f"-ffile-prefix-map={sysconfig.get_paths()['include']}=python-include"]

extension = Extension(
    "ortx._kernels",
    sources=sources,
    depends=headers,
    include_dirs=["kernels", numpy.get_include()],
    extra_compile_args=["-O3", "-std=gnu11", "-pthread", "-fno-strict-aliasing", "-Wno-unused-function",
                        *_PREFIX_MAPS],
    extra_link_args=["-pthread"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)

setup(ext_modules=cythonize([extension], language_level=3, compiler_directives={"boundscheck": False}))
