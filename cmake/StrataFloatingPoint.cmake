# The floating-point contract of Strata's code (docs/design-notes.md,
# "The floating-point contract"), kept whatever flags the build is given
# (CMAKE_CXX_FLAGS, a build type, spack's target flags through its compiler
# wrapper, a user's -march=native):
#
#   1. IEEE arithmetic: flags of the -ffast-math family (-Ofast,
#      -ffast-math, -fassociative-math, -freciprocal-math,
#      -ffinite-math-only) are refused at configure time, with what to
#      remove; backends/floating_point.hpp refuses them at compile time too.
#   2. No contraction: a * b + c is two roundings unless the source says
#      fma(a, b, c). -ffp-contract=off for GCC and Clang (host, and HIP
#      device code), --fmad=false for nvcc (through Kokkos' nvcc_wrapper).
#      Without it, a build for a CPU with FMA instructions fuses some
#      multiply-adds and not others, by the shape of the code around them:
#      two loops that promise the same bits (the tiled GEMM and its one-loop
#      reference, a kernel run inline and in a parallel region) then differ.
#   3. Work-arounds for compiler defects that change results, each found by
#      compiling its reproducer with this build's compiler and flags.
#
# strata_floating_point_contract(OUT) sets OUT to the compile options that
# keep the contract; they go on the strata target as PUBLIC options, so that
# the apps, tests and the consumers of an installed Strata (whose code
# instantiates Strata's kernel templates) compile under them too.

include(CheckCXXSourceCompiles)

# The flags a compilation of this configuration sees (without per-target
# options): CMAKE_CXX_FLAGS and those of the build type.
function(_strata_build_flags out)
  set(flags "${CMAKE_CXX_FLAGS}")
  if(CMAKE_BUILD_TYPE)
    string(TOUPPER "${CMAKE_BUILD_TYPE}" cfg)
    set(flags "${flags} ${CMAKE_CXX_FLAGS_${cfg}}")
  endif()
  string(STRIP "${flags}" flags)
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# 1. Refuses the -ffast-math family, naming what the compiler reports.
function(_strata_refuse_fast_math flags)
  string(MD5 key "${CMAKE_CXX_COMPILER};${flags}")
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_REQUIRED_FLAGS "${flags}")
  # CMAKE_CXX_FLAGS is added by check_cxx_source_compiles itself; the build
  # type's flags come through CMAKE_REQUIRED_FLAGS (a repeat is harmless).
  set(found "")
  foreach(m __FAST_MATH__ __ASSOCIATIVE_MATH__ __RECIPROCAL_MATH__ __FINITE_MATH_ONLY__)
    check_cxx_source_compiles("
#if defined(${m}) && (${m} + 0) != 0
#error ${m}
#endif
int main() { return 0; }" STRATA_FP_NO${m}_${key})
    if(NOT STRATA_FP_NO${m}_${key})
      list(APPEND found ${m})
    endif()
  endforeach()
  if(found)
    string(REPLACE ";" ", " found "${found}")
    message(FATAL_ERROR
      "Strata: the compiler (${CMAKE_CXX_COMPILER}) with the flags \"${flags}\" defines ${found}: "
      "the -ffast-math family (-Ofast, -ffast-math, -fassociative-math, -freciprocal-math, "
      "-ffinite-math-only; for Intel icpx its default -fp-model=fast) lets the compiler reorder "
      "sums and drop NaN checks, which breaks Strata's exact sums, its overflow detection in "
      "mixed precision and every bitwise promise (docs/design-notes.md, section The floating-point contract). Remove those flags "
      "from CMAKE_CXX_FLAGS, CMAKE_CXX_FLAGS_<CONFIG> or the compiler wrapper's flags (spack: "
      "the spec's cxxflags); use -O3 instead of -Ofast, -fp-model=precise with icpx.")
  endif()
endfunction()

# 3a. GCC 12.2 (Debian 12's; fixed in later GCC sources) with AVX-512
# (-march=x86-64-v4, skylake-avx512, znver4, -mavx512f ...) at -O2 and above
# materialises a 32- or 64-byte constant whose low part repeats one value and
# whose high part is zero, such as the bytes of float{1, 1, 1, 1, 0, 0, 0, 0},
# as a broadcast of that value into the whole register: {1, 1, 1, 1, 1, 1, 1, 1}.
# Its CONST_WIDE_INT-to-broadcast conversion (ix86_convert_const_wide_int_to_
# broadcast) reads the wide integer's stored words only, and the zero words
# at the top are not stored. Any copy of such a constant array (an
# initializer list, a table) is hit. The conversion needs a move from a
# general register to a vector register, which the tuning switch
# inter_unit_moves_to_vec turns off.
set(_STRATA_GCC_BROADCAST_PROBE "
#include <cstring>
void strata_probe_8(float* p) {
  const float v[8] = {1, 1, 1, 1, 0, 0, 0, 0};
  std::memcpy(p, v, sizeof v);
}
void strata_probe_16(float* p) {
  const float v[16] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(p, v, sizeof v);
}
")

# Sets OUT to TRUE when GCC with `flags` (a string) compiles the probe into a
# broadcast from a general register (the defect), FALSE otherwise.
function(_strata_gcc_broadcast_defect out flags)
  set(src "${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/strata_gcc_broadcast_probe.cpp")
  file(WRITE "${src}" "${_STRATA_GCC_BROADCAST_PROBE}")
  separate_arguments(args UNIX_COMMAND "${flags}")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${args} -S -o - "${src}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE asm ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "Strata: could not compile the floating-point probe ${src} with "
      "${CMAKE_CXX_COMPILER} ${flags}:\n${err}")
  endif()
  if(asm MATCHES "vpbroadcast[bwdq][ \t]+%[re]?[a-z0-9]+, *%[yz]mm")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

function(strata_floating_point_contract out)
  _strata_build_flags(flags)
  _strata_refuse_fast_math("${flags}")
  set(options "")
  set(notes "")
  # 2. No contraction.
  if(CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper" OR CMAKE_CXX_COMPILER_ID STREQUAL "NVIDIA")
    # nvcc_wrapper hands --fmad to nvcc (device code) and -ffp-contract=off
    # to the host compiler. Not generator expressions: a consumer of a CUDA
    # build of Kokkos compiles through nvcc_wrapper too.
    list(APPEND options --fmad=false -ffp-contract=off)
    list(APPEND notes "no contraction (--fmad=false, host -ffp-contract=off)")
  elseif(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang|IntelLLVM")
    # GCC, Clang, hipcc (host and device code alike), icpx. A generator
    # expression: the installed target hands it to consumers, whose
    # compiler may differ.
    list(APPEND options "$<$<CXX_COMPILER_ID:GNU,Clang,AppleClang,IntelLLVM>:-ffp-contract=off>")
    list(APPEND notes "no contraction (-ffp-contract=off)")
  else()
    list(APPEND notes "compiler ${CMAKE_CXX_COMPILER_ID}: no known flag turns contraction off (test_floating_point checks whether it contracts)")
  endif()
  # 3a. GCC's AVX-512 constant defect (x86-64 only; the probe says). Not
  # through nvcc_wrapper, which CMake may report as GNU: nvcc hands host
  # code to its own host compiler, with flags of its own.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64"
     AND NOT CMAKE_CXX_COMPILER MATCHES "nvcc_wrapper")
    _strata_gcc_broadcast_defect(defect "${flags}")
    if(defect)
      set(workaround "-mtune-ctrl=^inter_unit_moves_to_vec")
      _strata_gcc_broadcast_defect(still "${flags} ${workaround}")
      if(still)
        message(FATAL_ERROR "Strata: GCC ${CMAKE_CXX_COMPILER_VERSION} with \"${flags}\" compiles "
          "constant arrays such as float{1, 1, 1, 1, 0, 0, 0, 0} into a broadcast of their first "
          "value (an AVX-512 code-generation defect), and ${workaround} does not avoid it: use "
          "another GCC or Clang, or a -march without AVX-512 (x86-64-v3)")
      endif()
      list(APPEND options "$<$<CXX_COMPILER_ID:GNU>:${workaround}>")
      list(APPEND notes "GCC ${CMAKE_CXX_COMPILER_VERSION}'s AVX-512 constant defect found by its probe, worked around with ${workaround}")
    endif()
  endif()
  string(REPLACE ";" "; " notes "${notes}")
  set(STRATA_FP_NOTES "${notes}" PARENT_SCOPE)
  set(${out} "${options}" PARENT_SCOPE)
endfunction()
