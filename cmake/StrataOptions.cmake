# Optional dependencies: one cache variable STRATA_ENABLE_<NAME> per
# dependency, AUTO (default: on if found), ON (required) or OFF, and a
# configure summary listing what was found and used.

set(_STRATA_SUMMARY "" CACHE INTERNAL "")
set(_STRATA_NOTES "" CACHE INTERNAL "")

# strata_optional_dependency(NAME "what it is for" DEFAULT)
macro(strata_optional_dependency name doc default)
  set(STRATA_ENABLE_${name} ${default} CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE STRATA_ENABLE_${name} PROPERTY STRINGS AUTO ON OFF)
  set(_strata_request_${name} ${STRATA_ENABLE_${name}})
  set(_strata_doc_${name} "${doc}")
  if(STRATA_ENABLE_${name} STREQUAL "AUTO")
    set(STRATA_ENABLE_${name} ON)
  endif()
endmacro()

# strata_resolve_dependency(NAME <condition...>): sets STRATA_ENABLE_<NAME> to
# whether the condition holds; fails when it was requested ON and does not.
macro(strata_resolve_dependency name)
  if(${ARGN})
    set(STRATA_ENABLE_${name} ON)
  else()
    if(_strata_request_${name} STREQUAL "ON")
      message(FATAL_ERROR "STRATA_ENABLE_${name}=ON but ${name} (${_strata_doc_${name}}) was not found")
    endif()
    set(STRATA_ENABLE_${name} OFF)
  endif()
endmacro()

function(strata_note text)
  message(STATUS "Strata: ${text}")
  set(_STRATA_NOTES "${_STRATA_NOTES};${text}" CACHE INTERNAL "")
endfunction()

function(strata_summary)
  message(STATUS "")
  message(STATUS "Strata ${PROJECT_VERSION} configuration")
  message(STATUS "  Kokkos ${Kokkos_VERSION}: ${STRATA_KOKKOS_DEVICES}")
  message(STATUS "  GEMM: ${STRATA_BLAS_NAME} (portable Kokkos GEMM always available)")
  foreach(dep BLAS CUBLAS ZLIB MPI TBB NCCL)
    if(DEFINED STRATA_ENABLE_${dep})
      message(STATUS "  ${dep}: ${STRATA_ENABLE_${dep}}")
    endif()
  endforeach()
  message(STATUS "  tests: ${STRATA_ENABLE_TESTS}, benchmarks: ${STRATA_ENABLE_BENCHMARKS}, examples: ${STRATA_ENABLE_EXAMPLES}")
  message(STATUS "")
endfunction()
