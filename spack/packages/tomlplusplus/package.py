# toml++ for spack 0.2x, whose builtin repository has no recipe for it
# (spack 1.x's spack-packages has one, version 3.4.0, which this one
# matches; Strata's repository, added in front, shadows it without changing
# what gets built). Strata needs only its headers: docs/install.md.
from spack.package import *


class Tomlplusplus(CMakePackage):
    """Header-only TOML config file parser and serializer for C++17."""

    homepage = "https://marzer.github.io/tomlplusplus/"
    url = "https://github.com/marzer/tomlplusplus/archive/refs/tags/v3.4.0.tar.gz"

    license("MIT")

    version("3.4.0", sha256="8517f65938a4faae9ccf8ebb36631a38c1cadfb5efa85d9a72e15b9e97d25155")

    depends_on("cxx", type="build")
    depends_on("cmake@3.14:", type="build")
