# Installs the library, its headers and a CMake package so that downstream
# projects can find_package(Strata) and link Strata::strata.
include(CMakePackageConfigHelpers)

install(TARGETS strata EXPORT StrataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)
if(TARGET strata_nccl)
  install(TARGETS strata_nccl EXPORT StrataTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# backends/gpu_api.hpp is the library's own edge to the vendor runtime (it
# picks CUDA or HIP by a definition of this build): not installed.
foreach(dir backends layers data strategies planner training)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata/${dir}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "gpu_api.hpp" EXCLUDE)
endforeach()
# The model files (strata-train --model, strata-bench-train's W4).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/strata/models FILES_MATCHING PATTERN "*.toml")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/planner/profiles/ DESTINATION ${CMAKE_INSTALL_DATADIR}/strata/profiles FILES_MATCHING PATTERN "*.json")
install(FILES "${PROJECT_BINARY_DIR}/generated/strata_config.hpp"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)

# find_dependency() calls of StrataConfig.cmake: exactly the dependencies this
# build uses. A consumer of a static libstrata links its private dependencies
# too (CMake exports them as $<LINK_ONLY:...>), so they are found there as well.
get_target_property(_strata_type strata TYPE)
set(_strata_deps "find_dependency(Kokkos HINTS \"${Kokkos_DIR}\")" "find_dependency(Threads)")
if(STRATA_ENABLE_MPI)
  list(APPEND _strata_deps "find_dependency(MPI COMPONENTS CXX)")
endif()
if(STRATA_ENABLE_CUBLAS OR (STRATA_ENABLE_NCCL AND NOT STRATA_DEVICE_HIP))
  list(APPEND _strata_deps "find_dependency(CUDAToolkit)")
endif()
if(_strata_type STREQUAL "STATIC_LIBRARY")
  if(STRATA_ENABLE_BLAS)
    list(APPEND _strata_deps "find_dependency(BLAS)")
  endif()
  if(STRATA_ENABLE_HIPBLAS)
    list(APPEND _strata_deps "find_dependency(hipblas CONFIG HINTS \"${hipblas_DIR}\")")
  endif()
  if(STRATA_ENABLE_NCCL AND STRATA_DEVICE_HIP)
    list(APPEND _strata_deps "find_dependency(hip CONFIG HINTS \"${hip_DIR}\")"
      "find_dependency(rccl CONFIG HINTS \"${rccl_DIR}\")")
  endif()
  if(STRATA_ENABLE_ZLIB)
    list(APPEND _strata_deps "find_dependency(ZLIB)")
  endif()
endif()
string(REPLACE ";" "\n" STRATA_FIND_DEPENDENCIES "${_strata_deps}")

set(STRATA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Strata)
install(EXPORT StrataTargets NAMESPACE Strata:: DESTINATION ${STRATA_CMAKE_DIR})
configure_package_config_file(cmake/StrataConfig.cmake.in
  "${PROJECT_BINARY_DIR}/StrataConfig.cmake" INSTALL_DESTINATION ${STRATA_CMAKE_DIR})
write_basic_package_version_file("${PROJECT_BINARY_DIR}/StrataConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/StrataConfig.cmake"
  "${PROJECT_BINARY_DIR}/StrataConfigVersion.cmake" DESTINATION ${STRATA_CMAKE_DIR})
