# Spack package of Strata. Register the repository with `spack repo add ./spack`
# (from the top of Strata's source tree), then `spack install strata +mpi`.
# The recipe uses the v1 package API (`from spack.package import *` only), which
# spack 0.2x and 1.x both load; docs/install.md describes the variants and
# scripts/check-spack.sh checks the recipe against a spack checkout.
import os

from spack.package import *


class Strata(CMakePackage, CudaPackage, ROCmPackage):
    """Parallel neural-network training in C++: layers written once as Kokkos
    kernels (host threads, CUDA, HIP), data parallelism over thread ranks, MPI
    and NCCL (RCCL on AMD GPUs), and the strata-train program."""

    # Where the project is to be published; nothing is there yet, so
    # `spack install strata` cannot fetch the source. Build from a clone:
    # `spack dev-build strata@develop` in its top folder, or `spack develop
    # --path <clone> strata@develop` in an environment (docs/install.md).
    homepage = "https://github.com/strata-hpc/strata"
    git = "https://github.com/strata-hpc/strata.git"

    # The main branch: in practice the clone a dev-build or develop names.
    version("develop", branch="main")

    # ------------------------------------------------------------- Kokkos
    # Host backends of Kokkos, forwarded to the Kokkos dependency both ways
    # (Strata runs on whatever Kokkos' default execution space is).
    variant("openmp", default=True, description="Kokkos OpenMP host backend")
    variant("threads", default=False, description="Kokkos C++ threads host backend")
    variant("serial", default=True, description="Kokkos Serial host backend")
    for _backend in ("openmp", "threads", "serial"):
        depends_on(f"kokkos+{_backend}", when=f"+{_backend}")
        depends_on(f"kokkos~{_backend}", when=f"~{_backend}")
    conflicts(
        "+openmp",
        when="+threads",
        msg="Kokkos takes one parallel host backend: +openmp or +threads",
    )
    conflicts(
        "~serial",
        when="~openmp~threads",
        msg="Kokkos needs a host backend: enable +serial, +openmp or +threads",
    )

    depends_on("kokkos@3.4:")

    # Kokkos compiles for exactly one GPU architecture, so Strata's cuda_arch
    # and amdgpu_target take one value each (as in the kokkos package), and
    # Kokkos (NCCL, hipBLAS, RCCL) is required with the same one.
    variant(
        "cuda_arch",
        description="CUDA architecture (one; Kokkos is built for the same)",
        values=("none",) + CudaPackage.cuda_arch_values,
        default="none",
        multi=False,
        sticky=True,
        when="+cuda",
    )
    variant(
        "amdgpu_target",
        description="AMD GPU architecture (one; Kokkos is built for the same)",
        values=("none",) + ROCmPackage.amdgpu_targets,
        default="none",
        multi=False,
        sticky=True,
        when="+rocm",
    )
    conflicts(
        "+cuda", when="+rocm", msg="Strata builds for one GPU backend: +cuda or +rocm, not both"
    )
    conflicts(
        "+cuda", when="cuda_arch=none", msg="+cuda needs a GPU architecture, e.g. cuda_arch=90"
    )
    conflicts(
        "+rocm",
        when="amdgpu_target=none",
        msg="+rocm needs a GPU architecture, e.g. amdgpu_target=gfx90a",
    )

    depends_on("kokkos~cuda", when="~cuda")
    depends_on("kokkos~rocm", when="~rocm")
    depends_on("kokkos+cuda+cuda_lambda", when="+cuda")
    depends_on("kokkos+rocm", when="+rocm")
    depends_on("hipblas", when="+rocm")  # GEMM (rocBLAS underneath)
    # GCC cannot compile CUDA: Kokkos then builds (and hands its dependents)
    # nvcc_wrapper as the C++ compiler.
    depends_on("kokkos+wrapper", when="+cuda %gcc")

    # --------------------------------------------------- communicators
    variant("mpi", default=False, description="MPI communicator (processes and nodes)")
    # One variant for both GPU backends: the communicator (--comm nccl) runs
    # on NCCL with +cuda and on RCCL (NCCL's API for AMD GPUs) with +rocm.
    variant(
        "nccl",
        default=False,
        description="NCCL communicator (library Strata::nccl); RCCL with +rocm",
    )
    conflicts(
        "+nccl",
        when="~cuda~rocm",
        msg="+nccl requires +cuda (NCCL) or +rocm (RCCL): the communicator runs on GPUs",
    )
    depends_on("mpi", when="+mpi")
    depends_on("nccl", when="+nccl+cuda")
    depends_on("rccl", when="+nccl+rocm")

    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"kokkos+cuda cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")
        depends_on(f"nccl+cuda cuda_arch={_arch}", when=f"+nccl cuda_arch={_arch}")
    for _target in ROCmPackage.amdgpu_targets:
        depends_on(f"kokkos+rocm amdgpu_target={_target}", when=f"+rocm amdgpu_target={_target}")
        depends_on(f"hipblas amdgpu_target={_target}", when=f"+rocm amdgpu_target={_target}")
        depends_on(f"rccl amdgpu_target={_target}", when=f"+nccl+rocm amdgpu_target={_target}")

    # ----------------------------------------------------- other parts
    variant(
        "blas",
        default=True,
        when="~cuda~rocm",
        description="CBLAS on the host for GEMM (a portable Kokkos GEMM is always built)",
    )
    variant("benchmarks", default=False, description="Build and install strata-bench-* programs")
    variant("examples", default=False, description="Build and install strata-example-* programs")
    variant("python", default=False, description="The Python package strata (pybind11; docs/python.md)")

    depends_on("cxx", type="build")
    depends_on("cmake@3.18:", type="build")  # FindBLAS's BLAS::BLAS target
    depends_on("blas", when="+blas")
    depends_on("zlib-api")
    depends_on("cli11")  # strata-train and the examples
    depends_on("nlohmann-json")  # checkpoint state, metrics
    depends_on("tomlplusplus@3:")  # model files (header-only, compiled into the library)
    depends_on("googletest", type="test")
    # The Python package: a module of spack's python, on its PYTHONPATH when loaded.
    extends("python", when="+python")
    depends_on("python@3.8:", type=("build", "link", "run"), when="+python")
    depends_on("py-pybind11@2.6:", type="build", when="+python")
    depends_on("py-numpy", type=("build", "run"), when="+python")
    depends_on("py-pytest", type="test", when="+python")
    # The man pages are made from the programs' --help, which a GPU build
    # cannot run where it builds (STRATA_MAN_PAGES).
    depends_on("help2man", type="build", when="~cuda~rocm")

    # Installed CMake files must not name spack's compiler wrappers.
    filter_compiler_wrappers(
        "StrataConfig.cmake",
        "StrataTargets.cmake",
        relative_root=os.path.join("lib", "cmake", "Strata"),
    )

    test_requires_compiler = True
    downstream_src = os.path.join("tests", "downstream")

    def _kokkos_cxx(self):
        """The C++ compiler the Kokkos dependency asks for (nvcc_wrapper with +wrapper)."""
        kokkos = self.spec["kokkos"]
        try:
            return kokkos.package.kokkos_cxx  # spack 1.x: a property of the kokkos package
        except AttributeError:
            return kokkos.kokkos_cxx  # spack 0.2x: set by kokkos' setup_dependent_package

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("Kokkos_ROOT", spec["kokkos"].prefix),
            self.define("CMAKE_INSTALL_LIBDIR", "lib"),
            # Every optional part explicitly ON or OFF, never AUTO: the build
            # uses what the spec says, not whatever else is on the machine.
            self.define_from_variant("STRATA_ENABLE_MPI", "mpi"),
            self.define_from_variant("STRATA_ENABLE_NCCL", "nccl"),
            self.define_from_variant("STRATA_ENABLE_CUBLAS", "cuda"),
            self.define_from_variant("STRATA_ENABLE_HIPBLAS", "rocm"),
            self.define("STRATA_ENABLE_BLAS", spec.satisfies("+blas")),
            self.define("STRATA_ENABLE_ZLIB", True),
            self.define("STRATA_ENABLE_TESTS", self.run_tests),
            self.define_from_variant("STRATA_ENABLE_BENCHMARKS", "benchmarks"),
            self.define_from_variant("STRATA_ENABLE_EXAMPLES", "examples"),
            self.define("STRATA_MAN_PAGES", spec.satisfies("~cuda~rocm")),
            self.define("STRATA_PYTHON", "ON" if spec.satisfies("+python") else "OFF"),
        ]
        if spec.satisfies("+python"):
            args.append(self.define("STRATA_PYTHON_EXECUTABLE", spec["python"].command.path))
            # Where spack's python looks for the packages that extend it.
            args.append(self.define("STRATA_PYTHON_INSTALL_DIR", python_platlib))
        if spec.satisfies("+cuda"):
            args.append(self.define("CMAKE_CXX_COMPILER", self._kokkos_cxx()))
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
        if spec.satisfies("+rocm"):
            args.append(self.define("CMAKE_CXX_COMPILER", spec["hip"].hipcc))
        if spec.satisfies("+mpi"):
            args.append(self.define("MPI_HOME", spec["mpi"].prefix))
        return args

    def check(self):
        """Build-time tests (spack install --test=root): the whole ctest suite."""
        ctest = Executable(self.spec["cmake"].prefix.bin.ctest)
        # The build directory is the builder's: spack 1.x calls this method
        # on an adapter that forwards build_directory (and has no .builder);
        # spack 0.2x calls it on the package, which has only .builder.
        try:
            build_directory = self.build_directory
        except AttributeError:
            build_directory = self.builder.build_directory
        with working_dir(build_directory):
            # make_jobs: the build's parallelism (spack's -j, build_jobs).
            ctest("--output-on-failure", "--timeout", "600", "-j", str(make_jobs))

    @run_after("install")
    def cache_downstream_test(self):
        """Keeps tests/downstream for the stand-alone test_downstream."""
        cache_extra_test_sources(self, [self.downstream_src])

    def _test_host_cxx(self):
        """The C++ compiler (not spack's wrapper) for stand-alone tests."""
        if os.environ.get("CXX"):  # spack 0.2x sets it for test_requires_compiler
            return os.environ["CXX"]
        return self.spec["cxx"].package.cxx  # spack 1.x: the compiler is a dependency

    def _strata_train(self):
        return Executable(join_path(self.prefix.bin, "strata-train"))

    def test_version(self):
        """strata-train --version prints the build configuration"""
        out = self._strata_train()("--version", output=str.split, error=str.split)
        for expected in ("Strata ", "Kokkos ", "GEMM:", "communicators:"):
            assert expected in out, f"'{expected}' missing from strata-train --version: {out}"
        if self.spec.satisfies("+mpi"):
            communicators = out.split("communicators:")[1]
            assert "mpi" in communicators, "+mpi build without the MPI communicator"

    def test_train(self):
        """strata-train trains an MLP for a few steps on synthetic data"""
        metrics = join_path(os.getcwd(), "metrics.jsonl")
        self._strata_train()(
            "--dataset", "synthetic", "--layers", "10,5,2", "--loss", "mse",
            "--batch-size", "32", "--steps", "20", "--log-every", "5",
            "--metrics", metrics,
            output=str.split, error=str.split,
        )  # fmt: skip
        with open(metrics) as f:
            lines = f.read()
        assert '"loss"' in lines, f"no training loss in {metrics}: {lines}"
        assert "samples_per_sec" in lines, f"no summary line in {metrics}: {lines}"

    def test_downstream(self):
        """builds tests/downstream against the installed package and runs it"""
        spec = self.spec
        src = join_path(self.test_suite.current_test_cache_dir, self.downstream_src)
        cxx = self._test_host_cxx()
        if spec.satisfies("+cuda ^kokkos+wrapper"):
            os.environ["NVCC_WRAPPER_DEFAULT_COMPILER"] = cxx
            cxx = join_path(spec["kokkos-nvcc-wrapper"].prefix.bin, "nvcc_wrapper")
        elif spec.satisfies("+rocm"):
            cxx = join_path(spec["hip"].prefix.bin, "hipcc")
        prefixes = [self.prefix] + [dep.prefix for dep in spec.traverse(root=False)]
        cmake = Executable(spec["cmake"].prefix.bin.cmake)
        build = join_path(os.getcwd(), "downstream-build")
        args = [
            "-S", src, "-B", build,
            self.define("CMAKE_CXX_COMPILER", cxx),
            self.define("CMAKE_PREFIX_PATH", ";".join(str(p) for p in prefixes)),
        ]  # fmt: skip
        if spec.satisfies("+mpi"):
            args.append(self.define("MPI_HOME", spec["mpi"].prefix))
        if spec.satisfies("+cuda"):
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
        cmake(*args)
        cmake("--build", build)
        out = Executable(join_path(build, "strata-downstream"))(output=str.split, error=str.split)
        assert "loss" in out, f"unexpected output of strata-downstream: {out}"
